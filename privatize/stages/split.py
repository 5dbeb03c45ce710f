"""``split``: documents into segment records, the data points of CRT (paper 004, A.6).

Each segment becomes a record with ``doc_id = <parent>#<n>``, ``parent_id``, ``start``
and ``end`` (code-point offsets into the parent text; ``parent[start:end]`` is the
segment exactly) and ``_seg = n``. Whitespace between segments belongs to none.

Units:

* ``sentence`` (default): rule-based. A sentence ends at ``.``, ``!`` or ``?`` (plus
  closing quotes or brackets) followed by whitespace and a capital letter, digit, quote
  or bracket, unless the word before the period is a known abbreviation ("Mr.", "e.g.")
  or a single capital (an initial). A blank line always ends a sentence; a single
  newline does not (prose is often hard-wrapped).
* ``line``: every line is a segment (dialogue turns: ``SYS: ...`` / ``USR: ...``).
* ``paragraph``: text between blank lines.

A document with no non-blank segment is dropped (``_drop``: "empty after split").
"""

from __future__ import annotations

import re
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from privatize.settings import StageSettings
from privatize.stage import DROP, Stage, register_stage

ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st mt vs etc e.g i.e u.s u.k no vol fig inc ltd co corp jan feb mar apr jun jul aug sep
sept oct nov dec gen col lt sgt capt rev hon gov sen rep dept est approx
""".split())



def _abbreviation_guards() -> str:
    # after the period: one fixed-width negative lookbehind per abbreviation ("Mr." "e.g."
    # "U.S."), any case, and single capitals (initials: "J. R. R. Tolkien")
    guards = [rf"(?<!\b(?i:{re.escape(a)})\.)" for a in sorted(ABBREVIATIONS)]
    return "".join(guards) + r"(?<!\b[A-Z]\.)"


# A gap between sentences (group 1): whitespace after sentence punctuation (and closing
# quotes or brackets) before a capital, digit, quote or bracket; or a blank line (group 2).
# The pattern starts with a character class, so the engine skips ahead quickly; segments
# are the text between gaps, so the Python work is one tuple per sentence.
_SENT_GAP = re.compile(
    r"[.!?]" + _abbreviation_guards() + r"[.!?]*[\"')\]’”]*(\s+)(?=[\"'(\[‘“]?[A-Z0-9])"
    r"|([ \t]*\n[ \t]*\n\s*)")
_BLANK = re.compile(r"[ \t]*\n[ \t]*\n\s*")


class SplitSettings(StageSettings):
    kind: Literal["split"] = "split"
    unit: Literal["sentence", "line", "paragraph"] = "sentence"


def _between(text: str, gaps) -> list[tuple[int, int]]:
    """Segments between gap matches; only the first and last need stripping."""
    spans, prev = [], 0
    for m in gaps:
        a, b = m.span(m.lastindex or 0)
        if a > prev:
            spans.append((prev, a))
        prev = b
    if prev < len(text):
        spans.append((prev, len(text)))
    if spans:
        for i in (0, -1):
            a, b = spans[i]
            seg = text[a:b]
            lead = len(seg) - len(seg.lstrip())
            spans[i] = (a + lead, a + len(seg.rstrip()))
        spans = [(a, b) for a, b in spans if b > a]
    return spans


def _stripped(text: str, a: int, b: int, out: list[tuple[int, int]]) -> None:
    seg = text[a:b]
    s = seg.strip()
    if s:
        lead = len(seg) - len(seg.lstrip())
        out.append((a + lead, a + lead + len(s)))


def sentence_spans(text: str) -> list[tuple[int, int]]:
    return _between(text, _SENT_GAP.finditer(text))


def line_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = 0
    for line in text.split("\n"):
        _stripped(text, pos, pos + len(line), spans)
        pos += len(line) + 1
    return spans


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    return _between(text, _BLANK.finditer(text))


_SPLITTERS = {"sentence": sentence_spans, "line": line_spans, "paragraph": paragraph_spans}


@register_stage("split", SplitSettings)
class Split(Stage):
    def process_batch(self, batch: pa.Table) -> pa.Table:
        splitter = _SPLITTERS[self.settings.unit]
        texts = batch["text"].to_pylist()
        take, seg_text, starts, ends, counts, empty = [], [], [], [], [], []
        for row, text in enumerate(texts):
            spans = splitter(text) if text else []
            if not spans:
                empty.append(row)
                continue
            counts.append(len(spans))
            take.extend([row] * len(spans))
            seg_text.extend([text[a:b] for a, b in spans])
            starts.extend([a for a, _ in spans])
            ends.extend([b for _, b in spans])
        n_seg, n_empty = len(take), len(empty)
        seg_no = np.concatenate([np.arange(c, dtype=np.int32) for c in counts]) if counts else np.zeros(0, np.int32)
        expanded = np.zeros(n_seg, dtype=np.int64)
        if counts:
            firsts = np.cumsum([0, *counts[:-1]])
            expanded[firsts] = np.asarray(counts) - 1
        idx = pa.array(take + empty, pa.int64())
        parents = batch["doc_id"].take(idx)
        rows = batch.drop_columns(["doc_id", "text", "_seg"]).take(idx)
        seg_ids = pc.binary_join_element_wise(parents.slice(0, n_seg), pa.array(seg_no.astype(str)), "#") \
            if n_seg else pa.array([], pa.string())
        empty_texts = pa.array([texts[r] for r in empty], pa.string())
        rows = rows.append_column("doc_id", pa.concat_arrays([pc.cast(seg_ids, pa.string()).combine_chunks()
                                                              if isinstance(seg_ids, pa.ChunkedArray) else seg_ids,
                                                              parents.slice(n_seg).combine_chunks()]))
        rows = rows.append_column("text", pa.concat_arrays([pa.array(seg_text, pa.string()), empty_texts]))
        rows = rows.append_column("_seg", pa.array(np.r_[seg_no, np.zeros(n_empty, np.int32)], pa.int32()))
        rows = rows.append_column("parent_id", parents)
        rows = rows.append_column("start", pa.array(starts + [0] * n_empty, pa.int64()))
        rows = rows.append_column("end", pa.array(ends + [0] * n_empty, pa.int64()))
        rows = rows.append_column(DROP, pa.array([None] * n_seg + ["empty after split"] * n_empty, pa.string()))
        rows = rows.append_column("_stat.segments", pa.array(np.r_[np.ones(n_seg, np.int64), np.zeros(n_empty, np.int64)]))
        return rows.append_column("_stat.expanded", pa.array(np.r_[expanded, np.zeros(n_empty, np.int64)]))
