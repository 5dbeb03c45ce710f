"""Document styles: what a text is decides which filters and rules the detector uses.

Real text comes in styles that break each other's rules. In ICU nursing notes written
in capitals (``PT TRANSFERRED TO CCU. LASIX 20 MG GIVEN``) the re-cased NER pass that
finds names in caseless chat turns drug names and abbreviations into people; in court
judgments the Government, the Court of Cassation and the applicant's nationality are
named entities that the judgments' own anonymisation rules leave in; in tokenised,
lower-case booking dialogues venue names have no capital letter for NER to see.

A style is one module here: a :class:`DocumentStyle` subclass registered with
:func:`register_style`. It says how strongly a text looks like its style
(:meth:`DocumentStyle.evidence`), whether the re-cased NER pass runs, which pi
candidates it drops (:meth:`DocumentStyle.drop`, returning the reason) and which spans
its own rules add (:meth:`DocumentStyle.extra`). ``general`` is the detector as it
was before styles: no rule added or removed.

``auto`` (the redact stage's default) picks, per document, the style with the strongest
evidence above its threshold, else ``general``; a spec can force one. The stage counts
documents per style in its statistics (``styles.<name>``).
"""

from __future__ import annotations

import functools
from typing import Callable

import regex as re

from privatize.redaction.spans import Span

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

    trim_articles: bool = False
    """Whether name spans (people, places, organisations) lose a leading article
    (``the Acorn Guest House`` -> ``Acorn Guest House``): it names nothing."""

    def propagate_key(self, piece: str) -> str | None:
        """For case-insensitive propagation: the key a detected string is looked up by
        (``None``: propagation stays case-sensitive)."""
        return None


_REGISTRY: dict[str, DocumentStyle] = {GENERAL: DocumentStyle()}


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


def register_style(cls: type[DocumentStyle]) -> type[DocumentStyle]:
    """Class decorator: make a style available by its ``name``."""
    if cls.name in _REGISTRY or cls.name == AUTO:
        raise ValueError(f"style {cls.name!r} is already registered")
    _REGISTRY[cls.name] = cls()
    return cls


def _load() -> None:
    from privatize.redaction.styles import chat, clinical, legal  # noqa: F401 - they register themselves


@functools.lru_cache(maxsize=1)
def styles() -> dict[str, DocumentStyle]:
    """Every registered style by name (``general`` included)."""
    _load()
    return dict(_REGISTRY)


def style_names() -> tuple[str, ...]:
    """``auto`` and every registered style."""
    return (AUTO, *sorted(styles()))


def get_style(name: str) -> DocumentStyle:
    try:
        return styles()[name]
    except KeyError:
        raise ValueError(f"unknown style {name!r}; choose from {', '.join(style_names())}") from None


def detect_style(text: str) -> str:
    """The style of ``text`` under ``auto``: the registered style whose evidence is
    strongest relative to its threshold, when it reaches it; else ``general``."""
    sample = text[:SAMPLE_CHARS]
    words = [w.lower() for w in _WORDS.findall(sample)]
    if len(words) < 8:
        return GENERAL
    best, best_ratio = GENERAL, 1.0
    for name, st in styles().items():
        if name == GENERAL:
            continue
        ratio = st.evidence(sample, words) / st.threshold
        if ratio >= best_ratio:
            best, best_ratio = name, ratio
    return best


def style_picker(name: str) -> Callable[[str], str]:
    """A function text -> style name for a configured ``style`` (``auto`` or a name)."""
    if name == AUTO:
        return detect_style
    get_style(name)
    return lambda _text: name
