"""The style contract (:class:`DocumentStyle`) and its registry; see :mod:`privatize.redaction.styles`.
Style modules import this, and the package imports them, so nothing imports back."""

from __future__ import annotations


import regex as re

from privatize.redaction.spans import Span
from privatize.registry import Registry

AUTO = "auto"
GENERAL = "general"
SAMPLE_CHARS = 6_000
"""Auto detection reads at most this many characters from the start of a text."""

_WORDS = re.compile(r"[^\W_][\w'’/]*")


class DocumentStyle:
    """One style's rules. Subclasses set ``name`` and override what they change."""

    name: str = GENERAL
    recase: bool = True
    """Whether caseless sentences go through NER a second time, re-cased."""
    threshold: float = 1.0
    """:meth:`evidence` at or above this picks the style under ``auto``."""

    def evidence(self, text: str, words: list[str]) -> float:
        """How strongly ``text`` (its first :data:`SAMPLE_CHARS`; ``words`` its
        lower-case words) looks like this style, on the scale of :attr:`threshold`."""
        return 0.0

    def drop(self, text: str, span: Span) -> str | None:
        """Why a pi candidate is not PII in this style (``None`` keeps it)."""
        return None

    def extra(self, text: str) -> list[Span]:
        """Spans this style's own rules find (pi candidates)."""
        return []

    def complete(self, text: str, spans: list[Span]) -> list[Span]:
        """Spans this style infers from pi's own (``spans``: merged, sorted), such as the
        other members of a list whose members pi found; added before propagation."""
        return []

    trim_articles: bool = False
    """Whether name spans (people, places, organisations) lose a leading article
    (``the Acorn Guest House`` -> ``Acorn Guest House``): it names nothing."""

    trim_place_heads: bool = False
    """Whether place and organisation spans lose a generic head word at their end
    (``Harford Memorial Hospital`` -> ``Harford Memorial``, ``U of MD Med Center`` -> ``U of
    MD``): the word says what kind of place, not which; the clinical convention marks the
    name without it."""

    trim_titles: bool = False
    """Whether person spans lose a leading title (``Mr. Lomish`` -> ``Lomish``), as the
    style's annotation convention has it: clinical de-identification (i2b2, PhysioNet)
    marks the name without its title; judgments (TAB) mark them together. An adapted
    detector's folder says the same for its own sample."""

    def propagate_key(self, piece: str) -> str | None:
        """For case-insensitive propagation: the key a detected string is looked up by
        (``None``: propagation stays case-sensitive)."""
        return None


STYLES: Registry[DocumentStyle] = Registry("style", packages=("privatize.redaction.styles",),
                                           group="privatize.styles", reserved=(AUTO,))
"""Every style by name: ``general`` (the detector with no rule added or removed) and one
module of this package per other style (a plugin: its entry point's module)."""
STYLES.add(GENERAL, DocumentStyle(), DocumentStyle)


_ARTICLE = re.compile(r"(?i)(?:the|a|an)[ \t]+")
_NAME_SPAN_TYPES = frozenset({"PERSON", "LOCATION", "ORGANIZATION", "NRP"})


def trim_article(text: str, span: Span) -> Span:
    """``span`` without a leading article when it is a name span and more follows."""
    s, e, etype, sc, src, ctx = span
    if etype in _NAME_SPAN_TYPES:
        m = _ARTICLE.match(text, s, e)
        if m and m.end() < e:
            return (m.end(), e, etype, sc, src, ctx)
    return span


_PLACE_HEAD = re.compile(r"(?i)[ \t]+(?:hospital|hosp|clinic|(?:medical|med)(?:[ \t]+(?:center|centre|ctr))?|"
                         r"center|centre|ctr)\.?$")


def trim_place_head(text: str, span: Span) -> Span:
    """``span`` without generic head words at its end (``hospital``, ``medical center``) when
    a word of the name is left."""
    s, e, etype, sc, src, ctx = span
    if etype not in ("LOCATION", "ORGANIZATION"):
        return span
    end = e
    while (m := _PLACE_HEAD.search(text, s, end)) and any(c.isalnum() for c in text[s:m.start()]):
        end = m.start()
    return span if end == e else (s, end, etype, sc, src, ctx)


def register_style(cls: type[DocumentStyle]) -> type[DocumentStyle]:
    """Class decorator: make a style available by its ``name``."""
    STYLES.add(cls.name, cls(), cls)
    return cls


