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

from privatize.redaction.styles.base import (_WORDS, AUTO, GENERAL, SAMPLE_CHARS, STYLES, DocumentStyle,
                                            register_style, trim_article, trim_place_head)

__all__ = ["AUTO", "GENERAL", "DocumentStyle", "detect_style", "get_style", "register_style", "style_names",
           "style_picker", "styles", "trim_article", "trim_place_head"]


@functools.lru_cache(maxsize=1)
def styles() -> dict[str, DocumentStyle]:
    """Every registered style by name (``general`` included; the modules of this package
    register themselves, imported on the first call)."""
    return dict(STYLES.items())


def style_names() -> tuple[str, ...]:
    """``auto`` and every registered style."""
    return (AUTO, *sorted(styles()))


def get_style(name: str) -> DocumentStyle:
    """The style ``name`` (:class:`privatize.registry.UnknownName`, a ValueError, for none)."""
    return STYLES.get(name)


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
