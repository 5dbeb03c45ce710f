"""Name recognizers (see :mod:`privatize.redaction.recognizers`, which lists them with
the others): names after a title or a name cue, names alone on a labelled line, and
job titles (TITLE)."""

from __future__ import annotations

import regex as re

from privatize.redaction.filters import is_known_name
from privatize.redaction.presidio import import_presidio
from privatize.redaction.words import OCCUPATION_SET as _OCCUPATION_SET
from privatize.redaction.words import OCCUPATIONS as _OCCUPATIONS
from privatize.redaction.words import stop_words

import_presidio()  # first, so Presidio leaves Transformers out (see presidio.py)

from presidio_analyzer import Pattern, PatternRecognizer  # noqa: E402

CASE = re.MULTILINE | re.VERSION0

# ---------------------------------------------------------------------------------------
# names the NER model misses: after a title, after a name cue, in upper case

_NAME = r"[A-Z][\w'’-]*[^\W\d_']"
_PARTICLE = r"(?:van|von|de|der|den|da|di|du|del|della|le|la|al|el|bin|ibn|ter|ten|dos|das|St\.)"
_TITLES = r"(?:Mr|Mrs|Ms|Mss|Miss|Mx|Dr|Prof|Professor|Sir|Dame|Lady|Lord|Rev|Fr|Capt|Captain|Sgt|Col|Gen|Hon|Judge|Rabbi|Imam|Sister|Brother|Father|Mother|Aunt|Uncle)"
_CUES = (r"(?:[Mm]y name is|[Mm]y name's|[Nn]ame is|[Nn]ame's|[Nn]ame:|NAME:|I am|I'm|I’m|[Tt]his is|[Cc]all me|"
         r"[Cc]alled|[Nn]amed|[Ss]igned,?|[Rr]egards,?|[Ss]incerely,?|[Cc]heers,?|[Tt]hanks,?|[Dd]ear|[Hh]i|[Hh]ello|"
         r"[Hh]ey|[Mm]eet|[Aa]sk for|[Ss]poke (?:to|with)|[Tt]alked to|[Cc]ontact|[Mm]arried|[Ss]on of|"
         r"[Dd]aughter of|[Ww]ife of|[Hh]usband of|[Ff]riend)")
_NOT_NAMES = frozenset(
    "I A An The This That It He She We They You My Your Our Their His Her Its Sorry Sure Yes No Not Ok Okay "
    "Thanks Thank Please Here There Good Fine Great Well So And But Or If When Where What Who Why How Just "
    "Also Still Happy Glad Afraid Looking Calling Writing Going Interested Trying Back New Available Done "
    "Ready Mr Mrs Ms Dr Sir Madam All Everyone Team Customer Support Service Sales Dear Hi Hello Hey".split())


class TitledNameRecognizer(PatternRecognizer):
    """Names after a title (``Mr. Kovalev``, ``Dr Maria Lopez``) or a name cue (``my
    name is Tamara``, ``I'm Mary``, ``Regards, Jo Smith``); case-sensitive, the span is
    the name only."""

    PATTERNS = [
        Pattern("title name", rf"(?<![\w.]){_TITLES}\.?[ \t]+{_NAME}(?:[ \t]+(?:{_PARTICLE}[ \t]+)*{_NAME}){{0,2}}", 0.7),
        Pattern("cue name", rf"(?<=\b{_CUES}[ \t]+){_NAME}(?:[ \t]+(?:{_PARTICLE}[ \t]+)*{_NAME}){{0,2}}", 0.5),
    ]
    CONTEXT = ["name", "mr", "mrs", "ms", "dr", "called", "named"]

    def __init__(self, supported_language: str = "en", supported_entity: str = "PERSON"):
        super().__init__(supported_entity=supported_entity, name="TitledNameRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=CASE)

    _TITLE_RE = re.compile(rf"^{_TITLES}\.?[ \t]+")

    def invalidate_result(self, pattern_text: str) -> bool:
        name = self._TITLE_RE.sub("", pattern_text)
        first = re.split(r"[ \t'’]", name, maxsplit=1)[0]
        return first in _NOT_NAMES or name.isupper() and len(name) <= 3


_OCC_NOT_BEFORE = frozenset("the a an and or of my our your his her their is was as to for with at in on".split())
_ALPHA_WORD = re.compile(r"[^\W\d_][\w'’-]*")


class OccupationRecognizer(PatternRecognizer):
    """Job titles (``Systems administrator``, ``the Civil drafter``, ``Gas furnace
    installer``): an occupation noun and up to four words before it on the same line
    (function words end the title). Weak on its own (0.2: the conservative policy uses
    it); context words such as ``title``, ``position`` or ``job`` raise it above a
    redaction threshold.

    The pattern below documents the match; :meth:`find_candidates` finds the same spans
    by looking up words in a set, which is many times faster than the alternation."""

    PATTERNS = [
        Pattern("occupation",
                rf"(?<![\w-])(?:(?!(?i:{'|'.join(sorted(_OCC_NOT_BEFORE))})\b)[^\W\d_][\w'’-]*[ \t]+){{0,4}}"
                rf"(?i:{_OCCUPATIONS})s?(?![\w-])",
                0.2),
    ]
    CONTEXT = ["title", "position", "job", "role", "occupation", "profession", "works", "worked", "employed",
               "hired", "career", "promoted"]
    MAX_WORDS_BEFORE = 4

    def __init__(self, supported_language: str = "en", supported_entity: str = "TITLE"):
        super().__init__(supported_entity=supported_entity, name="OccupationRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=CASE)

    def find_candidates(self, text: str) -> list[tuple[int, int, float, str]]:
        """(start, end, score, pattern name) of every job title in ``text``."""
        words = [(m.start(), m.end(), m.group(0)) for m in _ALPHA_WORD.finditer(text)]
        out = []
        score = self.patterns[0].score
        for k, (s, e, w) in enumerate(words):
            lw = w.lower()
            if lw not in _OCCUPATION_SET and not (lw.endswith("s") and lw[:-1] in _OCCUPATION_SET):
                continue
            if e < len(text) and (text[e] == "-" or text[e].isalnum()):
                continue
            start = s
            j = k - 1
            while j >= 0 and k - j <= self.MAX_WORDS_BEFORE:
                ps, pe, pw = words[j]
                gap = text[pe:start]
                if not gap or gap.strip(" \t") or pw.lower() in _OCC_NOT_BEFORE:
                    break
                start = ps
                j -= 1
            out.append((start, e, score, "occupation"))
        return out

    def analyze(self, text, entities, nlp_artifacts=None, regex_flags=None):  # noqa: D102
        from presidio_analyzer import RecognizerResult

        return [RecognizerResult(self.supported_entities[0], s, e, sc,
                                 recognition_metadata={RecognizerResult.RECOGNIZER_NAME_KEY: self.name,
                                                       RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id})
                for s, e, sc, _ in self.find_candidates(text)]


class NameLineRecognizer(PatternRecognizer):
    """A line that holds only two or three capitalised words (``>Nathaniel Perković``
    at the head of a letter or a signature block): a name, or an organisation's name.
    Only in texts of three lines or more; common words are never names."""

    PATTERNS = [
        Pattern("name line", r"(?m)(?:^|(?<=\n))[ \t>?*|-]*\K\p{Lu}[\p{Ll}'’-]+(?:[ \t]+\p{Lu}[\p{Ll}'’.-]+){1,2}(?=[ \t]*$)",
                0.4),
    ]
    CONTEXT = ["name", "from", "to", "signed", "regards", "sincerely"]
    min_newlines = 2  # the batch detector honours this too

    def __init__(self, supported_language: str = "en", supported_entity: str = "PERSON"):
        super().__init__(supported_entity=supported_entity, name="NameLineRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=CASE)

    def invalidate_result(self, pattern_text: str) -> bool:
        stops = stop_words()
        words = pattern_text.split()
        if any(w.lower() in stops or w in _NOT_NAMES for w in words):
            return True
        # a job title on its own line ("Project Manager", "Senior Software Engineer"), unless
        # it starts with a known first name ("John Baker")
        return words[-1].lower() in _OCCUPATION_SET and not is_known_name(words[0])

    def analyze(self, text, entities, nlp_artifacts=None, regex_flags=None):  # noqa: D102
        if text.count("\n") < self.min_newlines:
            return []
        return super().analyze(text, entities, nlp_artifacts, regex_flags)

