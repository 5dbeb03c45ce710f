"""``clinical``: clinical shorthand (nursing and ICU notes, discharge summaries).

Evidence: the share of words that are clinical abbreviations, shorthand or drug names
(:mod:`privatize.redaction.styles.vocab`).

Rules:

* no re-cased NER pass: upper-case clinical shorthand is not caseless chat, and re-cased
  it turns ``LASIX`` and ``ABD SOFT`` into people and places;
* an NER name (PERSON) is kept only when it holds a known first name or surname that is
  not a clinical word, or stands next to a title or role (``Dr.``, ``RN``, ``wife``,
  ``daughter``); an NER place or organisation only next to a place cue
  (``transferred to``, ``admitted from``), with a place head word (``Hospital``) or as
  a rare capitalised name in cased text (``Springfield``);
* names after titles and roles in any case (``dtr laverne``, ``DAUGHTER PHILOMENA``,
  ``s. roberto rrt``), places after movement cues (``TRANSFERRED TO GH``), dates in
  shorthand (``8/23``: a valid month and day, not a fraction or a ventilator setting)
  and years after a cue (``CABG 1957``, ``in 1983``, ``CA'88``);
* ages stay identifiers at any age (HIPAA's safe harbour names only ages over 89, and
  the PhysioNet gold follows it; a data owner under other rules counts every age).
"""

from __future__ import annotations

import regex as re

from privatize.redaction.filters import is_known_name, zipf
from privatize.redaction.spans import Span
from privatize.redaction.styles import DocumentStyle, register_style
from privatize.redaction.styles.vocab import CLINICAL_CONTEXT, is_clinical_word
from privatize.redaction.words import stop_words

_NAME_TYPES = frozenset({"PERSON", "LOCATION", "ORGANIZATION", "NRP"})
_NER = frozenset({"spacy", "spacy_case", "name_list", "propagation"})

_TITLE = r"dr|drs|doctor|mr|mrs|miss"
_ROLE = (r"dr|drs|doctor|md|rn|np|nurse|attending|resident|fellow|intern|wife|husband|spouse|son|sons|daughter|"
         r"daughters|dtr|dau|mother|mom|father|dad|brother|bro|sister|sis|niece|nephew|cousin|aunt|uncle|friend|"
         r"grandson|granddaughter|grandmother|grandfather|fiance|fiancee|neighbor|neighbour|mr|mrs|miss|hcp|"
         r"proxy|guardian|pastor|rabbi|priest|case\s+manager|social\s+worker|caregiver|girlfriend|boyfriend|"
         r"partner|ho|resident|attending|drs'")
_AFTER_ROLE = r"rn|md|np|rrt|pa|pa-c|do|sn|cna|lpn|pct"
_WORD = r"[^\W\d_][\p{L}'’-]*"
_ROLE_BEFORE = re.compile(rf"(?i)\b(?:{_ROLE})\b\.?(?:[ \t]*[:,]?[ \t]*)(?P<n>{_WORD}(?:[ \t]+{_WORD})?)")
_ROLE_AFTER = re.compile(rf"(?i)(?P<n>{_WORD}(?:[ \t]+{_WORD})?)[ \t]*,?[ \t]*\b(?:{_AFTER_ROLE})\b(?![\w/])")
def _span_ctx(span: Span) -> bool:
    return bool(span[5])


def _initial(text: str, s: int) -> bool:
    """Whether position ``s`` starts a sentence or a line."""
    k = s - 1
    while k >= 0 and text[k] in " \t":
        k -= 1
    return k < 0 or text[k] in ".!?:\n"


_INITIAL_BEFORE = re.compile(r"(?<![\w.])[A-Za-z]\.[ \t]*$")

_PLACE_CUE = re.compile(
    r"(?i)\b(?:transferr?ed|transfer|xfer(?:'?d|ed)?|admitted|sent|went|came|returned|readmitted|discharged|"
    r"d/?c'?d|brought|taken|arrived|presented|back|seen|transported|moved|go|going|goes|lives|living|resides)[ \t]+(?:back[ \t]+)?(?:to|from|at|in)"
    r"[ \t]+(?:the[ \t]+)?(?P<p>{w}(?:[ \t]+{w}){{0,2}})".format(w=r"[^\W\d_][\p{L}'’&-]*"))
_PLACE_HEAD = re.compile(
    r"(?i)(?P<p>(?:{w}[ \t]+){{1,3}})(?:hospital|hosp|medical[ \t]+cent(?:er|re)|med[ \t]+ctr|campus|rehab|"
    r"nursing[ \t]+home|manor|clinic|health[ \t]+cent(?:er|re)|infirmary)\b".format(w=r"[^\W\d_][\p{L}'’&.-]*"))

# m/d or m/d/yy: a valid month and day; not a fraction (1/2, 3/4), not a ventilator or
# pressure setting (PS 10/5, CPAP 5/5), not part of a longer slash chain (co/ci/svr 5/2.5/800)
_SHORT_DATE = re.compile(r"(?<![\d/.:-])(?P<m>1[0-2]|0?[1-9])/(?P<d>3[01]|[12]\d|0?[1-9])(?:/(?:\d{4}|\d{2}))?"
                         r"(?![\d/%]|\.\d|[ \t]*%)")
_SETTING_BEFORE = re.compile(r"(?i)(?:\b(?:ps|psv|peep|cpap|bipap|vent|vent\s+settings|settings|imv|simv|ac|on|of|"
                             r"peep/ps|co/ci/svr|ci|svr|to|x|in|wean(?:ed)?(?:\s+to)?|and|&|,|~|#)[ \t]*[:=-]?[ \t]*)$")
_FOLLOWED_BY_UNIT = re.compile(r"(?i)[ \t]*(?:bottles?|of|strength|st|dose|way|cm|ns|hrs?|hours?|[a-z]{2,}/)\b")
_YEAR = re.compile(r"(?<![\d/.:@~#-])(?:19[0-9]\d|20[0-4]\d)(?![\d:]|[ \t]*(?:cc|ml|mg|-[ \t]*\d))")
_YEAR_CUE = re.compile(r"(?i)(?:\b(?:in|since|of|year|from|circa|dated?|until|till|summer|spring|fall|winter|"
                       r"s/p[ \t]+[\w/-]+|[a-z]{3,}),?[ \t]*|,[ \t]*(?:19|20)\d\d,?[ \t]*)$")
_TIME_CUE = re.compile(r"(?i)(?:\b(?:at|by|due|about|approx|around|after|before|until|till|from|@|~)[ \t]*)$")
_DATE_WORD = re.compile(r"(?i)\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
                       r"sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|monday|tuesday|wednesday|"
                       r"thursday|friday|saturday|sunday|christmas|thanksgiving|easter)\b|\b\d{1,2}(?:st|nd|rd|th)\b")
_DOSE = re.compile(r"(?i)\d+(?:[.,]\d+)?[ \t]*(?:mcg|mg|ml|cc|u|units?|meq|l|g|kg|x[ \t]*\d+)|\d+[ \t]*x[ \t]*\d+")
_WARD = re.compile(r"(?i)\b(?:on|to|from|at|onto)[ \t]+(?:the[ \t]+)?(?P<p>[^\W\d_][\p{L}'’-]+)[ \t]+\d{1,2}(?![\d/:.%])")
_STREET_WORD = re.compile(r"(?i)\b(?:street|road|avenue|lane|boulevard|blvd|drive|parkway|highway)\b")
_VENT_BEFORE = re.compile(r"(?i)\b(?:ps|psv|peep|cpap|bipap|vent|imv|simv|flowby|wean(?:ed|ing)?|settings?|ac|"
                          r"fio2|co/ci/svr|ci|svr|abg)\b[^\n]{0,24}$")
_APOS_YEAR = re.compile(r"(?<=[A-Za-z])['’](?:[0-9]\d)(?![\d%])")


def _is_nameish(word: str) -> bool:
    """A word that may be a name: not a stop word, not a clinical word."""
    w = word.strip(".'’-")
    return bool(w) and w.lower() not in stop_words() and not is_clinical_word(w) and not w.isdigit()


def _name_evidence(word: str, strong: bool = False) -> bool:
    """A word that may be a name next to a role: a known name (any known name after a
    title such as ``Dr``; otherwise one that is not also a common word: ``STATES``,
    ``Line`` and ``Brown`` are census surnames), or capitalised and rare."""
    w = word.strip(".'’-")
    if not _is_nameish(w) or len(w) < 2:
        return False
    if is_known_name(w) and (strong or zipf(w) < 4.0 or (w[:1].isupper() and not w.isupper())):
        return True
    return w[:1].isupper() and zipf(w) < 3.0


@register_style
class Clinical(DocumentStyle):
    name = "clinical"
    recase = False
    threshold = 0.12

    def evidence(self, text: str, words: list[str]) -> float:
        hits = sum(1 for w in words if w in CLINICAL_CONTEXT or is_clinical_word(w))
        return hits / len(words)

    # ---- pi candidates ----------------------------------------------------------------
    def drop(self, text: str, span: Span) -> str | None:
        s, e, etype, _sc, source, _ctx = span
        if etype == "DATE_TIME" and source == "spacy" and not _DATE_WORD.search(text, s, e):
            return "NER date without a month, weekday or ordinal (vital signs, times, doses)"
        if etype == "REFERENCE_NUMBER":
            piece = text[s:e]
            if sum(c.isdigit() for c in piece) < 2 or _DOSE.search(piece) or re.search(r"\d[ \t]*-[ \t]*\d", piece):
                return "not a reference (a word or a dose)"
            return None
        if etype == "STREET_ADDRESS" and not _STREET_WORD.search(text, s, e):
            return "no street in it (clinical numbers)"
        if etype == "PHONE_NUMBER":
            piece = text[s:e]
            digits = sum(c.isdigit() for c in piece)
            if ("/" in piece and digits < 10) or (digits < 7 and not _span_ctx(span)):
                return "a pressure or a range, not a phone number"
            return None
        if etype == "URL" and not re.match(r"(?i)(?:https?://|www\.)", text[s:e]):
            return "a missing space after a full stop"
        if etype == "DATE_TIME" and source == "ValidatedDateRecognizer" and re.fullmatch(r"\d{1,2}/\d{1,2}", text[s:e]):
            return "short numeric date: the clinical rule decides"
        if etype not in _NAME_TYPES or source.startswith("clinical_"):
            return None
        piece = text[s:e]
        words = [w.strip(".,;:()'’\"") for w in piece.split()]
        words = [w for w in words if w]
        if not words:
            return "empty"
        if all(is_clinical_word(w) or w.lower() in stop_words() or (zipf(w) >= 3.5 and not is_known_name(w))
               for w in words):
            return "clinical or common words"
        if self._cued(text, s, e) and any(_name_evidence(w) for w in words):
            return None
        if etype == "PERSON":
            if piece.islower() or piece.isupper():
                return "no name evidence (caseless)"
            if any(is_known_name(w) and not is_clinical_word(w) and (zipf(w) < 4.0 or not _initial(text, s))
                   for w in words):
                return None
            return "no name evidence"
        if _PLACE_HEAD.search(piece + " hospital") and any(w.lower() in ("hospital", "hosp", "rehab", "campus",
                                                                          "center", "centre", "clinic", "manor")
                                                           for w in words):
            return None
        if not piece.isupper() and not piece.islower() and all(not is_clinical_word(w) for w in words) \
                and any(w[:1].isupper() and zipf(w) < 3.5 for w in words):
            return None  # "Springfield", "Mercy Hospital": a proper name in cased text
        return "place without a cue"

    @staticmethod
    def _cued(text: str, s: int, e: int) -> bool:
        """A role or title just before or after, or a movement cue before (a place)."""
        before = text[max(0, s - 30):s]
        after = text[e:e + 12]
        if re.search(rf"(?i)\b(?:{_ROLE})\b\.?[ \t]*[:,]?[ \t]*$", before):
            return True
        if re.match(rf"(?i)[ \t]*,?[ \t]*(?:{_AFTER_ROLE})\b", after):
            return True
        return _PLACE_CUE.search(text[max(0, s - 40):e]) is not None

    # ---- the style's own rules ----------------------------------------------------------
    def extra(self, text: str) -> list[Span]:
        out: list[Span] = []
        for rx in (_ROLE_BEFORE, _ROLE_AFTER):
            for m in rx.finditer(text):
                strong = rx is _ROLE_BEFORE and re.match(rf"(?i)(?:{_TITLE})\b", m.group(0)) is not None
                out += self._names(text, m.start("n"), m.end("n"), after=rx is _ROLE_AFTER, strong=strong)
        for m in _PLACE_CUE.finditer(text):
            out += self._place(text, m.start("p"), m.end("p"))
        for m in _WARD.finditer(text):  # "to QUARTERMAIN 6": a ward and its floor
            w = m.group("p")
            if not is_clinical_word(w) and w.lower() not in stop_words() and zipf(w) < 3.0 and not w.isupper() \
                    or (w.isupper() and len(w) >= 5 and zipf(w) < 3.0 and not is_clinical_word(w)):
                out.append((m.start("p"), m.end("p"), "LOCATION", 0.5, "clinical_place", True))
        for m in _PLACE_HEAD.finditer(text):
            out += self._place(text, m.start("p"), m.end("p"), head=True)
        for m in _SHORT_DATE.finditer(text):
            mo, d = int(m.group("m")), int(m.group("d"))
            if "/" not in m.group(0)[m.end("d") - m.start():] and (mo < d <= 4 or mo == d):
                continue  # 1/2, 1/4, 3/4: a fraction; 5/5: a strength or a setting
            if _VENT_BEFORE.search(text, max(0, m.start() - 40), m.start()):
                continue  # "PSV 10/5", "CPAP .5% 5/8", "wean down to 10/5": a setting
            if _FOLLOWED_BY_UNIT.match(text, m.end()):
                continue
            out.append((m.start(), m.end(), "DATE_TIME", 0.6, "clinical_date", False))
        for m in _YEAR.finditer(text):
            before = text[max(0, m.start() - 24):m.start()]
            if _TIME_CUE.search(before) or not _YEAR_CUE.search(before):
                continue
            out.append((m.start(), m.end(), "DATE_TIME", 0.5, "clinical_year", False))
        for m in _APOS_YEAR.finditer(text):
            out.append((m.start() + 1, m.end(), "DATE_TIME", 0.5, "clinical_year", False))
        return out

    @staticmethod
    def _names(text: str, s: int, e: int, after: bool, strong: bool = False) -> list[Span]:
        words = [(m.start() + s, m.end() + s, m.group(0)) for m in re.finditer(_WORD, text[s:e])]
        if after:
            words = words[::-1]  # nearest the role first
        picked = []
        for a, b, w in words:
            if not _name_evidence(w, strong):
                break
            picked.append((a, b))
        if not picked:
            return []
        a, b = min(p[0] for p in picked), max(p[1] for p in picked)
        if after:  # "s. roberto rrt": the initial before the name too
            m = _INITIAL_BEFORE.search(text, max(0, a - 4), a)
            if m:
                a = m.start()
        return [(a, b, "PERSON", 0.6, "clinical_role", True)]

    @staticmethod
    def _place(text: str, s: int, e: int, head: bool = False) -> list[Span]:
        words = [(m.start() + s, m.end() + s, m.group(0)) for m in re.finditer(r"[^\W\d_][\p{L}'’&.-]*", text[s:e])]
        if head:
            words = words[::-1]
        picked = []
        for a, b, w in words:
            lw = w.lower().strip(".")
            cased_word = w[:1].isupper() and not w.isupper()
            short_caps = w.isupper() and 2 <= len(w) <= 5 and zipf(lw) < 3.5  # GH, VAMC: no clinical abbreviation
            limit = 5.0 if head else 3.5 if cased_word else 2.5
            if lw in stop_words() or is_clinical_word(lw) or (zipf(lw) >= limit and not short_caps):
                break
            picked.append((a, b))
        if not picked:
            return []
        a, b = min(p[0] for p in picked), max(p[1] for p in picked)
        return [(a, b, "LOCATION", 0.5, "clinical_place", True)]
