"""False-positive filters for the ``balanced`` profile of the redaction policy pi.

spaCy's small English NER labels medical and technical abbreviations (``BP``, ``GI``,
``CCU``, ``O2``), section headers (``Neuro:``, ``Resp:``), capitalised common words
(``Thanks``) and lower-case phrases (``abd soft``) as PERSON, ORG or
LOCATION, and calls durations and pleasantries dates (``5 nights``, ``a nice day``).
Presidio's URL and US driver-licence patterns fire on ``pt.is``, ``cont.la`` and on
any short letter+digit token (``x2``, ``v2``). These filters drop such hits from pi;
the conservative policy pi_c still sees every raw NER entity and recognizer hit, so
what pi gives up in recall pi_c keeps (pi precise, pi_c broad).

Word knowledge comes from maintained sources with offline data: word frequencies from
``wordfreq`` (Zipf scale: 3 = once per million words) and first and last names from
the 1990 US Census tables shipped by the ``names`` package. A word is a *known name*
when it is among the 5,000 most frequent first names or 30,000 most frequent surnames;
a known name is never dropped by a word-level rule.

Each filter returns the reason it drops a hit (``None`` keeps it), so tests and the
quality benchmark can say what was cut and why.
"""

from __future__ import annotations

import functools
import os

import regex as re

from privatize.redaction.words import MONTH_NAMES, OCCUPATION_SET
from privatize.redaction.words import stop_words

FIRST_NAMES = 5_000
LAST_NAMES = 30_000
COMMON_ZIPF = 2.5
"""A word at least this frequent (wordfreq Zipf) counts as a common English word.
wordfreq counts names as words (``ahmed`` 3.8, ``kim`` 4.6), so frequency alone never
drops a single capitalised word that NER calls a name; it only keeps the coordinated-list
rule from turning ``Appellant`` into a name."""

NER_NAME_TYPES = frozenset({"PERSON", "LOCATION", "ORGANIZATION", "NRP"})


@functools.lru_cache(maxsize=1)
def known_names() -> frozenset[str]:
    """Lower-case census first names (top :data:`FIRST_NAMES` of each sex) and
    surnames (top :data:`LAST_NAMES`)."""
    import names

    folder = os.path.dirname(names.__file__)
    out: set[str] = set()
    for fname, limit in (("dist.male.first", FIRST_NAMES), ("dist.female.first", FIRST_NAMES),
                         ("dist.all.last", LAST_NAMES)):
        with open(os.path.join(folder, fname), encoding="ascii") as fh:
            for i, line in enumerate(fh):
                if i >= limit:
                    break
                word = line.split(None, 1)[0] if line.strip() else ""
                if word:
                    out.add(word.lower())
    return frozenset(out)


@functools.lru_cache(maxsize=200_000)
def zipf(word: str) -> float:
    from wordfreq import zipf_frequency

    return zipf_frequency(word.lower(), "en")


def warm_word_lists() -> None:
    """Load wordfreq's English list and the census names now (about 0.4 s once)."""
    known_names()
    zipf("the")


def is_known_name(word: str) -> bool:
    return word.lower().strip(".'’") in known_names()


@functools.lru_cache(maxsize=1)
def occupations() -> frozenset[str]:
    return OCCUPATION_SET


def is_common_word(word: str) -> bool:
    """A common English word that is not a known name."""
    w = word.strip(".'’")
    return bool(w) and not is_known_name(w) and zipf(w) >= COMMON_ZIPF


# ---------------------------------------------------------------------------------------
# NER names: PERSON, LOCATION, ORGANIZATION, NRP

_TOKEN = re.compile(r"\S+")
_MEASURE = re.compile(r"^(?:[\p{L}]{0,4}\d{1,3}(?:[.,]\d+)?[\p{L}%]{0,2}|[\p{Lu}]{1,4}[ \t]+\d{1,3}(?:[.,/]\d+)?%?)$")
_ABBREV = re.compile(r"^[\p{Lu}&]{2,5}s?$")
_ABBREV_WORD = re.compile(r"(?<![\w&])[\p{Lu}][\p{Lu}&]{1,4}(?![\w&])")
_CASED_START = re.compile(r"(?:^|[.!?]\s+|\n\s*)(?:[A-Z]{2,5}:\s*)?(\p{L})")  # after a speaker label "USR:"
# tokens of a measurement or abbreviation phrase: "Vt 450s", "3L NC", "SOB x5 days", "PMH ETOH"
_NUM_TOKEN = re.compile(r"^[x#~@]?\d{1,3}(?:[.,/-]\d+)*[\p{L}%]{0,3}$")  # 3L, 450s, x5, 1/2NS; not "02138"
_ABBR_TOKEN = re.compile(r"^\p{Lu}[\p{Lu}\d&]{1,4}s?$")
_SHORT_TOKEN = re.compile(r"^\p{Lu}\p{Ll}?$")
_FILE_NAME = re.compile(r"^[\w-]+\.(?:[A-Za-z0-9]{2,5})$")
_ROLE_SUFFIX = re.compile(r"(?:ant|ent|er|or|ee|iff|lord|ist|ary)$")
_PUBLIC_BODY = re.compile(r"\b(?:Act|Acts|Court|Courts|Tribunal|Regulations|Rules|Convention|Constitution|Directive|"
                          r"Statute)(?:[ \t]+(?:1[6-9]|20)\d\d)?$")
_ADDRESS_WORDS = frozenset("box po suite apt apartment unit flat room floor building bldg block lot route highway "
                           "exit pier gate".split())
_HEADING_BEFORE = re.compile(r"(?:^|\n)[ \t]*(?:\d+\.?[ \t]+)?$")
_HEADING_AFTER = re.compile(r"[ \t]*:?[ \t]*(?:\n|$)")
_BLANK_BEFORE = re.compile(r"\n[ \t]*\n[ \t]*(?:\d+\.?[ \t]+)?$")
_BLANK_AFTER = re.compile(r"[ \t]*:?[ \t]*\n[ \t]*(?:\n|$)")
_DETERMINER = re.compile(r"(?i)\b(?:the|this|that|each|any|such|every)[ \t]+$")


class TextCase:
    """What the filters need to know about a whole text, computed once per text."""

    __slots__ = ("cased", "abbreviations")

    def __init__(self, text: str):
        starts = [m.group(1) for m in _CASED_START.finditer(text)]
        upper = sum(c.isupper() for c in starts)
        self.cased = bool(starts) and upper * 2 >= len(starts)
        """Sentences start with capitals: a lower-case NER hit is then not a name."""
        self.abbreviations = len(set(_ABBREV_WORD.findall(text))) >= 3
        """At least three distinct upper-case words of 2-5 letters (``BP``, ``GI``,
        ``CCU``): an all-caps NER hit there is read as an abbreviation."""
_SENTENCE_START = re.compile(r"(?:^|[\n.!?;]|[\n.!?][\"')\]]?)[ \t>*-]*$")


def _sentence_initial(text: str, s: int) -> bool:
    return _SENTENCE_START.search(text, max(0, s - 6), s) is not None or s == 0


def ner_name_filter(text: str, s: int, e: int, etype: str, source: str, case: TextCase | None = None) -> str | None:
    """Why an NER PERSON/LOCATION/ORGANIZATION/NRP hit is not a name (or ``None``).

    ``source`` is ``spacy_case`` for hits of the re-cased pass over upper-case text
    (never cut for their case); ``case`` describes the whole text (computed from it when
    not given)."""
    piece = text[s:e]
    tokens = _TOKEN.findall(piece)
    if not tokens:
        return "empty"
    if "/" in piece or "@" in piece or "www." in piece.lower():
        return "url or path"
    word = tokens[0].strip(",.;:()'’\"")
    if source == "spacy_case":
        # NER over re-cased text: every word looks like a name there, so a lone common
        # word ("Settings", "Missing") is dropped unless it is a known name
        words = [t.strip(",.;:()'’\"") for t in tokens]
        if all(w and not is_known_name(w) for w in words):
            if len(words) == 1 and (zipf(word) >= 4.5 or (etype != "LOCATION" and zipf(word) >= COMMON_ZIPF)):
                return "common word (re-cased)"
            if len(words) > 1 and etype != "LOCATION" and all(zipf(w) >= 3.5 for w in words):
                return "common words (re-cased)"  # "SENTENCING REMARKS"
        return None
    case = case or TextCase(text)
    if case.cased and not any(c.isupper() for c in piece):
        return "lower case"
    if _FILE_NAME.match(piece.strip()):
        return "file name"
    if _MEASURE.match(piece.strip(",.;:()")):
        return "measurement"  # "O2", "RR 18", "HR 88"
    if _PUBLIC_BODY.search(piece.rstrip(",.;:")):
        return "court or legislation"  # "the Proceeds of Crime Act 2002", "The Crown Court"
    if etype in ("PERSON", "ORGANIZATION") and len(tokens) == 2 and _NUM_TOKEN.match(tokens[1]) \
            and tokens[0].lower() not in _ADDRESS_WORDS \
            and is_common_word(tokens[0]) and zipf(tokens[0]) >= 3.5:
        return "numbered reference"  # "Schedule 1", "Clause 14", "Section 3"
    if len(tokens) > 1:
        kinds = [_NUM_TOKEN.match(t) is not None for t in tokens]
        abbrs = [_ABBR_TOKEN.match(t.strip(",.;:()")) is not None for t in tokens]
        ok = all(n or a or t.islower() or _SHORT_TOKEN.match(t) for t, n, a in zip(tokens, kinds, abbrs))
        if ok and (any(kinds) or (case.abbreviations and any(abbrs))):
            return "measurement"  # "Vt 450s", "3L NC", "SOB x5 days", "PMH ETOH"
        return None
    if case.abbreviations and (_ABBREV.match(word) or (len(word) <= 4 and not is_known_name(word))):
        return "abbreviation"  # "CCU", "GI"; "Cont", "Meds", "Vt" among them
    after = text[e:e + 2]
    if after.startswith(":") and _sentence_initial(text, s) and not is_known_name(word):
        return "section header"
    initial = _sentence_initial(text, s)
    if (_HEADING_BEFORE.search(text, max(0, s - 8), s) and _HEADING_AFTER.match(text, e)
            and (text.startswith(":", e) or _BLANK_BEFORE.search(text, max(0, s - 12), s) or _BLANK_AFTER.match(text, e))
            and not is_known_name(word) and zipf(word) >= COMMON_ZIPF):
        return "heading"  # "Background", "DEFINITIONS" alone on a line between blank lines ("Leeds" in an address block stays)
    if initial and word.lower() in stop_words():
        return "capitalised function word"  # "Thanks", "Hello", "Please"
    if is_known_name(word):
        return None
    if initial and etype == "PERSON" and zipf(word) >= 4.0:
        return "capitalised common word"  # "Lunch", "Shall"; names below 4 ("Ahmed" 3.8) stay
    if etype == "NRP" or _DETERMINER.search(text, max(0, s - 6), s) is None:
        return None  # nationalities and religions take "the" ("the French"), names and places without one stay
    if etype != "LOCATION" and not word.isupper() and zipf(word) >= 4.0:
        return "defined term"  # "the Company", "the State"; not places ("the Netherlands")
    if zipf(word) >= COMMON_ZIPF and _ROLE_SUFFIX.search(word.lower()) and word.lower() not in occupations():
        return "role noun"  # "the Claimant", "the Employee" (not job titles: "the Director")
    return None


# ---------------------------------------------------------------------------------------
# NER dates

_WEEKDAYS = r"mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday)?|thu(?:rs(?:day)?)?|fri(?:day)?|sat(?:urday)?|sun(?:day)?"
_HOLIDAYS = (r"christmas|xmas|easter|thanksgiving|hanukkah|ramadan|eid|diwali|halloween|new\s+year'?s?(?:\s+eve|"
             r"\s+day)?|independence\s+day|memorial\s+day|labou?r\s+day|boxing\s+day|valentine'?s?\s+day|passover")
_DATE_ANCHOR = re.compile(
    rf"(?i)\b(?:{MONTH_NAMES}|{_WEEKDAYS}|{_HOLIDAYS})\b"
    r"|(?<!\d)(?:1[89]\d\d|20\d\d|21\d\d)s?(?!\d)"  # a year
    r"|(?<![\w'’])['’]\d\d(?:s)?\b"  # '92
    r"|(?<!\d)\d{1,2}(?:st|nd|rd|th)\b"  # 13th
    r"|(?<![\d/])\d{1,2}[/.-]\d{1,2}(?:[/.-]\d{2,4})?(?![\d/\w])"  # 10/13, 13.10.92
)
_MILITARY_TIME = re.compile(r"(?i)(?:\b(?:at|@|by|until|till|from|to|since)\s+|-)(?:[01]\d|2[0-3])[0-5]\d\b")
_NUMERIC_DATE = re.compile(r"(?<![\d/])(\d{1,2})[/.-](\d{1,2})(?:[/.-]\d{2,4})?(?![\d/])")


def _valid_numeric(m) -> bool:
    a, b = int(m.group(1)), int(m.group(2))
    return (1 <= a <= 12 and 1 <= b <= 31) or (1 <= b <= 12 and 1 <= a <= 31)


_YEARS = re.compile(r"(?i)\b\d{1,3}[ \t-]*(?:years?|yrs?|y/?o)\b")
_LONG_NUMBER = re.compile(r"(?<![\d.,])\d{4,}(?![\d.,]\d)")
_SMALL_NUMBER = re.compile(r"\d{1,3}")
_AGE_WORDS = re.compile(r"(?i)\b(?:years?[ \t-]+old|years?[ \t]+of[ \t]+age|y/?o|aged?|\d0s|"
                        r"(?:twen|thir|for|fif|six|seven|eigh|nine)ties|teens?)\b")
_AGE_PHRASE = re.compile(r"(?i)\d{1,3}[ \t-]*(?:years?|yrs?)[ \t-]*(?:old|of age)")
_BRACKETED_YEAR = re.compile(r"[(\[](?:1[6-9]|20)\d\d[)\]]")


def ner_date_filter(text: str, s: int, e: int) -> str | None:
    """Why an NER DATE/TIME hit names no date (or ``None``): a date needs an anchor: a
    month or weekday name, a holiday, a year, an ordinal day or a valid numeric date.
    "5 nights", "a nice day", "130/80, HR 88", "2pm", "at 1900" have none. Hits NER misreads
    are kept when they hold something worth hiding anyway: a number of four digits or
    more (a postcode, a box number), an age in any form ("forty-two years old", "in her
    30s"; "55 years old" is left to the age recognizer, which takes the number) or a
    capitalised word inside a sentence (a name)."""
    piece = text[s:e]
    if _BRACKETED_YEAR.fullmatch(text[max(0, s - 1):e + 1]):
        return "citation year"  # "(1999) 1 WLR 1331", "[2001] UKHL 12"
    for m in _DATE_ANCHOR.finditer(piece):
        num = _NUMERIC_DATE.fullmatch(m.group(0))
        if num is not None and not _valid_numeric(num):
            continue
        if m.group(0).isdigit() and _MILITARY_TIME.search(text, max(0, s + m.start() - 7), s + m.end()):
            continue  # "at 1900": a clock time, not a year
        return None
    if _AGE_PHRASE.fullmatch(piece.strip()):
        return "an age phrase (the age recognizer's)"  # "55 years old": AGE covers the number
    if _SMALL_NUMBER.fullmatch(piece.strip()):
        return None  # "55" alone: NER reads a bare age as a date ("I'm 55", "aged 13")
    if _AGE_WORDS.search(piece):
        return None  # "forty-two years old", "in her 30s", "late twenties": an age
    if _YEARS.search(piece):
        return None  # "42 years": a duration in years may be an age
    if _LONG_NUMBER.search(piece) and not _MILITARY_TIME.search(text, max(0, s - 7), e):
        return None
    if not _sentence_initial(text, s) and piece[:1].isupper():
        return None
    return "no date in it"


# ---------------------------------------------------------------------------------------
# URLs

_FILE_EXTENSIONS = frozenset(
    "pdf doc docx xls xlsx xlsm ppt pptx txt csv tsv json xml yaml yml md rtf odt ods odp jpg jpeg png gif bmp "
    "tif tiff svg webp heic mp3 mp4 mov avi mkv wav flac zip gz tgz tar rar 7z exe dll so dmg iso apk msi bat sh "
    "py js ts java c h cpp rb go rs php pl sql log bak tmp cfg ini conf eml msg ics vcf html htm".split())
_TOKEN_REST = re.compile(r"[\w-]*(?:\.[\w-]+)*(?:/[^\s<>\"']*)?")


def url_span(text: str, s: int, e: int) -> tuple[int, int] | None:
    """The URL a pattern hit stands for, or ``None``. Presidio's pattern stops at the
    first top-level domain of its list that fits (``barbarashort.de`` in
    ``barbarashort.design``): a hit cut inside a word is extended to the end of its
    token and kept when the token's top-level domain is in the public suffix list
    (``tldextract``, offline). Then :func:`url_filter` decides."""
    if e < len(text) and (text[e].isalnum() or text[e] == "-"):
        m = _TOKEN_REST.match(text, e)
        e2 = m.end() if m else e
        while e2 > e and text[e2 - 1] in ".,;:!?)":
            e2 -= 1
        host = text[s:e2].split("//", 1)[-1].split("/", 1)[0]
        import tldextract

        ext = tldextract.extract(host)
        if not (ext.suffix and ext.domain):
            return None
        e = e2
    return None if url_filter(text, s, e) else (s, e)


_SCHEME = re.compile(r"^(?:https?|ftp)://", re.IGNORECASE)


def url_filter(text: str, s: int, e: int) -> str | None:
    """Why a URL pattern hit is not a URL (or ``None``): it must start and end at a
    token boundary, and without a scheme or ``www.`` its registrable name must have at
    least three characters and its last label must not be a file extension
    (``report.pdf``); the top-level domain itself is checked by Presidio's pattern."""
    piece = text[s:e].rstrip(".,;:!?)'\"")
    if e < len(text) and (text[e].isalnum() or text[e] in "_"):
        return "cut inside a word"
    if s > 0 and (text[s - 1].isalnum() or text[s - 1] in "@._-"):
        return "cut inside a word"
    if _SCHEME.match(piece) or piece.lower().startswith("www."):
        return None
    host, _, path = piece.partition("/")
    labels = [x for x in host.lower().split(".") if x]
    if len(labels) < 2:
        return "no domain"
    tld = labels[-1].split(":", 1)[0]
    if tld in _FILE_EXTENSIONS or (len(labels) >= 2 and labels[-1] in _FILE_EXTENSIONS):
        return "file name"
    name = labels[-2] if len(labels[-2]) > 3 or len(labels) < 3 else labels[-3]
    if len(name) < 3:
        return "short name"
    return None
