"""``legal``: judgments, decisions and pleadings.

Evidence: the share of words from the vocabulary of court procedure (``applicant``,
``judgment``, ``appeal``, ``respondent``, ``pursuant``...).

Rules, after the annotation guidelines of the Text Anonymization Benchmark (Pilán et
al. 2022), which mask what identifies the person and leave public actors in:

* **public entities are not personal identifiers**: a government, a ministry, a court,
  a prosecutor's office, a state as a party (``the Republic of Turkey``, ``the Turkish
  Government``, ``the Court of Cassation``, ``the Ministry of Foreign Affairs``) is
  dropped when every word of its name is generic (a common word, a nationality or a
  function word). A body named after a place (``the Kayseri Administrative Court``)
  stays: it tells where the person lives or was tried;
* a nationality or other group adjective qualifying a public actor or a legal order
  (``Turkish law``, ``the Polish authorities``) is dropped; one describing a person stays;
* the respondent state (the country an application is brought against, the adjective
  of its Government: ``Turkey``, ``Turkish``) is a party, not an identifier;
* a capitalised common noun alone (``Chamber``, ``Law``, ``Municipality``) is a defined
  term, not a name;
* a court, prison, authority or university named after a place (``the Kayseri
  Administrative Court``, ``Wronki Prison``) is a quasi identifier (ORGANIZATION);
* application and case numbers (``application no. 18403/91``, ``nos. 260/04 and
  268/04``) are direct identifiers (REFERENCE_NUMBER).
"""

from __future__ import annotations

import functools

import regex as re

from privatize.redaction.filters import is_known_name, zipf
from privatize.redaction.spans import Span
from privatize.redaction.styles.base import DocumentStyle, register_style
from privatize.redaction.styles.vocab import is_dictionary_word
from privatize.redaction.words import stop_words

_LEGAL_WORDS = frozenset("""
applicant applicants respondent respondents appellant appellants claimant claimants plaintiff plaintiffs
defendant defendants petitioner court courts judgment judgments judge judges tribunal appeal appeals appealed
convention article articles paragraph proceedings pursuant jurisdiction prosecutor prosecution
counsel lodged hearing hearings ruling ruled adjudicated admissibility admissible inadmissible
complaint complained violation breach damages costs legislation statutory statute section act
acts law laws decision decisions dismissed quashed upheld cassation constitutional commission chamber
government submissions submitted observations judiciary litigation lawsuit verdict sentence sentenced
criminal civil administrative
""".split())

_PUBLIC_HEADS = frozenset("""
treaty regulation regulations directorate lords commons
government governments court courts tribunal tribunals ministry ministries minister ministers council
chamber chambers commission commissions committee committees parliament assembly prosecutor prosecutors
prosecution prosecution's office department departments authority authorities treasury state states
republic kingdom federation union agency agencies senate cabinet directorate inspectorate procurator
procuracy ombudsman registry registrar section police army navy gendarmerie administration bureau board
service services presidency president's convention protocol code constitution
""".split())

_GENERIC_QUALIFIERS = frozenset("""
supreme high higher constitutional administrative military civil criminal regional district provincial
federal national public principal chief general appeal appeals cassation first instance first-instance
foreign internal interior home affairs justice defence defense finance labour labor social security
insurance international law legal department immigration education health agriculture economy economic
european human rights grand fourth third second fifth section local municipal county city town
office university president building inspector deputy permanent special state republic democratic
people's united kingdom federal council court
""".split())

_AFTER_GROUP = re.compile(r"(?i)[ \t]+(?:government|authorities|authority|law|laws|legislation|courts?|state|army|"
                          r"armed|security|police|gendarmerie|occupation|forces|officials|administration|"
                          r"constitution|parliament|ministry|republic|judiciary|legal|criminal|civil|"
                          r"constitutional|supreme|nationality|citizenship|territory|side|delegation)\b")
_APPLICATION_NO = re.compile(r"(?i)\b(?:applications?|complaints?|case|cases|petitions?)?[ \t]*\(?(?:nos?\.?|numbers?)"
                             r"[ \t]*(?P<n>\d{1,6}/\d{2,4}(?:[ \t]*(?:,|and|&)[ \t]*\d{1,6}/\d{2,4})*)")
_CODE = re.compile(r"\d{1,6}/\d{2,4}")
_PLACE_BODY = re.compile(
    r"(?P<b>(?:\p{Lu}[\p{L}'’/-]+[ \t]+){1,3}(?:(?:District|Regional|Administrative|Labour|Social|Civil|Criminal|"
    r"Magistrates[’']?|State[ \t]+Security|Assize|Military|Provincial|Local|Appeal|County|Municipal|Juvenile|"
    r"Family|Commercial|Land|Federal|Police|Public)[ \t]+)*(?:Court|Tribunal|Prison|University|Authority|"
    r"Prosecutor[’']s[ \t]+Office|Police|Hospital|Municipality|Council|Registry)(?:[ \t]+of[ \t]+First[- ]instance)?)\b")
_AGAINST = re.compile(r"\bagainst[ \t]+(?:the[ \t]+)?(?:(?:Federal[ \t]+|Slovak[ \t]+|Czech[ \t]+)?Republic[ \t]+of[ \t]+|"
                      r"Kingdom[ \t]+of[ \t]+|Principality[ \t]+of[ \t]+)?(?P<c>\p{Lu}\p{Ll}+)")
_GOVERNMENT = re.compile(r"\b(?P<a>\p{Lu}\p{Ll}+)[ \t]+(?:Government|authorities|State)\b")


@functools.lru_cache(maxsize=16)
def respondent(text: str) -> frozenset[str]:
    """The respondent state of a judgment, lower case: the country an application is
    brought against and the adjective of the Government that answers it."""
    out = {m.group("c").lower() for m in _AGAINST.finditer(text, 0, 20_000)}
    out |= {m.group("a").lower() for m in _GOVERNMENT.finditer(text, 0, 20_000) if not _generic_word(m.group("a"))}
    return frozenset(out)


def _generic_word(w: str) -> bool:
    return w.lower() in stop_words() or w.lower() in _GENERIC_QUALIFIERS


_NAME_TYPES = frozenset({"ORGANIZATION", "LOCATION", "NRP", "PERSON"})


def _generic(word: str) -> bool:
    w = word.lower().strip(".,;:()'’\"")
    if not w:
        return True
    if w.endswith("’s") or w.endswith("'s"):
        w = w[:-2]
    return (w in stop_words() or w in _PUBLIC_HEADS or w in _GENERIC_QUALIFIERS
            or _is_nationality(word) or _is_country(word))


_NATIONALITIES = frozenset("""
swiss israeli iraqi pakistani saudi bangladeshi nepali somali kuwaiti omani qatari yemeni azerbaijani greek dutch
french thai czech
""".split())


def _is_nationality(word: str) -> bool:
    w = word.strip(".,;:()'’\"")
    return w.lower() in _NATIONALITIES or bool(re.fullmatch(r"\p{Lu}\p{Ll}+(?:ish|ian|ese|an|ic)", w))


_COUNTRIES = frozenset("""
turkey poland austria germany norway cyprus france italy spain greece sweden finland denmark russia ukraine
romania bulgaria hungary croatia serbia slovenia slovakia czech republic portugal belgium netherlands
luxembourg switzerland ireland britain england scotland wales iceland estonia latvia lithuania moldova
georgia armenia azerbaijan albania macedonia montenegro bosnia herzegovina malta liechtenstein monaco
andorra san marino europe
""".split())


def _is_country(word: str) -> bool:
    return word.lower().strip(".,;:()'’\"") in _COUNTRIES


@register_style
class Legal(DocumentStyle):
    name = "legal"
    threshold = 0.035
    trim_articles = True

    def evidence(self, text: str, words: list[str]) -> float:
        if len(text) < 400:
            return 0.0
        return sum(1 for w in words if w in _LEGAL_WORDS) / len(words)

    def drop(self, text: str, span: Span) -> str | None:
        s, e, etype, _sc, source, _ctx = span
        if etype not in _NAME_TYPES or source.startswith("legal_"):
            return None
        piece = text[s:e]
        words = piece.split()
        if not words:
            return "empty"
        if etype != "PERSON" and any(w.lower().strip(".,;:()'’\"") in _PUBLIC_HEADS for w in words) \
                and all(_generic(w) or is_dictionary_word(w.strip(".,;:()'’\"")) for w in words):
            return "public entity"  # "the Ministry of Agriculture and Food Economics": no place, no name
        if etype in ("PERSON", "ORGANIZATION") and len(words) == 1 and _is_country(words[0]):
            return "a country is not a person"
        if etype == "NRP" and _AFTER_GROUP.match(text, e):
            return "nationality of a public actor or legal order"
        if etype in ("LOCATION", "ORGANIZATION") and len(words) >= 2 and words[0].lower() in ("the",) \
                and all(_generic(w) for w in words):
            return "public entity"
        bare = " ".join(w for w in words if w.lower() not in ("the", "of", "republic")).strip(".,;:()'’\"").lower()
        if etype in ("LOCATION", "NRP", "ORGANIZATION") and bare and bare in respondent(text):
            return "the respondent state"
        if len(words) == 1:
            w = words[0].strip(".,;:()'’\"")
            if w.lower() in _LEGAL_WORDS or w.lower() in _PUBLIC_HEADS or w.lower() in _GENERIC_QUALIFIERS:
                return "capitalised common noun (a defined term)"
            if w and w[:1].isupper() and not w.isupper() and not is_known_name(w) and zipf(w) >= 3.5 \
                    and not _is_nationality(w) and not _is_country(w) and etype != "LOCATION":
                return "capitalised common noun (a defined term)"
            if etype == "PERSON" and w.lower() in _PUBLIC_HEADS:
                return "capitalised common noun (a defined term)"
        return None

    def extra(self, text: str) -> list[Span]:
        out: list[Span] = []
        for m in _PLACE_BODY.finditer(text):  # "the Kayseri Administrative Court": it tells where
            words = m.group("b").split()
            k = 0
            while k < len(words) and _generic(words[k]):
                k += 1
            if k < len(words) and words[k][:1].isupper() and not _generic(words[k]) \
                    and (k == 0 or words[k - 1].lower() not in ("of",)):
                start = m.start("b") + len(" ".join(words[:k])) + (1 if k else 0)
                out.append((start, m.end("b"), "ORGANIZATION", 0.6, "legal_body", True))
        for m in _APPLICATION_NO.finditer(text):
            base = m.start("n")
            for c in _CODE.finditer(m.group("n")):
                out.append((base + c.start(), base + c.end(), "REFERENCE_NUMBER", 0.8, "legal_code", True))
        return out
