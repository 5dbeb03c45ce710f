"""Presidio's pattern recognizers compiled for the detector's fast path (the same spans as
Presidio's ``analyze`` for them, measured by the tests), and the span helpers the detector
uses around them: context words, line parts, caseless regions."""

from __future__ import annotations

from typing import Iterable

import regex as re

from privatize.redaction.engine import patch_tldextract

CONTEXT_PREFIX_WORDS = 6
CONTEXT_SUFFIX_WORDS = 2
CASELESS_LABELS = frozenset({"PERSON", "GPE", "LOC", "FAC", "NORP"})  # re-cased NER: ORG is mostly noise there


# recognizers

def default_pattern_recognizers() -> list:
    """Presidio's predefined pattern recognizers for English (as its default registry
    loads them, minus the phone, card and IBAN recognizers, which ours supersede) plus the
    recognizers of :mod:`privatize.redaction.recognizers`."""
    patch_tldextract()
    import tldextract

    tldextract.extract("example.com")  # load the bundled suffix list now, not inside the first batch
    from presidio_analyzer.predefined_recognizers import (
        CryptoRecognizer, EmailRecognizer, IpRecognizer, MacAddressRecognizer,
        MedicalLicenseRecognizer, NhsRecognizer, UrlRecognizer, UsBankRecognizer, UsItinRecognizer,
        UsLicenseRecognizer, UsPassportRecognizer, UsSsnRecognizer, UuidRecognizer)

    from privatize.redaction.recognizers import better_recognizers

    presidio = [CryptoRecognizer(), EmailRecognizer(), IpRecognizer(),
                MacAddressRecognizer(), MedicalLicenseRecognizer(), NhsRecognizer(), UrlRecognizer(),
                UsBankRecognizer(), UsItinRecognizer(), UsLicenseRecognizer(), UsPassportRecognizer(),
                UsSsnRecognizer(), UuidRecognizer()]
    return presidio + better_recognizers()


_WORD_RE = re.compile(r"[^\W_]+")


def context_words(words: Iterable[str]) -> frozenset[str]:
    out = set()
    for w in words:
        for part in w.lower().split():
            out.add(part.strip())
    return frozenset(x for x in out if x)


# every pattern of the recognizers for these types needs a decimal digit
_DIGIT_ENTITIES = frozenset({"PHONE_NUMBER", "CREDIT_CARD", "US_SSN", "US_ITIN", "US_BANK_NUMBER", "ZIP_CODE", "AGE",
                             "DATE_TIME", "STREET_ADDRESS"})


class CompiledRecognizer:
    """One Presidio PatternRecognizer, its patterns compiled with its own flags."""

    __slots__ = ("rec", "entity", "name", "patterns", "context", "has_validate", "has_invalidate", "needs_digit",
                 "needs", "min_newlines", "finder")

    def __init__(self, rec):
        from presidio_analyzer import PatternRecognizer

        self.rec = rec
        self.entity = rec.supported_entities[0]
        self.name = rec.name
        flags = rec.global_regex_flags if rec.global_regex_flags is not None else 0
        self.patterns = [(re.compile(p.regex, flags), p.score, p.name) for p in rec.patterns]
        self.context = context_words(rec.context or ())
        self.has_validate = type(rec).validate_result is not PatternRecognizer.validate_result
        self.has_invalidate = type(rec).invalidate_result is not PatternRecognizer.invalidate_result
        # every pattern of these recognizers needs a digit / an '@' / a '.' somewhere: skip texts without
        self.needs = {"EMAIL_ADDRESS": "@", "URL": "."}.get(self.entity)
        self.needs_digit = self.entity in _DIGIT_ENTITIES
        self.min_newlines = int(getattr(rec, "min_newlines", 0))
        self.finder = getattr(rec, "find_candidates", None)

    def run(self, text: str) -> list[tuple[int, int, str, float, str]]:
        out: list[tuple[int, int, str, float, str]] = []
        rec = self.rec
        if self.finder is not None:  # a recognizer with a faster equivalent of its patterns
            return [(s, e, self.entity, sc, self.name) for s, e, sc, _ in self.finder(text) if sc > 0]
        for rx, base, _pname in self.patterns:
            for m in rx.finditer(text):
                s, e = m.span()
                if s == e:
                    continue
                piece = text[s:e]
                score = base
                if self.has_validate:
                    v = rec.validate_result(piece)
                    if v is True:
                        score = 1.0
                    elif v is False:
                        continue
                if self.has_invalidate and rec.invalidate_result(piece):
                    continue
                if score <= 0:
                    continue
                out.append((s, e, self.entity, score, self.name))
        return out


def has_context(text: str, s: int, e: int, words: frozenset[str]) -> bool:
    if not words:
        return False
    before = _WORD_RE.findall(text[max(0, s - 80):s])[-CONTEXT_PREFIX_WORDS:]
    after = _WORD_RE.findall(text[e:e + 40])[:CONTEXT_SUFFIX_WORDS]
    for w in before + after:
        w = w.lower()
        if w in words or (w.endswith("s") and w[:-1] in words):
            return True
    return False


def line_parts(text: str, s: int, e: int) -> list[tuple[int, int]]:
    """The non-empty lines of ``text[s:e]`` as (start, end), trimmed of spaces and
    punctuation at their ends."""
    out, pos = [], s
    for line in text[s:e].split("\n"):
        a, b = pos, pos + len(line)
        pos = b + 1
        while a < b and text[a] in " \t>*-|,;:":
            a += 1
        while b > a and text[b - 1] in " \t,;:-":
            b -= 1
        if b > a:
            out.append((a, b))
    return out


def split_caseless(ents: list[tuple[int, int, str]], regions: list[tuple[int, int]]):
    """NER entities of a text whose caseless regions were re-cased: (entities outside
    the regions, entities inside them). Inside, only :data:`CASELESS_LABELS` and labels
    that do not depend on case (dates, numbers) are kept: re-cased text makes every word
    look like an organisation's name."""
    outside, inside = [], []
    for s, e, lab in ents:
        if any(a <= s < b for a, b in regions):
            if lab in CASELESS_LABELS:
                inside.append((s, e, lab))
            elif lab not in ("ORG", "PRODUCT", "WORK_OF_ART", "LAW", "EVENT"):
                outside.append((s, e, lab))
        else:
            outside.append((s, e, lab))
    return outside, inside
