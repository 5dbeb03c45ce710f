"""``mask``: hide rare and identifying words behind ``<MASK>`` (paper 002, SEEDS.md
section 4), for a later ``refill`` or for training with the mask as a token (Baseline0)
or with zero loss on it (Baseline1).

Techniques (``technique:``):

* ``allow_list``: mask every word that is not in a list of common words. The list is
  the file named by ``word_list`` (one word per line, ``#`` comments), or else the
  ``allow_list_size`` (5,000, the paper's size) most frequent English words of
  ``wordfreq``, a maintained frequency list with offline data, standing in for the
  paper's curated list.
* ``vocab_threshold``: mask every word outside the ``vocab_size`` (10,000, the paper's
  threshold) most frequent words of the general vocabulary (``wordfreq``'s English
  ranks, or ``word_list`` read as a ranked list).
* ``entity_tagger``: mask the entities the redaction detector finds (policy pi of the
  ``redact`` stage, with its ``model``, ``entities``, ``score_threshold`` and
  ``profile``).

A word is a run of letters and digits, with inner apostrophes and hyphens
(``don't``, ``well-known``); it is looked up in lower case, and a hyphenated word is
kept only when each of its parts is. Consecutive masked words (only spaces, tabs or
hyphens between them) merge into one ``<MASK>``; punctuation and line breaks separate
masks. Reserved tokens already in the text (``<MASK>`` from dedup, tags, entity tokens)
are left as they are and never masked again.

Columns added: ``mask_spans`` (``list<struct<start, end>>``, the masked character ranges
in the text as it was before this stage, one per ``<MASK>`` written) and ``mask_hit``
(anything masked: ``split_private`` routes on it as it routes on ``pi_hit``).
The masked words themselves travel to a later ``refill`` in the internal column
``_mask.originals`` (one entry per ``<MASK>`` in the new text, null for a mask that was
already there), so it can refuse to write a word back where it was; internal columns are
never written to shards or the quarantine.
Statistics: ``words`` (words seen), ``words_masked`` and ``masks`` (mask tokens
written); the manifest's ``words_masked / words`` is the masked share paper 002's
Table 2 reports (1.3-30.4%). A record with no text is quarantined.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from typing import Literal

import pyarrow as pa
from pydantic import Field, model_validator

from privatize.ciphers.tokens import MASK_TOKEN, reserved_spans
from privatize.settings import Before, StageSettings
from privatize.stage import QUARANTINE, Stage, register_stage, set_column

log = logging.getLogger(__name__)

NO_TEXT = "no text to mask"
WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*(?:-[^\W_]+(?:['’][^\W_]+)*)*")
"""A word: letters and digits, inner apostrophes and hyphens (the standard library's
``re``: its scan is 1.6x the ``regex`` module's here)."""
_JOIN = re.compile(r"[ \t-]*")
SPANS_TYPE = pa.list_(pa.struct([("start", pa.int64()), ("end", pa.int64())]))
ORIGINALS = "_mask.originals"


class MaskSettings(StageSettings):
    kind: Literal["mask"] = "mask"
    order_rules = (Before("encrypt_text", "mask after encrypt_text sees only ciphertext; put it before the cipher"),)
    technique: Literal["allow_list", "vocab_threshold", "entity_tagger"]
    word_list: str | None = None
    """A word list file (one word per line, most frequent first for ``vocab_threshold``)
    instead of wordfreq's English list."""
    allow_list_size: int = Field(5_000, ge=1, le=1_000_000)
    vocab_size: int = Field(10_000, ge=1, le=1_000_000)
    model: str | None = None
    """``entity_tagger``: the redaction detector's spaCy model (default: redact's)."""
    entities: list[str] | None = None
    score_threshold: float | None = Field(None, ge=0.0, le=1.0)
    profile: Literal["balanced", "high_recall"] = "balanced"

    @model_validator(mode="after")
    def _check(self) -> "MaskSettings":
        if self.technique == "entity_tagger" and self.word_list:
            raise ValueError("word_list is a setting of allow_list and vocab_threshold, not of entity_tagger")
        if self.technique != "entity_tagger" and (self.model or self.entities or self.score_threshold is not None):
            raise ValueError(f"model, entities and score_threshold are settings of entity_tagger, not of "
                             f"{self.technique}")
        if self.word_list and not os.path.isfile(self.word_list):
            raise ValueError(f"word_list {self.word_list!r} is not a file")
        return self


@functools.lru_cache(maxsize=8)
def load_words(word_list: str | None, size: int) -> frozenset[str]:
    """The first ``size`` words of ``word_list`` (a file) or of wordfreq's English list,
    lower case."""
    if word_list:
        words: list[str] = []
        with open(word_list, encoding="utf-8") as fh:
            for line in fh:
                w = line.split("#", 1)[0].strip().lower()
                if w:
                    words.append(w)
                if len(words) >= size:
                    break
        return frozenset(words)
    from wordfreq import top_n_list

    return frozenset(w.lower() for w in top_n_list("en", size))


def _known(word: str, words: frozenset[str]) -> bool:
    w = word.lower().replace("’", "'")
    if w in words:
        return True
    if "-" in w:
        return all(p in words for p in w.split("-") if p)
    return False


def mask_text(text: str, masked: list[tuple[int, int]]) -> tuple[str, list[tuple[int, int]]]:
    """``text`` with ``masked`` character ranges (sorted, non-overlapping) replaced by
    ``<MASK>``, ranges separated only by spaces, tabs or hyphens merged into one. Returns
    the new text and the merged ranges (offsets into ``text``)."""
    merged: list[list[int]] = []
    for s, e in masked:
        if merged and _JOIN.fullmatch(text, merged[-1][1], s):
            merged[-1][1] = e
        else:
            merged.append([s, e])
    out, pos = [], 0
    for s, e in merged:
        out.append(text[pos:s])
        out.append(MASK_TOKEN)
        pos = e
    out.append(text[pos:])
    return "".join(out), [(s, e) for s, e in merged]


def _originals(text: str, masked: str, merged: list[tuple[int, int]]) -> list[str | None]:
    """One entry per ``<MASK>`` in ``masked``: the words it hides (from ``text``), or None
    for a mask that was already in ``text``."""
    written, shift = {}, 0
    for s, e in merged:
        written[s - shift] = text[s:e]
        shift += (e - s) - len(MASK_TOKEN)
    out, pos = [], masked.find(MASK_TOKEN)
    while pos >= 0:
        out.append(written.get(pos))
        pos = masked.find(MASK_TOKEN, pos + len(MASK_TOKEN))
    return out


def word_spans(text: str) -> list[tuple[int, int]]:
    """Word ranges outside reserved tokens."""
    reserved = reserved_spans(text)
    if not reserved:
        return [m.span() for m in WORD.finditer(text)]
    return [(s, e) for s, e in (m.span() for m in WORD.finditer(text))
            if not any(a < e and s < b for a, b in reserved)]


@register_stage("mask", MaskSettings)
class Mask(Stage):
    _words: frozenset[str] | None = None
    _detector = None

    def __init__(self, settings: MaskSettings, **kw):
        super().__init__(settings, **kw)
        # the entity tagger loads spaCy: an actor pool on Ray; the word lists are cheap
        self.heavy_setup = settings.technique == "entity_tagger"

    def setup(self) -> None:
        st = self.settings
        if st.technique == "entity_tagger":
            from privatize.stages.redact import detector_like

            self._detector = detector_like(st)
        else:
            size = st.allow_list_size if st.technique == "allow_list" else st.vocab_size
            self._words = load_words(st.word_list, size)
            log.info("mask: %s with %d words (%s)", st.technique, len(self._words), st.word_list or "wordfreq en")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_detector", None)
        state.pop("_words", None)
        return state

    def _ranges(self, texts: list[str]) -> list[tuple[list[tuple[int, int]], int, int]]:
        """Per text: ranges to mask, words seen, words masked."""
        if self.settings.technique == "entity_tagger":
            out = []
            for text, det in zip(texts, self._detector.detect(texts)):
                words = word_spans(text)
                ranges = [(sp["start"], sp["end"]) for sp in det.spans]
                hit = sum(1 for s, e in words if any(a < e and s < b for a, b in ranges))
                out.append((ranges, len(words), hit))
            return out
        out = []
        known = self._words
        for text in texts:
            if reserved_spans(text):
                words = word_spans(text)
                ranges = [(s, e) for s, e in words if not _known(text[s:e], known)]
                out.append((ranges, len(words), len(ranges)))
                continue
            # the common case, no reserved token: one pass over the lower-cased text
            # (lower() keeps offsets for the scripts wordfreq covers; checked below)
            low = text.lower()
            if len(low) != len(text):
                low = text
            n, ranges = 0, []
            for m in WORD.finditer(low):
                n += 1
                w = m.group()
                # already lower case: only a hyphen or a curly apostrophe needs _known
                if w not in known and not (("-" in w or "’" in w) and _known(w, known)):
                    ranges.append(m.span())
            out.append((ranges, n, len(ranges)))
        return out

    def process_batch(self, batch: pa.Table) -> pa.Table:
        if self._words is None and self._detector is None:
            self.setup()
        texts = batch["text"].to_pylist()
        live = [i for i, t in enumerate(texts) if isinstance(t, str)]
        results = self._ranges([texts[i] for i in live])
        new_text, spans, hit = list(texts), [None] * len(texts), [None] * len(texts)
        originals = [None] * len(texts)
        n_words, n_masked, n_masks = [0] * len(texts), [0] * len(texts), [0] * len(texts)
        for i, (ranges, words, masked) in zip(live, results):
            new_text[i], merged = mask_text(texts[i], ranges)
            spans[i] = [{"start": s, "end": e} for s, e in merged]
            hit[i] = bool(merged)
            n_words[i], n_masked[i], n_masks[i] = words, masked, len(merged)
            originals[i] = _originals(texts[i], new_text[i], merged)
        batch = set_column(batch, "text", pa.array(new_text, pa.string()))
        batch = set_column(batch, "mask_spans", pa.array(spans, SPANS_TYPE))
        batch = set_column(batch, "mask_hit", pa.array(hit, pa.bool_()))
        batch = set_column(batch, ORIGINALS, pa.array(originals, pa.list_(pa.string())))
        if len(live) < len(texts):
            reasons = [None if isinstance(t, str) else NO_TEXT for t in texts]
            batch = set_column(batch, QUARANTINE, pa.array(reasons, pa.string()))
        for name, values in (("words", n_words), ("words_masked", n_masked), ("masks", n_masks)):
            batch = set_column(batch, f"_stat.{name}", pa.array(values, pa.int64()))
        return batch
