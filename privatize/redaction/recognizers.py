"""Pattern recognizers that close the gaps measured in Presidio's defaults (ENVIRONMENT.md):
international phone formats, 12-19 digit card numbers (several in a row too), IBANs in
blocks before a word, street addresses, postcodes,
reference / order / tracking numbers, ages and names after a title or a name cue.

Each one is a Presidio :class:`~presidio_analyzer.PatternRecognizer` and works the
Presidio way: regex patterns with a base score, ``validate_result`` (True lifts a hit
to 1.0, False drops it: checksums, phone number metadata) and ``invalidate_result``
(True drops it), and ``context`` words that raise a hit's score when they occur near
it. They can be added to an ``AnalyzerEngine``'s registry
(:func:`privatize.redaction.engine.build_analyzer`), and the batch detector
(:mod:`privatize.redaction.detect`) runs the same objects without the per-document
overhead of ``AnalyzerEngine.analyze``.

Regex flags are chosen per recognizer: patterns that rely on capital letters (names,
codes, state abbreviations) are case-sensitive.

These were tuned on presidio-research's ``generated_large.json`` only; the report set
(``synth_dataset_v2.json``) was never used for tuning.
"""

from __future__ import annotations

import regex as re

from privatize.redaction.presidio import import_presidio

import_presidio()  # first, so Presidio leaves Transformers out (see presidio.py)
from presidio_analyzer import Pattern, PatternRecognizer  # noqa: E402
from presidio_analyzer.predefined_recognizers import IbanRecognizer  # noqa: E402

CASE = re.MULTILINE | re.VERSION0
NOCASE = re.MULTILINE | re.IGNORECASE | re.VERSION0

# ---------------------------------------------------------------------------------------
# helpers

_NON_DIGIT = re.compile(r"\D")


def digits_of(text: str) -> str:
    return _NON_DIGIT.sub("", text)


def luhn_valid(number: str) -> bool:
    """The Luhn checksum over a string of digits."""
    if not number.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(number)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# ---------------------------------------------------------------------------------------
# phone numbers

_PHONE_REGIONS = ("US", "GB", "DE", "FR", "IN", "CA", "BR", "AU", "NL", "ES", "IT", "IL", "IE", "ZA", "MX", "BE",
                  "CH", "AT", "SE", "NO", "DK", "PL", "JP", "CN", "SG", "NZ")
_DATE_SHAPE = re.compile(r"^(?:\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2}(?:\d{2})?)$")
_TIME_SHAPE = re.compile(r"\d{1,2}:\d{2}")
_IP_SHAPE = re.compile(r"^(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}$")
_SSN_SHAPE = re.compile(r"^\d{3}([- ])\d{2}\1\d{4}$")
_TIME_RANGE = re.compile(r"^(?:[01]\d|2[0-3])[0-5]\d[ \t]?-[ \t]?(?:[01]\d|2[0-3])[0-5]\d$")
_EXT = re.compile(r"\s*(?:x|ext\.?|extension)\s*\d{1,6}$", re.IGNORECASE)
_GROUP_SEP = re.compile(r"[ \t.()/-]+")


class InternationalPhoneRecognizer(PatternRecognizer):
    """Phone numbers in national and international formats: ``+44 20 7946 0958``,
    ``(11) 4706-6184``, ``0660 565 36 45``, ``001-748-088-2851x818``, ``92 34 70``.

    A candidate is a run of digit groups (separators space, ``.``, ``-``, ``/``, an
    optional ``(area)`` and ``+``/``00`` country prefix, an optional extension) with
    7 to 15 digits, or 6 digits in three pairs. ``validate_result`` lifts a candidate
    that ``phonenumbers`` accepts as a valid number (with its ``+`` prefix, or in one of
    a list of regions) to 1.0; other phone-shaped candidates keep the base score 0.4,
    raised by context words. Dates, times and repeated digits are dropped."""

    PATTERNS = [
        Pattern(
            "phone (grouped)",
            r"(?<![\w+./-])(?<!\d,)(?:(?:\+|00)\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{1,15}(?:[ .\t/-]\d{1,8}){0,6}"
            r"(?:[ \t]?(?:x|ext\.?|extension)[ \t]?\d{1,6})?(?![\w]|[.,/-]\d)",
            0.4,
        ),
    ]
    CONTEXT = ["phone", "telephone", "tel", "cell", "cellphone", "mobile", "call", "fax", "office", "reach",
               "contact", "whatsapp", "dial", "landline", "text", "ring", "hotline"]

    def __init__(self, supported_language: str = "en", supported_entity: str = "PHONE_NUMBER"):
        super().__init__(supported_entity=supported_entity, name="InternationalPhoneRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=NOCASE)

    @staticmethod
    def _core(text: str) -> str:
        return _EXT.sub("", text)

    def invalidate_result(self, pattern_text: str) -> bool:
        core = self._core(pattern_text).strip()
        digits = digits_of(core)
        n = len(digits)
        groups = [g for g in _GROUP_SEP.split(core) if g]
        if n > 15 or n < 6:
            return True
        if n == 6 and not (len(groups) == 3 and all(len(g) == 2 for g in groups)):
            return True
        if len(set(digits)) == 1:
            return True
        if _DATE_SHAPE.match(core) or _TIME_SHAPE.search(core):
            return True
        if _IP_SHAPE.match(core) or _SSN_SHAPE.match(core):
            return True  # an IPv4 address or a US SSN, not a phone number
        if "/" in core and "." in core:
            return True  # a lab value series: "7.38/42/88"
        if _TIME_RANGE.match(core):
            return True  # a shift: "0700-1900"
        if len(groups) == 1 and not core.startswith("+"):
            # a bare digit run: phone-like lengths only (7-12 digits), no leading 0000
            return not (7 <= n <= 12) or digits.startswith("000")
        if len(groups) >= 2 and max(len(g) for g in groups) > 8:
            return True
        return False

    def validate_result(self, pattern_text: str) -> bool | None:
        """1.0 for a number ``phonenumbers`` calls valid: with its ``+``/``00`` country
        code; in the North American plan when written as 10 or 11 digits; or, written
        with its national trunk prefix ``0``, in one of a list of regions. Other
        phone-shaped candidates keep the base score (context words decide)."""
        import phonenumbers

        core = self._core(pattern_text).strip()
        if core.isdigit():
            return None  # a bare digit run: too many are "valid" somewhere
        digits = digits_of(core)
        international = None
        if core.startswith("+"):
            international = core
        elif core.startswith("00"):
            international = "+" + core[2:]
        elif core.startswith("001-") or core.startswith("001 "):
            international = "+" + core[2:]
        try:
            if international is not None:
                return phonenumbers.is_valid_number(phonenumbers.parse(international, None)) or None
            if len(digits) == 10 or (len(digits) == 11 and digits[0] == "1"):
                for region in ("US", "CA"):
                    if phonenumbers.is_valid_number(phonenumbers.parse(core, region)):
                        return True
            if core.lstrip("(").startswith("0"):
                for region in _PHONE_REGIONS:
                    if phonenumbers.is_valid_number(phonenumbers.parse(core, region)):
                        return True
        except phonenumbers.NumberParseException:
            return None
        return None


# ---------------------------------------------------------------------------------------
# payment cards

_CARD_RUN = re.compile(r"(?<![\w.,/+-])[1-6]\d{3,}(?:[ -]\d{2,})*")
_DIGIT_RUN = re.compile(r"\d+")
_CARD_MAX_DIGITS = 19


def _glued_on(text: str, end: int) -> bool:
    """Whether a number ending at ``end`` runs on into a word or another number
    (``4111...1111x``, ``...1111-2``, ``...1111.5``): the card pattern's end lookahead."""
    if end >= len(text):
        return False
    ch = text[end]
    if ch.isalnum() or ch == "_":
        return True
    return ch in ".,/-" and end + 1 < len(text) and text[end + 1].isdigit()


class LuhnCreditCardRecognizer(PatternRecognizer):
    """Card numbers of 12 to 19 digits (major industry identifier 1-6), written as one
    run or in groups separated consistently by spaces or hyphens, accepted only when the
    Luhn checksum holds (validate_result: True = 1.0, False = dropped).

    The pattern is greedy: on cards written one after another with a space between
    (``4111 1111 1111 1111 5500 0000 0000 0004``, ``4111111111111111 5500000000000004``)
    it runs on into the next number and the match fails the checksum.
    :meth:`find_candidates` (which ``analyze`` and the batch detector use) keeps every
    match that validates, and where one fails, splits the whole run of digit groups it
    starts (groups of two digits or more, one space or hyphen between) at spaces into the
    fewest valid cards. Only a split that leaves no group over counts: a long reference
    number is not cut into a card and a remainder."""

    PATTERNS = [
        Pattern("card (12-19 digits)", r"(?<![\w.,/+-])[1-6]\d{3}(?:[ -]?\d{2,6}){1,5}(?![\w]|[.,/-]\d)", 0.3),
    ]
    CONTEXT = ["credit", "card", "visa", "mastercard", "cc", "amex", "discover", "jcb", "diners", "maestro",
               "debit", "payment", "pay", "charged"]

    def __init__(self, supported_language: str = "en", supported_entity: str = "CREDIT_CARD"):
        super().__init__(supported_entity=supported_entity, name="LuhnCreditCardRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=NOCASE)
        self._pattern = re.compile(self.patterns[0].regex, NOCASE)

    def validate_result(self, pattern_text: str) -> bool:
        seps = set(re.findall(r"[ -]", pattern_text))
        if len(seps) > 1:
            return False
        digits = digits_of(pattern_text)
        if not 12 <= len(digits) <= _CARD_MAX_DIGITS:
            return False
        return luhn_valid(digits)

    @staticmethod
    def _is_card(text: str, groups: list[tuple[int, int]], i: int, j: int) -> bool:
        """Whether digit groups ``i..j`` of a run are one card: it starts with a group of
        four digits or more with a major industry identifier 1-6, its separators are all
        the same, and its 12-19 digits pass the Luhn checksum."""
        s0, e0 = groups[i]
        if e0 - s0 < 4 or text[s0] not in "123456":
            return False
        if len({text[groups[k][1]:groups[k + 1][0]] for k in range(i, j)}) > 1:
            return False
        digits = "".join(text[s:e] for s, e in groups[i:j + 1])
        return 12 <= len(digits) <= _CARD_MAX_DIGITS and luhn_valid(digits)

    def _cards_in_run(self, text: str, groups: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The cards of one run: all of it, or its fewest-pieces split at spaces into
        cards; nothing when neither exists."""
        n = len(groups)
        if self._is_card(text, groups, 0, n - 1):
            return [(groups[0][0], groups[-1][1])]
        # best[k]: the fewest cards that cover groups[:k] exactly (None: impossible); a
        # card may end before group k only where a space, not a hyphen, separates them
        best: list[list[tuple[int, int]] | None] = [None] * (n + 1)
        best[0] = []
        for k in range(1, n + 1):
            j = k - 1
            if k < n and text[groups[j][1]] != " ":
                continue
            for i in range(j, -1, -1):
                if sum(e - s for s, e in groups[i:k]) > _CARD_MAX_DIGITS:
                    break
                prev = best[i]
                if prev is None or (i > 0 and text[groups[i - 1][1]] != " "):
                    continue
                if self._is_card(text, groups, i, j) and (best[k] is None or len(prev) + 1 < len(best[k])):
                    best[k] = prev + [(groups[i][0], groups[j][1])]
        return best[n] or []

    def find_candidates(self, text: str) -> list[tuple[int, int, float, str]]:
        """(start, end, score, pattern name) of every card in ``text``: the pattern's
        matches that pass :meth:`validate_result`, and where a match fails, the cards its
        whole run of digit groups splits into. Score 1.0: every one passed the Luhn
        checksum."""
        out = []
        name = self.patterns[0].name
        pos = 0
        while (m := self._pattern.search(text, pos)) is not None:
            pos = m.end()
            if self.validate_result(m.group(0)):
                out.append((m.start(), m.end(), 1.0, name))
                continue
            run = _CARD_RUN.match(text, m.start())
            groups = [(run.start() + g.start(), run.start() + g.end()) for g in _DIGIT_RUN.finditer(run.group(0))]
            while groups and _glued_on(text, groups[-1][1]):
                groups.pop()  # as the pattern's end lookahead: give back groups glued to what follows
            cards = self._cards_in_run(text, groups) if groups else []
            out.extend((s, e, 1.0, name) for s, e in cards)
            if cards:
                pos = max(pos, cards[-1][1])
        return out

    def analyze(self, text, entities, nlp_artifacts=None, regex_flags=None):  # noqa: D102
        return _results(self, text, self.find_candidates(text))


# ---------------------------------------------------------------------------------------
# IBANs

_IBAN_START = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}[0-9]{2}")
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")
_IBAN_MIN, _IBAN_MAX = 15, 34  # the shortest (Norway) and longest lengths the IBAN standard allows


class BlockIbanRecognizer(IbanRecognizer):
    """IBANs written as one run or in blocks of four (``GB82 WEST 1234 5698 7654 32``,
    ``DE89-3704-0044-0532-0130-00``), in either case, with the span of the IBAN only.

    Presidio's pattern, matched without regard to case (so that ``gb48awjv0722...`` is
    found), also takes a lower-case word after the last block for one more block
    (``ES91 2100 0418 4502 0005 1332 plea``), and its match then fails the checksum.
    :meth:`find_candidates` reads the blocks from a country code and check digits on
    (a separator only after every fourth character, as in the pattern) and tries each
    place the IBAN could end, longest first: the first that passes the checksum and
    spells the country's format exactly is the IBAN; where none does (Presidio's format
    for a country can be short: Portugal's has 21 characters of 25), the first that
    passes the checksum and starts with the format, Presidio's own test. Score 1.0; 0.5
    for one that is valid only upper-cased, as in Presidio."""

    def __init__(self, supported_language: str = "en", supported_entity: str = "IBAN_CODE"):
        super().__init__(supported_language=supported_language, supported_entity=supported_entity,
                         name="IbanRecognizer")
        self._exact = IbanRecognizer(supported_language=supported_language, supported_entity=supported_entity,
                                     exact_match=True)

    def _ends(self, text: str, start: int) -> list[int]:
        """Where an IBAN starting at ``start`` could end: after an alphanumeric run, with
        15 to 34 characters before it (the lengths the standard allows)."""
        ends, pos, length = [], start, 0
        while True:
            tok = _ALNUM_RUN.match(text, pos)
            length += tok.end() - tok.start()
            if length > _IBAN_MAX:
                return ends
            if length >= _IBAN_MIN:
                ends.append(tok.end())
            nxt = tok.end()
            if (length % 4 or nxt + 1 >= len(text) or text[nxt] not in " -"
                    or _ALNUM_RUN.match(text, nxt + 1) is None):
                return ends
            pos = nxt + 1

    def find_candidates(self, text: str) -> list[tuple[int, int, float, str]]:
        """(start, end, score, pattern name) of every IBAN in ``text``."""
        out: list[tuple[int, int, float, str]] = []
        base = self.patterns[0].score
        name = self.patterns[0].name
        after = 0
        for m in _IBAN_START.finditer(text):
            start = m.start()
            if start < after:
                continue
            ends = self._ends(text, start)[::-1]
            for validate in (self._exact.validate_result, self.validate_result):
                found = next(((end, v) for end in ends if (v := validate(text[start:end])) is not False), None)
                if found is not None:
                    end, valid = found
                    out.append((start, end, 1.0 if valid else base, name))
                    after = end
                    break
        return out

    def analyze(self, text, entities, nlp_artifacts=None, regex_flags=None):  # noqa: D102
        return _results(self, text, self.find_candidates(text))

def _results(recognizer: PatternRecognizer, text: str, found: list[tuple[int, int, float, str]]) -> list:
    """``find_candidates`` hits as Presidio results (with the explanation Presidio's
    context enhancer writes into)."""
    from presidio_analyzer import RecognizerResult

    pattern = recognizer.patterns[0]
    return [RecognizerResult(recognizer.supported_entities[0], s, e, sc,
                             analysis_explanation=PatternRecognizer.build_regex_explanation(
                                 recognizer.name, pattern.name, pattern.regex, pattern.score, sc == 1.0,
                                 recognizer.global_regex_flags),
                             recognition_metadata={RecognizerResult.RECOGNIZER_NAME_KEY: recognizer.name,
                                                   RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: recognizer.id})
            for s, e, sc, _ in found]


# ---------------------------------------------------------------------------------------
# street addresses

_SUFFIXES = (
    "street|st|avenue|ave|av|road|rd|boulevard|blvd|lane|ln|drive|dr|court|ct|place|pl|square|sq|terrace|ter|"
    "way|parkway|pkwy|highway|hwy|circle|cir|crescent|cres|close|grove|gardens|gdns|row|walk|hill|park|"
    "trail|trl|alley|path|pike|plaza|plz|point|pt|ridge|run|view|vista|loop|mews|wharf|quay|causeway|"
    "expressway|freeway|route|rte|crossing|xing|harbor|harbour|heights|hts|junction|jct|manor|meadow|meadows|"
    "mill|mills|mount|mt|orchard|pass|pines|port|prairie|ranch|shore|shores|spring|springs|station|sta|"
    "summit|turnpike|tpke|underpass|union|valley|vly|village|vlg|ville|well|wells|estate|estates|field|"
    "fields|ford|forest|fork|forks|fort|ft|glen|green|haven|island|isle|key|knoll|knolls|lake|lakes|landing|"
    "lodge|motorway|oval|rise|strasse|straße|str|gasse|weg|platz|allee|rue|avenida|calle|via|viale|piazza|"
    "rua|travessa|straat|laan|plein|gracht|vej|gade|gatan|vägen|gata|veien|katu|tie|utca|út|ulica|ul"
)
_UNIT = r"(?i:(?:apt|apartment|suite|ste|unit|flat|floor|fl|room|rm|bldg|building|box)\.?[ \t]*#?[\w-]{1,6}|#[ \t]?\d{1,6})"
_WORD = r"[^\W\d_][\w'’.-]*"
_CAPW = r"\p{Lu}[\w'’.-]*"
_LOWW = r"\p{Ll}[\w'’.-]*"
_NUMW = r"\d{1,5}(?:st|nd|rd|th)"
_SUFFIX = rf"(?i:(?:{_SUFFIXES})\.?)"
_PARTICLES = r"(?:de|da|do|dos|das|del|della|di|du|van|von|der|den|la|le|el|al|y|e|i|u|och|og|am|an|im|zu|ter|ten|sur|sous|lès)"
_STATES = ("AL|AK|AZ|AR|CA|CO|CT|DE|DC|FL|GA|HI|ID|IL|IN|IA|KS|KY|LA|ME|MD|MA|MI|MN|MS|MO|MT|NE|NV|NH|NJ|NM|NY|"
           "NC|ND|OH|OK|OR|PA|RI|SC|SD|TN|TX|UT|VT|VA|WA|WV|WI|WY|PR|GU|VI|AS|MP|AA|AE|AP")
# English words that never sit on an address line: a place line containing one is prose
_NOT_PLACE = (r"(?!(?i:i|you|your|we|our|my|me|he|she|they|it|is|are|was|were|be|been|have|has|had|do|does|did|"
              r"will|would|can|could|should|please|thanks|thank|this|that|for|to|with|at|on|if|when|but|so|"
              r"not|no|yes|last|next|yesterday|today|tomorrow|night|morning|here|there|sent|arrived|for)\b)")
_PWORD = rf"{_NOT_PLACE}{_WORD}"
_POST = r"(?:[A-Z0-9]{2,4}[ \t]?\d[A-Z0-9]{2}|\d{3,6}(?:-\d{3,4})?)"
# a place on its own line or after a comma: "ANGERED", "Marshall Islands 56293", "CO", "56139"
_PLACE_NL = (rf"(?:{_PWORD}(?:[ \t]+(?:{_PWORD}|\(?[A-Z]{{2,4}}\)?)){{0,4}}(?:[ \t]*,?[ \t]+{_POST})?"
             rf"|[A-Z]{{2}}(?:[ \t]+{_POST})?|{_POST})")
# a place after spaces on the same line: capitalised words only ("Curitiba Paraná", "Calgary AB")
_PLACE_SP = rf"(?:{_NOT_PLACE}{_CAPW}(?:[ \t]+(?:{_NOT_PLACE}{_CAPW}|[A-Z]{{2,3}})){{0,3}}(?:[ \t]*,?[ \t]+{_POST})?|{_POST})"
_JOIN_NL = r"[ \t]*(?:,[ \t]*(?:\n[ \t>?*|-]*)?|\n[ \t>?*|-]*(?:,[ \t]*)?)"
_CONT = rf"(?:{_JOIN_NL}(?:{_UNIT}|{_PLACE_NL})|[ \t]+(?:{_UNIT}|{_PLACE_SP}))"
_HOUSE = r"\d{1,6}[A-Za-z]?(?:[ \t]+\d{1,5}[A-Za-z]?)?"
_POBOX = r"(?i:p\.?[ \t]?o\.?[ \t]?box)[ \t]+\d{1,6}"
# street line, mixed case: house number(s), capitalised words / particles / ordinals /
# street-type words, an optional house number after the name ("Vesturgata 66")
_STREET_A = (rf"(?:{_POBOX}|{_HOUSE}(?:[ \t]+(?:{_CAPW}|{_NUMW}|{_SUFFIX}|{_PARTICLES}(?=[ \t]+\p{{Lu}}))){{1,7}}"
             rf"(?:[ \t]+\d{{1,5}}[A-Za-z]?\.?(?![\w]))?)")
# street line, lower case text: words up to a street-type word, or up to a house number
# that ends the line
# a street named without a house number, after a preposition: "on park street", "at Mill Road"
_STREET_NAME = (r"(?!(?i:the|a|an|my|your|our|their|his|her|its|this|that|same|other|next|wrong|right|each|every|any|"
                r"some|which|what|memory)\b)[^\W\d_][\w'’-]*(?:[ \t]+[^\W\d_][\w'’-]*)?[ \t]+"
                r"(?i:street|road|avenue|lane|drive|boulevard|crescent|terrace|gardens|close|grove|place|square)(?![\w])")
_STREET_B = (rf"(?:{_HOUSE}(?:[ \t]+(?:{_LOWW}|{_NUMW})){{0,5}}?[ \t]+(?:{_SUFFIX}(?:[ \t]+\d{{1,5}}[a-z]?)?"
             rf"|{_LOWW}[ \t]+\d{{1,5}}[a-z]?\.?(?=[ \t]*(?:\n|,|$))))")


class StreetAddressRecognizer(PatternRecognizer):
    """Street addresses, single-line (``4589 40th Street Suite 603 Calgary AB``,
    ``65775 Craig Union North Zachary, WI 42884``) or as a block of short lines
    (``69 Roheline 43 / Apt. 305 / Lepassaare / Marshall Islands 56293``).

    A pattern takes a street line (house number and words, or a P.O. box) and the
    unit, place and postcode parts that follow it (on the same line only capitalised
    words); ``invalidate_result`` drops matches without address evidence (a street-type
    word, a unit, a postcode or state, a house number after a capitalised street name,
    or three lines)."""

    PATTERNS = [
        Pattern("street address", rf"(?<![\w.,/-]){_STREET_A}(?:{_CONT}){{0,6}}(?![\w])", 0.35),
        Pattern("street name after a preposition", rf"(?<=\b(?i:on|at|in|near|off|along|from|onto|via|of|to|about|by|down|up|past|into)[ \t]+)"
                rf"{_STREET_NAME}", 0.4),
        Pattern("street address (lower case)", rf"(?<![\w.,/-]){_STREET_B}(?:{_JOIN_NL}(?:{_UNIT}|{_PLACE_NL})){{0,5}}(?![\w])", 0.3),
    ]
    CONTEXT = ["address", "live", "lives", "living", "reside", "resides", "located", "ship", "shipping", "deliver",
               "delivery", "mail", "send", "sent", "moved", "billing", "street", "home", "visit", "office"]
    _SUFFIX_RE = re.compile(rf"(?<![\w])(?:{_SUFFIXES})\.?(?![\w])", re.IGNORECASE)
    _UNIT_RE = re.compile(r"(?<![\w])(?:apt|apartment|suite|ste|unit|flat|floor|box|bldg)\b|#\d", re.IGNORECASE)
    _ZIP_RE = re.compile(rf"(?:\b(?:{_STATES})\b[ \t,]*\d{{5}}|\b\d{{4,6}}(?:-\d{{3,4}})?[ \t]*$)")
    _TRAILING_NO = re.compile(r"^\d{1,6}[a-z]?(?:[ \t]+\d{1,5})?[ \t]+[^\W\d_][\w'’.-]*(?:[ \t]+[\w'’.-]+){0,5}?[ \t]+\d{1,5}[a-z]?\.?(?:$|[ \t\n,])",
                              re.IGNORECASE)
    _STOP_START = re.compile(r"^\d{1,6}[ \t]+(?:of|and|or|to|in|on|at|for|the|a|an|is|are|was|were|years?|"
                             r"days?|hours?|minutes?|times?|people|percent|items?|pieces?|kids|children|months?|"
                             r"weeks?|founders?|members?|am|pm|a\.m\.|p\.m\.)\b", re.IGNORECASE)

    def __init__(self, supported_language: str = "en", supported_entity: str = "STREET_ADDRESS"):
        super().__init__(supported_entity=supported_entity, name="StreetAddressRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=CASE)

    def validate_result(self, pattern_text: str) -> bool | None:
        """Strong evidence lifts the score to 1.0: a street-type word with a postcode, a
        state or a unit, or a block of three lines or more with a postcode or a unit."""
        first = pattern_text.split("\n", 1)[0]
        lines = [ln for ln in pattern_text.split("\n") if ln.strip(" \t>?*|-,")]
        zip_or_unit = bool(self._ZIP_RE.search(pattern_text)) or bool(self._UNIT_RE.search(pattern_text))
        if (self._SUFFIX_RE.search(first) and (zip_or_unit or len(lines) >= 2)) or (len(lines) >= 3 and zip_or_unit):
            return True
        return None

    def invalidate_result(self, pattern_text: str) -> bool:
        if self._STOP_START.match(pattern_text):
            return True
        first = pattern_text.split("\n", 1)[0]
        lines = [ln for ln in pattern_text.split("\n") if ln.strip(" \t>?*|-,")]
        if len(re.findall(r"[^\W\d_]", pattern_text)) < 3:
            return True
        evidence = (bool(self._SUFFIX_RE.search(first)) or bool(self._UNIT_RE.search(pattern_text))
                    or bool(self._ZIP_RE.search(pattern_text)) or len(lines) >= 3
                    or first.lower().startswith(("p.o", "po ", "p o")))
        if not evidence and self._TRAILING_NO.match(first):
            # "Vesturgata 66": a capitalised or non-ASCII street name before a number
            words = re.findall(r"[^\W\d_][\w'’.-]*", first)
            evidence = bool(words) and (words[0][0].isupper() or not words[0].isascii()) and not (
                len(words[0]) > 1 and words[0].isupper())  # "1 WLR 741": a law report, not a street
        return not evidence


# ---------------------------------------------------------------------------------------
# postcodes

class UsZipCodeRecognizer(PatternRecognizer):
    """US ZIP codes: after a state abbreviation (``CO 80202``, ``WI 42884``) with a
    medium score; a bare 5 or 5+4 digit number only with context words."""

    PATTERNS = [
        Pattern("zip after state", rf"(?<=\b(?:{_STATES})\.?,?[ \t]{{1,3}})\d{{5}}(?:-\d{{4}})?(?![\w-])", 0.6),
        Pattern("zip+4", r"(?<![\w-])\d{5}-\d{4}(?![\w-])", 0.3),
        Pattern("zip (weak)", r"(?<![\w.,-])\d{5}(?![\w]|[.,-]\d)", 0.05),
    ]
    CONTEXT = ["zip", "zipcode", "postal", "postcode", "code"]

    def __init__(self, supported_language: str = "en", supported_entity: str = "ZIP_CODE"):
        super().__init__(supported_entity=supported_entity, name="UsZipCodeRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=CASE)


class UkPostcodeRecognizer(PatternRecognizer):
    """UK postcodes in the official formats (``SW1A 1AA``, ``M1 1AE``, ``B33 8TH``,
    ``CR2 6XH``, ``DN55 1PT``, ``EC1A 1BB``), upper case."""

    PATTERNS = [
        Pattern("uk postcode",
                r"(?<![\w-])(?:GIR ?0AA|(?:[A-PR-UWYZ][0-9][0-9]?|[A-PR-UWYZ][A-HK-Y][0-9][0-9]?|"
                r"[A-PR-UWYZ][0-9][A-HJKPSTUW]|[A-PR-UWYZ][A-HK-Y][0-9][ABEHMNPRVWXY]) ?[0-9][ABD-HJLNP-UW-Z]{2})"
                r"(?![\w-])",
                0.5),
        Pattern("uk postcode (any case)",
                r"(?<![\w-])(?i:(?:[a-pr-uwyz][0-9][0-9]?|[a-pr-uwyz][a-hk-y][0-9][0-9]?|[a-pr-uwyz][0-9][a-hjkpstuw]|"
                r"[a-pr-uwyz][a-hk-y][0-9][abehmnprvwxy]) ?[0-9][abd-hjlnp-uw-z]{2})(?![\w-])",
                0.4),
    ]
    CONTEXT = ["postcode", "post", "code", "postal", "address", "london", "uk"]

    def __init__(self, supported_language: str = "en", supported_entity: str = "POSTCODE"):
        super().__init__(supported_entity=supported_entity, name="UkPostcodeRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=CASE)


# ---------------------------------------------------------------------------------------
# reference, order and tracking numbers

class ReferenceNumberRecognizer(PatternRecognizer):
    """Alphanumeric identifiers: order, tracking, reference, booking, ticket, account and
    customer numbers (``3J3Q5WPTK1``, ``170-69903-9354``, ``REF-20931``, ``#448812``).

    Upper-case letter+digit codes of 6 or more characters score 0.4; digit groups,
    long digit runs and letter-only upper-case codes score low and need context words
    (``order``, ``tracking``, ``reference``, ``id``…) to pass a redaction threshold."""

    PATTERNS = [
        Pattern("code (letters and digits)",
                r"(?<![\w-])(?=[A-Z0-9-]*\d)(?=[A-Z0-9-]*[A-Z])[A-Z0-9]{2,}(?:-[A-Z0-9]{2,}){0,4}(?![\w-])", 0.4),
        Pattern("hash number", r"(?<=#[ \t]?)\d{3,20}(?![\w])", 0.4),
        Pattern("after an identifier cue",
                r"(?<=\b(?i:id|identifier|reference|ref|ticket|account|acct|order|tracking|confirmation|invoice|"
                r"booking|case|customer|member|membership|policy|claim|serial|passport|licen[cs]e)"
                r"(?:[ \t]+(?i:number|no\.?|#|code))?(?:[ \t]*(?::|=|is|was|-)[ \t]*|[ \t]+))"
                r"(?=[A-Z0-9-]*\d)[A-Z0-9]{2,}(?:-[A-Z0-9]{2,}){0,4}(?![\w-])", 0.6),
        Pattern("digit groups", r"(?<![\w.,/+-])\d{2,8}(?:-\d{2,8}){1,4}(?![\w]|[.,/-]\d)", 0.15),
        Pattern("US federal case number", r"(?<![\w:/-])\d:\d{2}-(?i:cv|cr|mc|mj|bk|ap)-\d{3,6}(?:-[A-Z]{2,4})?(?![\w-])",
                0.6),
        Pattern("case reference with a year", r"(?<![\w/-])[A-Z]{1,4}\d?/(?:19|20)\d\d/\d{2,6}(?![\w/-])", 0.5),
        Pattern("digit run", r"(?<![\w.,/+-])\d{5,20}(?![\w]|[.,/-]\d)", 0.1),
        Pattern("letter code", r"(?<![\w-])[A-Z0-9]{8,20}(?![\w-])", 0.05),
    ]
    CONTEXT = ["order", "tracking", "track", "reference", "ref", "confirmation", "invoice", "booking", "ticket",
               "case", "account", "acct", "customer", "membership", "member", "policy", "claim", "id",
               "identifier", "serial", "number", "no", "pin", "passcode", "voucher", "shipment",
               "parcel", "package", "transaction", "receipt", "reservation"]
    _TOO_SHORT = 6

    def __init__(self, supported_language: str = "en", supported_entity: str = "REFERENCE_NUMBER"):
        super().__init__(supported_entity=supported_entity, name="ReferenceNumberRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=CASE)

    _PERIOD = re.compile(r"^(?:FY|CY|Q[1-4]|H[12])[ -]?(?:\d{2}|\d{4})(?:[-/](?:\d{2}|\d{4}))?$|^Q[1-4]$")

    def invalidate_result(self, pattern_text: str) -> bool:
        compact = pattern_text.replace("-", "")
        if self._PERIOD.match(pattern_text):
            return True  # a fiscal period: "FY2024", "Q3-24"
        if compact.isalpha():
            from privatize.redaction.filters import zipf

            if zipf(compact) >= 2.0:
                return True  # an upper-case word: "AGREEMENT", "MEMORANDUM"
        if len(compact) < self._TOO_SHORT and not pattern_text.isdigit() and "/" not in pattern_text:
            return True
        if len(pattern_text) <= 3:
            return True
        return len(set(compact)) == 1


# ---------------------------------------------------------------------------------------
# ages

class AgeRecognizer(PatternRecognizer):
    """Ages: ``42 years old``, ``a 42-year-old``, ``aged 42``, ``age: 42``, ``42 y/o``."""

    PATTERNS = [
        Pattern("n years old", r"(?<![\w.,-])(?:1[0-4]\d|\d{1,2})(?=[ \t-]*(?:years?|yrs?)[ \t-]*(?:old|of age)\b)", 0.6),
        Pattern("n-year-old", r"(?<![\w.,-])(?:1[0-4]\d|\d{1,2})(?=[ \t-]*years?[ \t-]old\b)", 0.6),
        Pattern("aged n", r"(?<=\b(?:aged|age|age:|age of|turned|turning|turns)[ \t]{1,3})(?:1[0-4]\d|\d{1,2})(?![\w]|[.,]\d)", 0.6),
        Pattern("n y/o", r"(?<![\w.,-])(?:1[0-4]\d|\d{1,2})(?=[ \t]?(?:y/?o|yo)\b)", 0.5),
        Pattern("name (n)", r"(?<=(?-i:\p{Lu}[\p{Ll}'’-]+)[ \t]?\()(?:1[0-4]\d|[1-9]\d?)(?=\))", 0.4),
        Pattern("was n when", r"(?<=\b(?:was|were|is|am|being)[ \t]+(?:therefore[ \t]+|then[ \t]+|only[ \t]+|just[ \t]+)?)"
                              r"(?:1[0-4]\d|\d{1,2})(?=[ \t]+(?:when|at the time)\b)", 0.4),
    ]
    CONTEXT = ["age", "aged", "old", "years", "birthday", "turned", "turning"]

    def __init__(self, supported_language: str = "en", supported_entity: str = "AGE"):
        super().__init__(supported_entity=supported_entity, name="AgeRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=NOCASE)



# ---------------------------------------------------------------------------------------
# organisations and parties

_ORG_SUFFIX = (r"(?:Inc\.?|LLC|L\.L\.C\.|Ltd\.?|Limited|PLC|plc|Corp\.?|Corporation|Co\.|GmbH|AG|S\.A\.|LLP|"
               r"Group|Holdings|Partners|Associates|Solicitors|Pharmacy|Apothecary|Drugs?|Hospital|Clinic|"
               r"Medical Cent(?:er|re)|Health Cent(?:er|re)|University|College|Academy|Foundation|Bank)")


class OrganizationSuffixRecognizer(PatternRecognizer):
    """Organisations named with a legal-form or institution suffix: ``Presbia PLC``,
    ``Wellpoint Health Networks Inc``, ``Crandall Pharmacy``, ``North Kingstown General
    Hospital``: one to five capitalised words before the suffix (case-sensitive)."""

    PATTERNS = [
        Pattern("name + suffix", rf"(?<![\w&'’.-])(?!(?:The|A|An|This|That|Our|Your|My|Their|His|Her|Its)\b)"
                                 rf"(?:\p{{Lu}}[\w&'’.-]*[ \t]+){{1,5}}{_ORG_SUFFIX}(?![\w])", 0.5),
    ]
    CONTEXT = ["company", "employer", "works", "work", "firm", "supplier", "client", "admitted", "pharmacy"]

    def __init__(self, supported_language: str = "en", supported_entity: str = "ORGANIZATION"):
        super().__init__(supported_entity=supported_entity, name="OrganizationSuffixRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=CASE)


_ROLES = (r"(?:Plaintiffs?|Defendants?|Petitioners?|Respondents?|Appellants?|Appellees?|Claimants?|Applicants?|"
          r"Tenants?|Landlords?|Employers?|Employees?|Buyers?|Sellers?|Lenders?|Borrowers?|Licensors?|Licensees?|"
          r"Suppliers?|Customers?|Consultants?)")


class PartyRecognizer(PatternRecognizer):
    """The parties of a case or a contract, by their role: a court caption line
    (``EMILIO CRUZ, Plaintiff,``; ``BODEGA CLUB, Defendant.``) or a labelled line
    (``Respondent: Plan Smart``, ``The Tenant: Elease Carpenter``). The span is the
    party's name, without a title."""

    PATTERNS = [
        Pattern("caption", rf"(?m)(?:^|(?<=\n))[ \t]*\K(?!(?:The|THE|and|AND|v|V)\b)[^\W\d_][^\n,:;]{{1,60}}?"
                           rf"(?=,[ \t]*{_ROLES}[ \t]*[,.]?[ \t]*(?:\n|$))", 0.5),
        Pattern("labelled line", rf"(?<=(?m:^)[ \t]*(?:The[ \t]+)?{_ROLES}[ \t]*:[ \t]*"
                                 rf"(?:(?:Mr|Mrs|Ms|Miss|Dr|Mx)\.?[ \t]+)?)(?!(?:Mr|Mrs|Ms|Miss|Dr|Mx)\.?[ \t])[^\W\d_][^\n,;]{{1,60}}?(?=[ \t]*(?:\n|$|,|;))",
                0.5),
    ]
    CONTEXT = ["between", "parties", "party", "v", "versus"]

    def __init__(self, supported_language: str = "en", supported_entity: str = "PERSON"):
        super().__init__(supported_entity=supported_entity, name="PartyRecognizer",
                         patterns=list(self.PATTERNS), context=list(self.CONTEXT),
                         supported_language=supported_language, global_regex_flags=CASE)


from privatize.redaction.dates import ValidatedDateRecognizer  # noqa: E402
from privatize.redaction.names import NameLineRecognizer, OccupationRecognizer, TitledNameRecognizer  # noqa: E402


def better_recognizers() -> list[PatternRecognizer]:
    """New instances of every recognizer in this module."""
    return [InternationalPhoneRecognizer(), LuhnCreditCardRecognizer(), BlockIbanRecognizer(),
            StreetAddressRecognizer(), UsZipCodeRecognizer(), UkPostcodeRecognizer(), ReferenceNumberRecognizer(),
            AgeRecognizer(), TitledNameRecognizer(), NameLineRecognizer(), OccupationRecognizer(), ValidatedDateRecognizer(),
            OrganizationSuffixRecognizer(), PartyRecognizer()]
