"""``clinical``: clinical shorthand (nursing and ICU notes, discharge summaries).

Evidence: the share of words that are clinical abbreviations, shorthand or drug names
(:mod:`privatize.redaction.styles.vocab`).

Rules:

* no re-cased NER pass: upper-case clinical shorthand is not caseless chat, and re-cased
  it turns ``LASIX`` and ``ABD SOFT`` into people and places;
* clinical words are never names: abbreviations, drug names (also cut short, ``Ceftaz``,
  or misspelt, ``Fetanyl``) and dictionary words (Webster's Second: ``femoral``,
  ``supine``) unless they are census names;
* an NER name (PERSON) is kept when it holds a known name, stands next to a title or role
  (``Dr.``, ``RN``, ``wife``, ``daughter``) or is a rare capitalised word inside a
  sentence; an NER place or organisation next to a place cue (``transferred to``), or
  written as a proper name in cased text (``Phoenix General Hospital``, ``New York``);
* names in any case after titles and roles (``dtr laverne``, ``DAUGHTER PHILOMENA``,
  ``s. roberto rrt``, ``DR LAVELY``), first name + surname (``lorrie morales``, ``DICK
  CUCCHIARA``) and initial + surname after a cue (``per B. KARGAS``);
* places: cities and towns (GeoNames: ``PIKESVILLE``, ``rome``), hospital names (``St Mary
  Hospital``, ``Harford Memorial``, ``University of Maryland``) and abbreviations (``GH``,
  ``VAMC``), wards with their floor (``QUARTERMAIN 2``), places after movement cues
  (``TRANSFERRED TO GH``);
* numbers: dates in shorthand (``8/23``: a valid month and day, not a fraction, a pain
  score or a ventilator setting; ``4/97``, ``10-6-06``), years after a cue (``CABG 1957``,
  ``in 1983``, ``CA'88``, ``62'``), pager and phone numbers in a phone's form or after a
  cue (``Pager #32007``); NER dates without a day and month, pressures read as phone
  numbers and doses read as references are dropped;
* issue 51: names in quotes or parentheses after a role (``daughter "sarah"``, ``CONTACT
  PERSON (CHARLIE)``), joined to a role's name (``daughters sarah and margie``, ``SISTER &
  CHARLIE``), and first names that speak or are spoken with (``JOHN STATES``, ``talk with
  thomas``); census first names that begin drug names (``Thomas``, ``Martin``) are names;
  hospital-name words before a head word (``MEMORIAL HOSPITAL``), lower-case wards with
  their floor, cities and hospital abbreviations after a cue (``to quartermain 2``,
  ``returned to new haven``, ``to gh er``); phone extensions (``x45``) and local numbers
  after a cue (``call 555-1234``, ``beeper 4-1187``); shorthand compounds (``CV-NSR``,
  ``NISICU``, ``PAD'S``) and doses are no wards, NER names with digits (``Tylenol X2``) or
  with the sentence after them (``SMOLAREK AWARE OF ...``) are dropped;
* a person's title is not part of the name (``Mr. [Lomish]``, ``Dr [Smith]``), nor a
  place's generic head word (``[Harford Memorial] Hospital``, ``[U of MD] Med Center``):
  the convention of clinical de-identification (PhysioNet; i2b2 for titles); both stay in
  the text;
* ages stay identifiers at any age (HIPAA's safe harbour names only ages over 89, and
  the PhysioNet gold follows it; a data owner under other rules counts every age).
"""

from __future__ import annotations

import functools

import regex as re

from privatize.redaction.filters import is_known_name, zipf
from privatize.redaction.spans import Span
from privatize.redaction.styles.base import DocumentStyle, register_style
from privatize.redaction.styles.vocab import (CLINICAL_CONTEXT, city_first_words, city_names, is_clinical_like,
                                              first_names, is_clinical_word, is_dictionary_word,
                                              is_misspelt_or_compound)
from privatize.redaction.words import stop_words

_NAME_TYPES = frozenset({"PERSON", "LOCATION", "ORGANIZATION", "NRP"})

_TITLE = r"dr|drs['’]?|doctor|mr|mrs|miss"
_ROLE = (r"dr|drs|doctor|md|rn|np|nurse|attending|resident|fellow|intern|wife|husband|spouse|son|sons|daughter|"
         r"daughters|dtr|dau|mother|mom|father|dad|brother|bro|sister|sis|niece|nephew|cousin|aunt|uncle|friend|"
         r"grandson|granddaughter|grandmother|grandfather|fiance|fiancee|neighbor|neighbour|mr|mrs|miss|hcp|"
         r"proxy|guardian|pastor|rabbi|priest|case\s+manager|social\s+worker|caregiver|girlfriend|boyfriend|"
         r"partner|ho|resident|attending|contact\s+person|significant\s+other")
_AFTER_ROLE = r"rn|md|np|rrt|pa|pa-c|do|sn|cna|lpn|pct"
_WORD = r"[^\W\d_][\p{L}'’-]*"
_ROLE_BEFORE = re.compile(rf"(?i)\b(?:{_ROLE})\b\.?(?:[ \t]*[:,]?[ \t]*[(\"“‘]?[ \t]*)(?:(?:&|and)[ \t]+)?(?P<n>{_WORD}\.?(?:[ \t]+{_WORD}){{0,2}})")
# names before a role ("anita morris rn"): the role is found first, the words before it
# read backwards from there (a pattern that starts at every word is 20 times slower)
_AFTER_ROLE_WORD = re.compile(rf"(?i)\b(?:{_AFTER_ROLE})\b(?![\w/])|\((?:daughter|son|wife|husband|sister|brother|mother|"
                              rf"father|niece|nephew|friend|hcp|proxy|s/o|significant other)\)")
_WORDS_BEFORE = re.compile(rf"(?P<n>{_WORD}(?:[ \t]+{_WORD})?)[ \t]*,?[ \t]*$")


@functools.lru_cache(maxsize=16)
def _cased_doc(text: str) -> bool:
    """Whether ``text`` is written mostly in lower case with capitals (not in capitals)."""
    sample = text[:4000]
    upper = sum(c.isupper() for c in sample)
    lower = sum(c.islower() for c in sample)
    return lower > 3 * upper


def _span_ctx(span: Span) -> bool:
    return bool(span[5])


def _initial(text: str, s: int) -> bool:
    """Whether position ``s`` starts a sentence or a line."""
    k = s - 1
    while k >= 0 and text[k] in " \t":
        k -= 1
    return k < 0 or text[k] in ".!?:\n"


_PAIR = re.compile(r"(?<![\w'’-])(?P<f>\p{L}[\p{L}'’-]+)[ \t]+(?:(?P<i>\p{L})\.?[ \t]+)?(?P<l>\p{L}[\p{L}'’-]+)"
                   r"(?![\w'’-])")
_PER = re.compile(r"(?i)\b(?:per|by)[ \t]+$")
_INITIAL_NAME = re.compile(r"(?<![\w.'’])(?P<i>\p{L})\.?[ \t]+(?P<l>\p{L}[\p{L}'’-]{2,})(?![\w'’-])")
_INITIAL_CUE = re.compile(r"(?i)(?:\b(?:per|by|dr|drs|md|np|rn|with|to|and|from|call(?:ed)?|page(?:d)?|notified|"
                          r"informed|aware)\.?[ \t]*|[.,;:(][ \t]*|\n[ \t]*)$")
_ROLE_WORD = re.compile(rf"(?:{_ROLE}|{_AFTER_ROLE}|family|famliy|pt|patient|parents?|children|kids)")
# a second name joined to a role's name ("daughters sarah and margie", "SISTER & CHARLIE")
_AND_NAME = re.compile(rf"[ \t]*(?:and|&)[ \t]+(?P<n>{_WORD})")
# a first name with a verb of talking or visiting ("JOHN STATES", "spoke with Thomas")
_SAYS = (r"states?|stated|says|said|reports?|reported|asked|asks|called|calls|visited|visits|aware|"
         r"notified|updated|informed|wants?|wanted|requests?|requested|agrees?|agreed|spoke|talked|came|left|"
         r"will|would|was|is|has|had")
_SAY_AFTER = re.compile(rf"(?i)(?<![\w'’-])(?P<n>{_WORD})[ \t]+(?:{_SAYS})\b")
_TALK_BEFORE = re.compile(rf"(?i)\b(?:(?:spoke|speak|speaking|talked|talking|talk|met|meeting|spoken)[ \t]+(?:with|to)|"
                          rf"called|updated|informed|notified|paged|visited[ \t]+by|per)[ \t]+(?P<n>{_WORD})(?![\w'’-])")
# words that name a hospital in front of its head word ("TAKEN TO MEMORIAL HOSPITAL")
_HOSPITAL_NAME_WORDS = frozenset("""
memorial general community regional county mercy baptist methodist presbyterian lutheran episcopal
university veterans children's childrens union providence samaritan sinai deaconess adventist
""".split())
_GENERIC_BEFORE = re.compile(r"(?i)\b(?:a|an|another|any|other|outside|local|nearby|this|that|same|his|her|their)[ \t]+$")
_HOSPITAL_ABBR_LOWER = re.compile(r"(?<![\w/-])(?:[a-z]{0,2}gh|[a-z]{1,3}mc)(?![\w/-])")
# an extension after a phone number ("410 392 0780 x45", "ext. 2231")
_EXTENSION = re.compile(r"(?i)[ \t,]*(?:x|ext\.?|extension)[ \t]*#?[ \t]*(?P<n>\d{2,6})(?!\d)")
# a local number (no area code) after a cue ("call 555-1234", "beeper 3-2007")
_LOCAL_PHONE = re.compile(r"(?i)\b(?:call|called|calling|reached|reach|contact|phone|tel|telephone|cell|home|work|"
                          r"number|no\.|#|pager|page|pg|beeper|bpr)\b\.?[ \t]*(?:at|is|on)?[ \t]*[:#-]*[ \t]*#?[ \t]*"
                          r"(?P<n>\d{3}[ \t]*[.-][ \t]*\d{4}|\d-\d{4})(?![\d/-]|\.\d)")
_PHONE_FORM = re.compile(r"(?:\+?1[ .-]?)?(?:\(\d{3}\)[ .-]?|\d{3}[ .-])\d{3}[ .-]\d{4}|\+\d[\d ().-]{8,}\d")
_HOSPITAL = re.compile(
    r"(?i)\b(?:(?:st\.?|saint)[ \t]+\p{L}+(?:['’]s)?|(?!(?:the|a|an|to|at|from|of|in)\b)\p{L}{3,}[ \t]+memorial|"
    r"univ(?:ersity|\.)?[ \t]+of[ \t]+\p{L}+|u[ \t]+of[ \t]+\p{L}+|holy[ \t]+cross|good[ \t]+sam(?:aritan)?|mount[ \t]+sinai|"
    r"sacred[ \t]+heart|"
    r"mt\.?[ \t]+sinai)(?:[ \t]+(?:hospital|hosp|medical(?:[ \t]+cent(?:er|re))?|med(?:[ \t]+(?:cent(?:er|re)|ctr))?|"
    r"health(?:[ \t]+system)?))?\b")
_WARD_CUE = re.compile(r"(?i)(?:\b(?:on|to|from|at|onto|in|into|transferred|admitted)|^|\n|plan:|[.:;])[ \t]*$")
_HOSPITAL_ABBR = re.compile(r"\b(?:[A-Z]{0,2}GH|[A-Z]{1,3}MC|[A-Z]{1,3}HC)\b")
_TOKEN3 = re.compile(r"\p{L}[\p{L}'’-]*")
_INITIAL_BEFORE = re.compile(r"(?<![\w.])[A-Za-z]\.[ \t]*$")

_PLACE_CUE = re.compile(
    r"(?i)\b(?:transferr?ed|transfer|xfer(?:'?d|ed)?|admitted|sent|went|came|returned|readmitted|discharged|"
    r"d/?c'?d|brought|taken|arrived|presented|back|seen|transported|moved|go|going|goes|lives|living|resides)[ \t]+(?:back[ \t]+)?(?:to|from|at|in)"
    r"[ \t]+(?:the[ \t]+)?(?P<p>{w}(?:[ \t]+{w}){{0,2}})".format(w=r"[^\W\d_][\p{L}'’&-]*"))
_PLACE_HEAD_WORD = re.compile(r"(?i)\b(?:hospital|hosp|medical[ \t]+cent(?:er|re)|med[ \t]+ctr|campus|rehab|"
                              r"nursing[ \t]+home|manor|clinic|health[ \t]+cent(?:er|re)|infirmary)\b")
_PLACE_BEFORE = re.compile(r"(?P<p>(?:{w}[ \t]+){{1,3}})$".format(w=r"[^\W\d_][\p{L}'’&.-]*"))

# m/d or m/d/yy: a valid month and day; not a fraction (1/2, 3/4), not a ventilator or
# pressure setting (PS 10/5, CPAP 5/5), not part of a longer slash chain (co/ci/svr 5/2.5/800)
_SHORT_DATE = re.compile(r"(?<![\d/])(?<!\d[.:])(?P<m>1[0-2]|0?[1-9])/(?P<d>3[01]|[12]\d|0?[1-9])(?:/(?:\d{4}|\d{2}))?"
                         r"(?![\d/%]|\.\d|[ \t]*%)")
_MONTH_YEAR = re.compile(r"(?<![\d/])(?<!\d[.:-])(?:1[0-2]|0?[1-9])/(?:3[2-9]|[4-9]\d)(?![\d/%]|\.\d)")  # 4/97, 12/93
_DASH_DATE = re.compile(r"(?<![\d/-])(?:1[0-2]|0?[1-9])-(?:3[01]|[12]\d|0?[1-9])-(?:\d{4}|\d{2})(?![\d/-])")
_PAGER = re.compile(r"(?i)\b(?:pager|page|pg|beeper|bpr|cell(?:ular)?|home|phone|tel|ph|mobile|contact)[ \t]*[:#-]*[ \t]*#?"
                    r"[ \t]*(?P<n>\(?\d{3}\)?[ \t/.-]?\d{3}[ \t/.-]?\d{4}|\d{4,7})(?![\d/]|\.\d)")
_BARE_PHONE = re.compile(r"(?<![\d/.-])\(?\d{3}\)?(?:[ \t]*[/.-][ \t]*|[ \t]+)\d{3}(?:[ \t]*[/.-][ \t]*)?\d{4}(?![\d/-]|\.\d)")
_FOLLOWED_BY_UNIT = re.compile(r"(?i)[ \t]*(?:bottles?|of|strength|st|dose|way|cm|ns|hrs?|hours?|[a-z]{2,}/)\b")
_YEAR = re.compile(r"(?<![\d/.:@~#-])(?:19[0-9]\d|20[0-4]\d)(?![\d:]|[ \t]*(?:cc|ml|mg|-[ \t]*\d))")
_YEAR_CUE = re.compile(r"(?i)(?:\b(?:in|since|of|year|from|circa|dated?|until|till|summer|spring|fall|winter|"
                       r"s/p[ \t]+[\w/-]+|[a-z]{3,}),?[ \t]*|(?:19|20)\d\d[ \t]*,[ \t]*)$")
_TIME_CUE = re.compile(r"(?i)(?:\b(?:at|by|due|about|approx|around|after|before|until|till|from|@|~)[ \t]*)$")
_DATE_WORD = re.compile(r"(?i)\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
                       r"sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|monday|tuesday|wednesday|"
                       r"thursday|friday|saturday|sunday|christmas|thanksgiving|easter)\b|\b\d{1,2}(?:st|nd|rd|th)\b")
_DOSE = re.compile(r"(?i)\d+(?:[.,]\d+)?[ \t]*(?:mcg|mg|ml|cc|u|units?|meq|l|g|kg|x[ \t]*\d+)|\d+[ \t]*x[ \t]*\d+")
_WARD = re.compile(r"(?i)(?<![\w'’-])(?P<p>[^\W\d_][\p{L}'’-]{3,})[ \t]*\d{1,2}(?![\d/:%]|\.\d)")
_STREET_WORD = re.compile(r"(?i)\b(?:street|road|avenue|lane|boulevard|blvd|drive|parkway|highway)\b")
_VENT_BEFORE = re.compile(r"(?i)\b(?:ps|psv|peep|cpap|bipap|vent|imv|simv|flowby|wean(?:ed|ing)?[ \t]+(?:down[ \t]+)?to|"
                          r"settings?|ac|fio2|co/ci/svr|ci|svr|abg)\b[^\n]{0,12}$")
_APOS_YEAR = re.compile(r"(?<=[A-Za-z])['’](?:[0-9]\d)(?![\d%])|(?<=[A-Za-z0-9][ \t])\d\d(?=['’](?![\w]))")


def _is_nameish(word: str) -> bool:
    """A word that may be a name: not a stop word, not a clinical word or a drug name cut
    short or misspelt."""
    w = word.strip(".'’-")
    return bool(w) and w.lower() not in stop_words() and not w.isdigit() and not _clinical_not_name(w)


_MONTH_NAME_YEAR = re.compile(r"(?i)\b(?:jan(?:uary)?|feb(?:ruary)?|march|apr(?:il)?|june|july|aug(?:ust)?|"
                              r"sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?(?:[ \t]+of)?,?[ \t]+"
                              r"(?:19|20)\d\d(?!\d)")
_UNIT_AFTER = re.compile(r"(?i)[ \t]*(?:mg|mcg|meq|mmol|ml|cc|units?|u|gm?|kg|l|%|mm|cm|hrs?|min|tabs?|x)(?![\p{L}])")
_SHORT_FORM_AFFIX = re.compile(r"(?i)['’](?:s|d|ed)$")


def _clinical_compound(word: str) -> bool:
    """Shorthand written as one word: parts of clinical or dictionary words joined by a
    hyphen, slash or apostrophe (``CV-NSR``, ``PAD'S``, ``rec'd``, ``T-berg``), or a
    clinical abbreviation glued to a letter or two or to a word (``NISICU``, ``micua``,
    ``AVpaced``, ``Stoolsx``)."""
    w = _SHORT_FORM_AFFIX.sub("", word.lower())
    if w != word.lower() and (is_clinical_like(w) or is_dictionary_word(w) or len(w) <= 3):
        return True
    parts = [p for p in re.split(r"[-/'’]", w) if p]
    if len(parts) > 1 and any(len(p) >= 2 and (is_clinical_like(p) or is_dictionary_word(p)) for p in parts):
        return True
    for k in range(2, len(w)):
        a, b = w[:k], w[k:]
        if (is_clinical_word(a) and (is_clinical_word(b) or is_dictionary_word(b) or len(b) <= 2)) \
                or (is_clinical_word(b) and len(b) >= 3 and (is_dictionary_word(a) or len(a) <= 2)) \
                or (len(a) >= 4 and is_dictionary_word(a) and b == "x"):
            return True
    return False


def _clinical_not_name(word: str) -> bool:
    """A clinical word, or the start of a drug name that is not also a first name
    (``Ceftaz`` and ``Vanco`` are drugs cut short; ``Thomas`` and ``Martin`` begin drug
    names too, but a census first name is read as a name here)."""
    if not is_clinical_like(word):
        return False
    w = word.lower().strip(".,;:()'’\"-~")
    return is_clinical_word(w) or w not in first_names()


def _name_evidence(word: str, strong: bool = False, title: bool = False) -> bool:
    """A word that may be a name next to a role or title (``strong``: the word follows a
    title such as ``Dr``, or a family role such as ``daughter``): a first name; a known
    surname that is not also a common word (``STATES``, ``Line`` and ``Brown`` are census
    surnames) unless written as a name; a rare word after a title (``dr. kerle``); a rare
    capitalised word."""
    w = word.strip(".'’-")
    if not _is_nameish(w) or len(w) < 2:
        return False
    lw = w.lower()
    if _ROLE_WORD.fullmatch(lw):
        return False
    if title and (_known(w) or (zipf(w) < 3.0 and (not is_dictionary_word(w) or zipf(w) < 2.5))):
        return True  # "DR JONES", "dr green", "Dr. Lavely"
    if strong and lw in first_names():
        return True
    if _known(w) and (zipf(w) < 4.0 or (w[:1].isupper() and not w.isupper())):
        return True
    if strong and zipf(w) < 3.0 and w.replace("'", "").replace("’", "").replace("-", "").isalpha() \
            and not is_dictionary_word(w):
        return True
    return w[:1].isupper() and zipf(w) < 3.0 and not is_dictionary_word(w)


def _rare_surname(word: str) -> bool:
    """A word that can only be a name: rare, in no dictionary, not a clinical word."""
    w = word.strip(".,;:()'’\"-")
    if len(w) < 2 or not _is_nameish(w) or not w.replace("'", "").replace("’", "").replace("-", "").isalpha():
        return False
    return zipf(w) < 3.0 and not is_dictionary_word(w)


def _known_surname(word: str) -> bool:
    """A census name that is not a common word (``Morris``, ``Welsh``), never clinical."""
    w = word.strip(".,;:()'’\"-")
    return len(w) >= 2 and _is_nameish(w) and _known(w) and zipf(w) < 5.0


def _known(word: str) -> bool:
    """A known name, or one whose parts are (``O'Connell``, ``Retterer-Moore``)."""
    return is_known_name(word) or any(len(p) >= 3 and is_known_name(p) for p in re.split(r"['’-]", word))


def _same_case(a: str, b: str) -> bool:
    def form(w: str) -> str:
        return "U" if w.isupper() else "l" if w.islower() else "T" if w[:1].isupper() else "?"
    return form(a) == form(b) or form(b) == "T" and form(a) == "T"


@register_style
class Clinical(DocumentStyle):
    name = "clinical"
    recase = False
    threshold = 0.12
    trim_titles = True
    trim_place_heads = True

    def evidence(self, text: str, words: list[str]) -> float:
        hits = sum(1 for w in words if w in CLINICAL_CONTEXT or is_clinical_word(w))
        return hits / len(words)

    # ---- pi candidates ----------------------------------------------------------------
    def drop(self, text: str, span: Span) -> str | None:
        s, e, etype, _sc, source, _ctx = span
        if etype == "DATE_TIME" and source in ("spacy", "spacy_case") and not (
                re.search(r"\d", text[s:e]) and _DATE_WORD.search(text, s, e)
                and not re.fullmatch(r"(?i)\d{1,2}(?:st|nd|rd|th)(?:[ \t]+day)?", text[s:e].strip())):
            return "NER date without a day and a month (years, times, vital signs: the clinical rules decide)"
        if etype == "REFERENCE_NUMBER":
            piece = text[s:e]
            digits = sum(c.isdigit() for c in piece)
            if digits < 2 or _DOSE.search(piece) or re.search(r"(?<!\d)\d{1,3}[ \t]*-[ \t]*\d{1,3}(?!\d)", piece) \
                    or (digits < 5 and not _span_ctx(span)):
                return "not a reference (a word, a dose or a range)"
            return None
        if etype == "STREET_ADDRESS" and not _STREET_WORD.search(text, s, e):
            return "no street in it (clinical numbers)"
        if etype == "PHONE_NUMBER":
            piece = text[s:e]
            if _PHONE_FORM.fullmatch(piece.strip()) or _span_ctx(span):
                return None
            return "not a phone number's form (pressures, ranges, lab values)"
        if etype == "URL" and not re.match(r"(?i)(?:https?://|www\.)", text[s:e]):
            return "a missing space after a full stop"
        if etype == "DATE_TIME" and source == "ValidatedDateRecognizer" \
                and re.fullmatch(r"\d{1,2}[/-]\d{1,2}(?:[/-]\d{1,3})?", text[s:e]):
            return "short numeric date: the clinical rule decides"
        if etype not in _NAME_TYPES or source.startswith("clinical_"):
            return None
        piece = text[s:e]
        words = [_SHORT_FORM_AFFIX.sub("", w.strip(".,;:()'’\"~")) for w in re.split(r"[\s/-]+", piece)]
        words = [w for w in words if any(c.isalpha() for c in w)]
        if not words:
            return "empty"
        if len(words) == 1 and _ROLE_WORD.fullmatch(words[0].lower()):
            return "a role (Husband, Daughter), not its name"
        if source in ("spacy", "spacy_case", "propagation"):
            if etype in ("PERSON", "ORGANIZATION") and re.search(r"\d", piece):
                return "digits in it: a dose, a size or a setting (Tylenol X2, 8.0 Portex)"
            if len(words) >= 2 and (piece.isupper() or piece.islower()) and all(
                    w.lower() in stop_words() or ((is_dictionary_word(w) or is_clinical_like(w)) and not _known(w))
                    for w in words[1:]):
                return "a name with the words after it (SMOLAREK AWARE OF ...): the role and name rules find the name"
        titled = _cased_doc(text) and not piece.isupper() and not piece.islower() \
            and all(w[:1].isupper() or w.lower() in stop_words() for w in words)
        if titled and etype in ("LOCATION", "ORGANIZATION") and not _initial(text, s):
            # a proper name written as one in cased text ("Phoenix General Hospital", "New York")
            if len(words) > 1 and not all(is_clinical_like(w, fuzzy=True) or w.lower() in stop_words()
                                          for w in words):
                return None
            w = words[0]
            if w.lower() in city_names() or is_known_name(w) or (
                    zipf(w) < 3.5 and not is_dictionary_word(w) and not is_clinical_like(w, fuzzy=True)):
                return None
        if all(is_clinical_like(w, fuzzy=True) or w.lower() in stop_words() or (zipf(w) >= 3.5 and not is_known_name(w))
               or (is_dictionary_word(w) and not is_known_name(w)) for w in words):
            return "clinical, dictionary or common words"
        if self._cued(text, s, e) and any(_name_evidence(w) for w in words):
            return None
        if etype == "PERSON":
            if piece.islower() or piece.isupper():
                return "no name evidence (caseless)"
            if any(is_known_name(w) and not is_clinical_word(w) and (zipf(w) < 4.0 or not _initial(text, s))
                   for w in words):
                return None
            if not _initial(text, s) and all(w[:1].isupper() and not w.isupper() for w in words) \
                    and any(zipf(w) < 3.0 and not is_dictionary_word(w) and not is_clinical_like(w, fuzzy=True)
                            for w in words):
                return None  # "At this time, Radu wishes": a rare capitalised word inside a sentence
            return "no name evidence"
        if not piece.isupper() and not piece.islower() and all(not is_clinical_like(w, fuzzy=True) for w in words) \
                and any(w[:1].isupper() and zipf(w) < 3.5 and not is_dictionary_word(w) for w in words):
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
        # a movement cue that leads into this span ("transferred to [Kessler Medical Center]"),
        # not one anywhere near it ("RETURNED TO CCU INTUBATED, [W IABP & ...]")
        base = max(0, s - 40)
        return any(abs(base + m.start("p") - s) <= 1 for m in _PLACE_CUE.finditer(text[base:e]))

    # ---- the style's own rules ----------------------------------------------------------
    def extra(self, text: str) -> list[Span]:
        out: list[Span] = []
        for m in _ROLE_BEFORE.finditer(text, overlapped=True):
            title = re.match(rf"(?i)(?:{_TITLE})\b", m.group(0)) is not None
            out += self._names(text, m.start("n"), m.end("n"), after=False, strong=True, title=title)
        for r in _AFTER_ROLE_WORD.finditer(text):
            m = _WORDS_BEFORE.search(text, max(0, r.start() - 60), r.start())
            if m:
                out += self._names(text, m.start("n"), m.end("n"), after=True)
        out += self._pairs(text)
        out += self._first_names_talking(text)
        for m in _PLACE_CUE.finditer(text):
            out += self._place(text, m.start("p"), m.end("p"))
            out += self._cued_city(text, m.start("p"))
        for m in _HOSPITAL.finditer(text):
            first = m.group(0).split()
            if len(first) > 1 and first[0].lower().rstrip(".") in ("st", "saint") and (not (
                    is_known_name(first[1]) or (first[1][:1].isupper() and not first[1].isupper()
                                                and not is_dictionary_word(first[1]))) or is_clinical_like(first[1])
                    or first[1].lower() in stop_words()):
                continue  # "ST DEPRESSION", "ST CHGS": the ST segment (only "st": "HOLY CROSS" is a hospital)
            out.append((m.start(), m.end(), "LOCATION", 0.6, "clinical_place", True))
        for m in _HOSPITAL_ABBR.finditer(text):
            if not is_clinical_word(m.group(0)) and not is_dictionary_word(m.group(0)):
                out.append((m.start(), m.end(), "LOCATION", 0.5, "clinical_place", True))
        for m in _HOSPITAL_ABBR_LOWER.finditer(text):  # "to gh er", "from vamc": after a movement cue only
            if not is_clinical_word(m.group(0)) and not is_dictionary_word(m.group(0)) \
                    and re.search(r"(?i)\b(?:to|from|at|in)[ \t]+$", text[max(0, m.start() - 6):m.start()]):
                out.append((m.start(), m.end(), "LOCATION", 0.5, "clinical_place", True))
        out += self._cities(text)
        for m in _WARD.finditer(text):  # "to QUARTERMAIN 6": a ward and its floor
            w = m.group("p")
            if _clinical_compound(w) or _UNIT_AFTER.match(text, m.end()):
                continue  # "CV-NSR 75", "NISICU 2", "PAD'S 20": shorthand; "TORODAL 15MG": a dose
            if len(w) >= 5 and zipf(w) < (2.0 if w.islower() else 2.5) \
                    and (not is_dictionary_word(w) or is_known_name(w) and zipf(w) < 2.0) \
                    and not is_clinical_like(w, fuzzy=w.islower()) \
                    and w.lower() not in stop_words() and _WARD_CUE.search(
                        text, max(0, m.start() - 16), m.start()):
                out.append((m.start("p"), m.end("p"), "LOCATION", 0.5, "clinical_place", True))
        for h in _PLACE_HEAD_WORD.finditer(text):
            m = _PLACE_BEFORE.search(text, max(0, h.start() - 80), h.start())
            if m:
                out += self._place(text, m.start("p"), m.end("p"), head=True)
            out += self._hospital_words(text, h.start())
        for m in _SHORT_DATE.finditer(text):
            mo, d = int(m.group("m")), int(m.group("d"))
            if "/" not in m.group(0)[m.end("d") - m.start():] and mo < d <= 4:
                continue  # 1/2, 1/4, 3/4: a fraction
            if mo == d and mo <= 5 and not re.search(r"(?i)\b(?:on|since|until|from|dated?|f/u)\b[ \t]*$",
                                                     text[max(0, m.start() - 8):m.start()]):
                continue  # 5/5: a strength or a setting
            if _VENT_BEFORE.search(text, max(0, m.start() - 24), m.start()) \
                    and not re.search(r"(?i)\boff[ \t]*$", text[max(0, m.start() - 6):m.start()]):
                continue  # "PSV 10/5", "CPAP .5% 5/8", "wean down to 10/5": a setting
            if d == 10 and re.search(r"(?i)\bpain\b", text[max(0, m.start() - 30):m.start()]):
                continue  # a pain score out of 10
            if _FOLLOWED_BY_UNIT.match(text, m.end()):
                continue
            out.append((m.start(), m.end(), "DATE_TIME", 0.6, "clinical_date", False))
        for m in _MONTH_NAME_YEAR.finditer(text):  # "in march of 2022", "SEPT 1998"
            out.append((m.start(), m.end(), "DATE_TIME", 0.6, "clinical_date", False))
        for rx in (_MONTH_YEAR, _DASH_DATE):
            for m in rx.finditer(text):
                out.append((m.start(), m.end(), "DATE_TIME", 0.6, "clinical_date", False))
        for m in _PAGER.finditer(text):
            out.append((m.start("n"), m.end("n"), "PHONE_NUMBER", 0.7, "clinical_phone", True))
        for m in _BARE_PHONE.finditer(text):
            out.append((m.start(), m.end(), "PHONE_NUMBER", 0.6, "clinical_phone", True))
            x = _EXTENSION.match(text, m.end())
            if x:
                out.append((x.start("n"), x.end("n"), "PHONE_NUMBER", 0.6, "clinical_phone", True))
        for m in _PAGER.finditer(text):
            x = _EXTENSION.match(text, m.end("n"))
            if x:
                out.append((x.start("n"), x.end("n"), "PHONE_NUMBER", 0.6, "clinical_phone", True))
        for m in _LOCAL_PHONE.finditer(text):
            out.append((m.start("n"), m.end("n"), "PHONE_NUMBER", 0.6, "clinical_phone", True))
        for m in _YEAR.finditer(text):
            before = text[max(0, m.start() - 24):m.start()]
            if _TIME_CUE.search(before) or not _YEAR_CUE.search(before):
                continue
            out.append((m.start(), m.end(), "DATE_TIME", 0.5, "clinical_year", False))
        for m in _APOS_YEAR.finditer(text):
            a = m.start() + 1 if text[m.start()] in "'’" else m.start()
            out.append((a, m.end(), "DATE_TIME", 0.5, "clinical_year", False))
        return out

    @staticmethod
    def _cities(text: str) -> list[Span]:
        """Cities and towns from GeoNames, in any case (``PIKESVILLE``, ``rome``), when
        the name is no dictionary, clinical or common word (``Bay``, ``Union``)."""
        cities, firsts = city_names(), city_first_words()
        words = [(m.start(), m.end(), m.group(0).lower()) for m in _TOKEN3.finditer(text)]
        out: list[Span] = []
        k = 0
        while k < len(words):
            longest = firsts.get(words[k][2], 0)
            for n in range(min(longest, len(words) - k), 0, -1):
                a, b = words[k][0], words[k + n - 1][1]
                if n > 1 and any(text[words[j][1]:words[j + 1][0]] not in (" ", "\t") for j in range(k, k + n - 1)):
                    continue
                name = " ".join(w for _, _, w in words[k:k + n])
                if name not in cities:
                    continue
                w = words[k][2]
                if n == 1 and (len(w) < 4 or is_dictionary_word(w) or is_clinical_word(w) or w in stop_words()
                               or zipf(w) >= 4.5):
                    continue
                if n > 1 and all(is_dictionary_word(x) or x in stop_words() for _, _, x in words[k:k + n]) \
                        and not text[a:b][:1].isupper():
                    continue  # "white marsh" in lower case could be words
                out.append((a, b, "LOCATION", 0.5, "clinical_place", False))
                k += n - 1
                break
            k += 1
        return out

    @staticmethod
    def _first_names_talking(text: str) -> list[Span]:
        """A first name that says, asks or visits (``JOHN STATES``, ``margie called``) or is
        spoken with (``talk with THOMAS``, ``updated sarah``): a census first name that is no
        dictionary, clinical or role word."""
        out: list[Span] = []
        for rx in (_SAY_AFTER, _TALK_BEFORE):
            for m in rx.finditer(text):
                w = m.group("n")
                lw = w.lower()
                if lw not in first_names() or is_dictionary_word(w) or lw in stop_words() \
                        or _ROLE_WORD.fullmatch(lw) or not _is_nameish(w) or zipf(w) >= 5.5:
                    continue
                out.append((m.start("n"), m.end("n"), "PERSON", 0.5, "clinical_name", False))
        return out

    @staticmethod
    def _cued_city(text: str, s: int) -> list[Span]:
        """A city of two or three dictionary words right after a movement or residence cue
        (``returned to new haven``): in lower case they are only read as a place there."""
        words = [(m.start() + s, m.end() + s) for m in _TOKEN3.finditer(text[s:s + 40])]
        for n in (3, 2):
            if len(words) < n or any(text[words[j][1]:words[j + 1][0]] not in (" ", "\t") for j in range(n - 1)):
                continue
            a, b = words[0][0], words[n - 1][1]
            if a == s and text[a:b].lower() in city_names():
                return [(a, b, "LOCATION", 0.5, "clinical_place", True)]
        return []

    @staticmethod
    def _hospital_words(text: str, head: int) -> list[Span]:
        """Hospital-name words before a hospital's head word (``MEMORIAL HOSPITAL``,
        ``Mercy Hospital``), unless the phrase is generic (``a community hospital``)."""
        m = _PLACE_BEFORE.search(text, max(0, head - 40), head)
        if not m:
            return []
        picked = []
        for w in reversed(list(re.finditer(r"[^\W\d_][\p{L}'’&.-]*", text[m.start("p"):m.end("p")]))):
            if w.group(0).lower() not in _HOSPITAL_NAME_WORDS:
                break
            picked.append((m.start("p") + w.start(), m.start("p") + w.end()))
        if not picked:
            return []
        a, b = min(p[0] for p in picked), max(p[1] for p in picked)
        if _GENERIC_BEFORE.search(text, max(0, a - 12), a):
            return []
        return [(a, b, "LOCATION", 0.5, "clinical_place", True)]

    @staticmethod
    def _pairs(text: str) -> list[Span]:
        """A first name and a surname (``lorrie morales``, ``DICK CUCCHIARA``, ``mary
        o'hara``), and an initial and a surname after a cue (``per B. KARGAS``, ``Z.
        MILLER aware``), in any case."""
        out: list[Span] = []
        for m in _PAIR.finditer(text, overlapped=True):
            f, last = m.group("f"), m.group("l")
            if f.lower() not in first_names() or f.lower() in stop_words() or is_clinical_word(f) \
                    or zipf(f) >= 5.0 or not _same_case(f, last) or _ROLE_WORD.fullmatch(f.lower()):
                continue
            strong_first = not is_dictionary_word(f) or zipf(f) < 3.5
            rare_last = _rare_surname(last) and len(last) >= 5 and not is_misspelt_or_compound(last)
            if not (strong_first and (_rare_surname(last) or _known_surname(last))) and not rare_last \
                    and not (_known_surname(last) and not is_dictionary_word(last)):
                continue  # "eve regarading", "AMY LIX": a misspelling or an abbreviation after a first name
            out.append((m.start(), m.end(), "PERSON", 0.6, "clinical_name", False))
        for m in _INITIAL_NAME.finditer(text):
            last = m.group("l")
            if m.group("i").lower() in "ailrw" and not (_rare_surname(last) and text.startswith(".", m.end("i"))):
                continue  # "A STENT", "R. FEMORAL", "L FEM", "W COMBINATION": an article, a side, "with"
            if not (_rare_surname(last) or _known_surname(last)) \
                    or not _INITIAL_CUE.search(text, max(0, m.start() - 12), m.start()):
                continue
            if not text.startswith(".", m.end("i")) and not (last.isupper() or last[:1].isupper()) \
                    and not (_known_surname(last) and m.group("i").lower() != "x"
                             and _PER.search(text, max(0, m.start() - 6), m.start())):
                continue  # "d ross" needs a capital, a full stop, or "per"/"by" before it ("per x ray": no)
            out.append((m.start(), m.end(), "PERSON", 0.5, "clinical_name", False))
        return out

    @staticmethod
    def _names(text: str, s: int, e: int, after: bool, strong: bool = False, title: bool = False) -> list[Span]:
        words = [(m.start() + s, m.end() + s, m.group(0)) for m in re.finditer(_WORD, text[s:e])]
        if after:
            words = words[::-1]  # nearest the role first
        picked = []
        pending = None  # an initial, kept only when a name follows it
        for a, b, w in words:
            if len(w) == 1 and w.isalpha() and not after and not picked:
                pending = (a, b)
                continue
            if not _name_evidence(w, strong or pending is not None, title and not picked):
                break
            if pending is not None:
                picked.append(pending)
                pending = None
            picked.append((a, b))
        if not picked:
            return []
        a, b = min(p[0] for p in picked), max(p[1] for p in picked)
        if after:  # "s. roberto rrt": the initial before the name too
            m = _INITIAL_BEFORE.search(text, max(0, a - 4), a)
            if m:
                a = m.start()
        out = [(a, b, "PERSON", 0.6, "clinical_role", True)]
        if not after and strong:  # "daughters sarah and margie", "SISTER & CHARLIE"
            m = _AND_NAME.match(text, b)
            if m and _name_evidence(m.group("n"), strong=True) and _same_case(text[a:b].split()[0], m.group("n")):
                out.append((m.start("n"), m.end("n"), "PERSON", 0.6, "clinical_role", True))
        return out

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
            if lw in stop_words() or is_clinical_like(lw) or (zipf(lw) >= limit and not short_caps) \
                    or (is_dictionary_word(lw) and not is_known_name(lw) and not short_caps):
                break
            picked.append((a, b))
        if not picked:
            return []
        a, b = min(p[0] for p in picked), max(p[1] for p in picked)
        return [(a, b, "LOCATION", 0.5, "clinical_place", True)]
