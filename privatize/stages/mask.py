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
The word techniques scan a whole batch at once (``WordScan``: code points, hashes and
byte buffers in numpy, 4-5x the per-word loop); texts holding reserved tokens take the
per-word loop (``Mask._ranges_one``), which is also the reference the tests hold the
scan to.
Statistics: ``words`` (words seen), ``words_masked`` and ``masks`` (mask tokens
written); the manifest's ``words_masked / words`` is the masked share paper 002's
Table 2 reports (1.3-30.4%). A record with no text is quarantined.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from privatize.ciphers.tokens import MASK_TOKEN, reserved_spans
from privatize.policy import ModelName, ServerPath
from privatize.settings import Before, StageSettings
from privatize.stage import QUARANTINE, Stage, register_stage, set_column
from privatize.text.words import (INNER, JOINS, WORD_CHAR, HashSet, char_classes, code_points, lower_in_place, runs,
                                  token_hashes)

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
    word_list: Annotated[str | None, ServerPath()] = None
    """A word list file (one word per line, most frequent first for ``vocab_threshold``)
    instead of wordfreq's English list."""
    allow_list_size: int = Field(5_000, ge=1, le=1_000_000)
    vocab_size: int = Field(10_000, ge=1, le=1_000_000)
    model: Annotated[str | None, ModelName()] = None
    """``entity_tagger``: the redaction detector's spaCy model (default: redact's); as redact's
    ``model`` (through the service: a name or ``detector:<id>``)."""
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


_RESERVED_START, _ENTITY_OPEN = re.compile(r"<[A-Z]"), re.compile(r"_\[")
"""Where a reserved token may be (a tag, an entity token): two literal-prefix patterns,
each a fast scan, instead of ``RESERVED_RE`` over the whole batch."""


class WordScan:
    """The word scan and look-ups of ``allow_list`` and ``vocab_threshold`` for a whole
    batch, vectorised: the same ranges and counts as the per-word loop
    (``Mask._ranges_one``), which stays the path for texts with reserved tokens and the
    reference the tests compare this with.

    The batch is one array of code points (texts joined by newlines, lower case where
    lower() keeps the length, as the loop does). Every word of ``WORD`` lies inside one run
    of word characters, apostrophes and hyphens (a token). A token of word characters
    only is one word, known when its hash is among the known words' hashes (64-bit hashes:
    two different words of natural text collide with probability about 2**-64 per pair; a
    token longer than the longest known word is unknown outright); a token with an
    apostrophe or a hyphen (``don't``, ``well-known``, ``'s``, ``--``) goes through the
    word pattern and ``_known`` once per distinct token, in Python."""

    def __init__(self, known: frozenset[str]):
        self.known = known
        self.classes = char_classes()
        simple = sorted(w for w in known if w.isalnum())
        cps = code_points("\n".join(simple))
        starts, ends = runs((self.classes[cps] & WORD_CHAR) > 0)
        self.hashes = HashSet(token_hashes(cps, starts, ends))
        self.longest = max((len(w) for w in simple), default=0)
        self._plans: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {}

    def _plan(self, token: str) -> tuple[int, tuple[tuple[int, int], ...]]:
        """Words in a token with an apostrophe or a hyphen, and the unknown ones' ranges."""
        plan = self._plans.get(token)
        if plan is None:
            words = [m.span() for m in WORD.finditer(token)]
            plan = (len(words), tuple((s, e) for s, e in words if not _known(token[s:e], self.known)))
            if len(self._plans) > 1_000_000:
                self._plans.clear()
            self._plans[token] = plan
        return plan

    def scan(self, texts: list[str]) -> dict:
        """Masked word ranges of ``texts``, merged: ``text`` (index), ``start``, ``end``
        (offsets in the batch string ``joined``), with words and masked words per text.
        ``declined`` lists the texts holding a reserved token (``<MASK>``, a tag, an entity
        token), which the per-word path handles; their figures here are zero."""
        joined = "\n".join(texts)
        low = joined.lower()
        if len(low) != len(joined):  # lower() changed a length somewhere: per text, as the loop
            low = "\n".join(lower_in_place(t) for t in texts)
        cps = code_points(low)
        bounds = np.zeros(len(texts) + 1, np.int64)
        np.cumsum([len(t) + 1 for t in texts], out=bounds[1:])
        cls = self.classes[cps]
        token = (cls & (WORD_CHAR | INNER)) > 0
        # a reserved token starts with "<" and a capital letter or holds "_[": those texts
        # (found by the regex, on candidates only) are left to the per-word path
        cand = [m.start() for m in _RESERVED_START.finditer(joined)]
        cand += [m.start() for m in _ENTITY_OPEN.finditer(joined)]
        declined = sorted({int(i) for i in np.unique(np.searchsorted(bounds, cand, side="right") - 1)
                           if reserved_spans(texts[i])})
        for i in declined:
            token[bounds[i]:bounds[i + 1]] = False
        starts, ends = runs(token)
        odd = np.zeros(len(starts), bool)  # tokens with an inner character
        inner = np.flatnonzero(cls & INNER)
        odd[np.searchsorted(starts, inner[token[inner]], side="right") - 1] = True
        simple_s, simple_e = starts[~odd], ends[~odd]
        h = token_hashes(cps, simple_s, simple_e)
        # a token longer than every known word is unknown whatever its hash (long crafted
        # strings are where polynomial hashes modulo 2**64 collide)
        unknown = ~self.hashes.member(h) | ((simple_e - simple_s) > self.longest)
        words = np.diff(np.searchsorted(simple_s, bounds))
        ms, me = [simple_s[unknown]], [simple_e[unknown]]
        odd_s, odd_e = starts[odd].tolist(), ends[odd].tolist()
        if odd_s:
            extra_s, extra_e, odd_words = [], [], []
            for s, e in zip(odd_s, odd_e):
                n, masked = self._plan(low[s:e])
                odd_words.append(n)
                for a, b in masked:
                    extra_s.append(s + a)
                    extra_e.append(s + b)
            words += np.bincount(np.searchsorted(bounds, odd_s, side="right") - 1, weights=odd_words,
                                 minlength=len(texts)).astype(np.int64)
            ms.append(np.array(extra_s, np.int64))
            me.append(np.array(extra_e, np.int64))
            ms, me = np.concatenate(ms), np.concatenate(me)
            order = np.argsort(ms, kind="stable")
            ms, me = ms[order], me[order]
        else:
            ms, me = ms[0], me[0]
        per_text = np.searchsorted(ms, bounds)
        # merge neighbours of one text separated only by spaces, tabs or hyphens
        gaps = np.zeros(len(cls) + 1, np.int32)
        np.cumsum((cls & JOINS) == 0, dtype=np.int32, out=gaps[1:])
        first = np.ones(len(ms), bool)
        first[1:] = gaps[ms[1:]] != gaps[me[:-1]]
        first[per_text[:-1][per_text[:-1] < len(ms)]] = True
        last = np.ones(len(ms), bool)
        last[:-1] = first[1:]
        return {"joined": joined, "bounds": bounds, "start": ms[first], "end": me[last], "words": words,
                "masked_words": np.diff(per_text), "declined": declined}


@functools.lru_cache(maxsize=8)
def word_scan(word_list: str | None, size: int) -> WordScan:
    """One scan per word list and process: its tables and its cache of distinct tokens
    outlive a batch (on Ray a stage is unpickled per task)."""
    return WordScan(load_words(word_list, size))


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
    _scan: WordScan | None = None
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
            self._scan = word_scan(st.word_list, size)
            log.info("mask: %s with %d words (%s)", st.technique, len(self._words), st.word_list or "wordfreq en")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_detector", None)
        state.pop("_words", None)
        state.pop("_scan", None)
        return state

    def _ranges(self, texts: list[str]) -> list[tuple[list[tuple[int, int]], int, int]]:
        """Per text: ranges to mask, words seen, words masked (the per-word path)."""
        if self.settings.technique == "entity_tagger":
            out = []
            for text, det in zip(texts, self._detector.detect(texts)):
                words = word_spans(text)
                ranges = [(sp["start"], sp["end"]) for sp in det.spans]
                hit = sum(1 for s, e in words if any(a < e and s < b for a, b in ranges))
                out.append((ranges, len(words), hit))
            return out
        return [self._ranges_one(text) for text in texts]

    def _ranges_one(self, text: str) -> tuple[list[tuple[int, int]], int, int]:
        known = self._words
        if reserved_spans(text):
            words = word_spans(text)
            ranges = [(s, e) for s, e in words if not _known(text[s:e], known)]
            return ranges, len(words), len(ranges)
        # no reserved token: one pass over the lower-cased text
        low = lower_in_place(text)
        n, ranges = 0, []
        for m in WORD.finditer(low):
            n += 1
            w = m.group()
            # already lower case: only a hyphen or a curly apostrophe needs _known
            if w not in known and not (("-" in w or "’" in w) and _known(w, known)):
                ranges.append(m.span())
        return ranges, n, len(ranges)

    def process_batch(self, batch: pa.Table) -> pa.Table:
        if self._words is None and self._detector is None:
            self.setup()
        texts = batch["text"].to_pylist()
        n = len(texts)
        live = [i for i, t in enumerate(texts) if isinstance(t, str)]
        parts: list[tuple[list[int], dict]] = []  # (rows, their columns)
        rest = live
        if self._scan is not None and live:
            # the word techniques: the vectorised scan, the whole batch at once, but for
            # texts with reserved tokens
            found = self._scan.scan([texts[i] for i in live])
            declined = set(found["declined"])
            parts.append(([i for j, i in enumerate(live) if j not in declined], _scan_columns(found, declined)))
            rest = [live[j] for j in sorted(declined)]
        if rest:
            cols: dict[str, list] = {k: [] for k in ("text", "spans", "originals", "words", "masked", "masks")}
            for i, (ranges, words, masked) in zip(rest, self._ranges([texts[i] for i in rest])):
                new, merged = mask_text(texts[i], ranges)
                cols["text"].append(new)
                cols["spans"].append([{"start": s, "end": e} for s, e in merged])
                cols["originals"].append(_originals(texts[i], new, merged))
                cols["words"].append(words)
                cols["masked"].append(masked)
                cols["masks"].append(len(merged))
            parts.append((rest, {"text": pa.array(cols["text"], pa.string()),
                                 "spans": pa.array(cols["spans"], SPANS_TYPE),
                                 "originals": pa.array(cols["originals"], pa.list_(pa.string())),
                                 **{k: pa.array(cols[k], pa.int64()) for k in ("words", "masked", "masks")}}))
        dead = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if dead:
            nulls = {"text": pa.nulls(len(dead), pa.string()), "spans": pa.nulls(len(dead), SPANS_TYPE),
                     "originals": pa.nulls(len(dead), pa.list_(pa.string())),
                     **{k: pa.array([0] * len(dead), pa.int64()) for k in ("words", "masked", "masks")}}
            parts.append((dead, nulls))
        rows = [i for r, _ in parts for i in r]
        order = None if rows == list(range(n)) else pa.array(np.argsort(rows), pa.int64())

        def column(name: str) -> pa.Array:
            arr = pa.concat_arrays([c[name] for _, c in parts]) if len(parts) != 1 else parts[0][1][name]
            return arr if order is None else arr.take(order)

        spans = column("spans")
        batch = set_column(batch, "text", column("text"))
        batch = set_column(batch, "mask_spans", spans)
        batch = set_column(batch, "mask_hit", pc.greater(pc.list_value_length(spans), 0))
        batch = set_column(batch, ORIGINALS, column("originals"))
        if dead:
            reasons = [None if isinstance(t, str) else NO_TEXT for t in texts]
            batch = set_column(batch, QUARANTINE, pa.array(reasons, pa.string()))
        for name, key in (("words", "words"), ("words_masked", "masked"), ("masks", "masks")):
            batch = set_column(batch, f"_stat.{name}", column(key))
        return batch


def _gather(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of the ranges ``[starts, ends)`` of ``buf``, one after another, and their
    offsets."""
    lengths = ends - starts
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(offsets[-1], dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    return buf[index], offsets


def _scan_columns(found: dict, skip: set[int]) -> dict[str, pa.Array]:
    """The columns of a batch scan's rows (but ``skip``), built on byte buffers: each
    merged range is cut out of the joined texts' UTF-8 once and ``<MASK>`` put in its
    place, with no Python string per word."""
    joined, bounds = found["joined"], found["bounds"]
    ms, me = found["start"], found["end"]
    raw = joined.encode("utf-8")
    if len(raw) == len(joined):
        byte = (lambda x: x)  # noqa: E731
    else:  # UTF-8 offsets: a code point's offset plus the extra bytes of the wide ones before it
        cps = code_points(joined)
        wide = np.flatnonzero(cps >= 0x80)
        extra = np.zeros(len(wide) + 1, np.int64)
        np.cumsum(1 + (cps[wide] >= 0x800) + (cps[wide] >= 0x10000), out=extra[1:])
        byte = (lambda x: x + extra[np.searchsorted(wide, x)])  # noqa: E731
    bs, be = byte(ms), byte(me)
    text_s, text_e = byte(bounds[:-1]), byte(bounds[1:] - 1)
    size = len(raw)
    buf = np.frombuffer(raw + MASK_TOKEN.encode(), np.uint8)
    # each text is its kept pieces with a <MASK> between two: from its start to its first
    # range, between ranges, from its last range to its end (the newlines between texts
    # fall out); piece m of the whole is followed by range j's <MASK> when m = j + text(j)
    per_text = np.searchsorted(ms, bounds)
    n_ranges, n_texts = len(bs), len(text_s)
    owner = np.searchsorted(bounds, ms, side="right") - 1
    pieces = n_ranges + n_texts
    starts, ends = np.empty(pieces + n_ranges, np.int64), np.empty(pieces + n_ranges, np.int64)
    at_mask = 2 * np.arange(n_ranges) + owner + 1
    kept = np.ones(pieces + n_ranges, bool)
    kept[at_mask] = False
    starts[kept], ends[kept] = np.sort(np.concatenate((text_s, be))), np.sort(np.concatenate((bs, text_e)))
    starts[at_mask], ends[at_mask] = size, size + len(MASK_TOKEN)
    out, offsets = _gather(buf, starts, ends)
    first = 2 * per_text[:-1] + np.arange(n_texts)  # each text's first piece
    row_offsets = offsets[np.concatenate((first, [len(starts)]))]
    rows = np.array([j for j in range(n_texts) if j not in skip], np.int64)
    if len(rows) < n_texts:  # cut the skipped rows out
        out, row_offsets = _gather(out, row_offsets[rows], row_offsets[rows + 1])
    text = pa.StringArray.from_buffers(len(rows), pa.py_buffer(row_offsets.astype(np.int32)), pa.py_buffer(out))
    # the ranges of the rows kept (a skipped row has none)
    list_offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(per_text[rows + 1] - per_text[rows], out=list_offsets[1:])
    offsets_arr = pa.array(list_offsets, pa.int32())
    spans = pa.StructArray.from_arrays([pa.array(ms - bounds[owner], pa.int64()), pa.array(me - bounds[owner],
                                                                                           pa.int64())],
                                       names=["start", "end"])
    words, word_offsets = _gather(buf, bs, be)
    originals = pa.StringArray.from_buffers(len(bs), pa.py_buffer(word_offsets.astype(np.int32)),
                                            pa.py_buffer(words))
    return {"text": text,
            "spans": pa.ListArray.from_arrays(offsets_arr, spans, type=SPANS_TYPE),
            "originals": pa.ListArray.from_arrays(offsets_arr, originals),
            "words": pa.array(found["words"][rows], pa.int64()),
            "masked": pa.array(found["masked_words"][rows], pa.int64()),
            "masks": pa.array(per_text[rows + 1] - per_text[rows], pa.int64())}
