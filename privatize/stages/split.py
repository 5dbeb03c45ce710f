"""``split``: documents into segment records, the data points of CRT (paper 004, A.6).

Each segment becomes a record with ``doc_id = <parent>#<n>``, ``parent_id``, ``start``
and ``end`` (code-point offsets into the parent text; ``parent[start:end]`` is the
segment exactly) and ``_seg = n``. Whitespace between segments belongs to none.

Units: ``sentence`` (default; the rules are in ``privatize.sentences``), ``paragraph``
(text between blank lines), ``line`` (every line; dialogue turns such as
``SYS: ...`` / ``USR: ...``). A document with no non-blank segment is dropped
(``_drop``: "empty after split").
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from privatize.sentences import segment_sentences
from privatize.settings import StageSettings
from privatize.stage import DROP, Stage, register_stage


class SplitSettings(StageSettings):
    kind: Literal["split"] = "split"
    unit: Literal["sentence", "line", "paragraph"] = "sentence"


def _spans_one(text: str, unit: str) -> list[tuple[int, int]]:
    _, s, e, _ = segment_sentences(pa.array([text], pa.string()), unit)
    return list(zip(s.tolist(), e.tolist()))


def sentence_spans(text: str) -> list[tuple[int, int]]:
    return _spans_one(text, "sentence")


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    return _spans_one(text, "paragraph")


def line_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = 0
    for line in text.split("\n"):
        seg = line.strip()
        if seg:
            lead = len(line) - len(line.lstrip())
            spans.append((pos + lead, pos + lead + len(seg)))
        pos += len(line) + 1
    return spans


def _line_segments(arr: pa.Array):
    rec, starts, ends, texts = [], [], [], []
    for r, text in enumerate(arr.to_pylist()):
        for a, b in line_spans(text):
            rec.append(r)
            starts.append(a)
            ends.append(b)
            texts.append(text[a:b])
    return (np.asarray(rec, np.int64), np.asarray(starts, np.int64), np.asarray(ends, np.int64),
            pa.array(texts, pa.string()))


@register_stage("split", SplitSettings)
class Split(Stage):
    def process_batch(self, batch: pa.Table) -> pa.Table:
        text = batch["text"].combine_chunks()
        if self.settings.unit == "line":
            rec, starts, ends, seg_text = _line_segments(text)
        else:
            rec, starts, ends, seg_text = segment_sentences(pc.fill_null(text, ""), self.settings.unit)
        counts = np.bincount(rec, minlength=batch.num_rows)
        empty = np.flatnonzero(counts == 0)
        n_seg, n_empty = len(rec), len(empty)
        # segment number within its document (rec is sorted)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        seg_no = (np.arange(n_seg) - first[rec]).astype(np.int32)
        expanded = np.where(seg_no == 0, counts[rec] - 1, 0).astype(np.int64)
        idx = pa.array(np.concatenate([rec, empty]).astype(np.int64))
        parents = batch["doc_id"].combine_chunks().take(idx)
        rows = batch.drop_columns(["doc_id", "text", "_seg"]).take(idx)
        seg_ids = pc.binary_join_element_wise(parents.slice(0, n_seg), pc.cast(pa.array(seg_no), pa.string()), "#")
        rows = rows.append_column("doc_id", pa.concat_arrays([seg_ids, parents.slice(n_seg)]))
        rows = rows.append_column("text", pa.concat_arrays([seg_text.cast(pa.string()), text.take(pa.array(empty))]))
        rows = rows.append_column("_seg", pa.array(np.r_[seg_no, np.zeros(n_empty, np.int32)], pa.int32()))
        rows = rows.append_column("parent_id", parents)
        rows = rows.append_column("start", pa.array(np.r_[starts, np.zeros(n_empty, np.int64)]))
        rows = rows.append_column("end", pa.array(np.r_[ends, np.zeros(n_empty, np.int64)]))
        rows = rows.append_column(DROP, pa.array([None] * n_seg + ["empty after split"] * n_empty, pa.string()))
        rows = rows.append_column("_stat.segments", pa.array(np.r_[np.ones(n_seg, np.int64), np.zeros(n_empty, np.int64)]))
        return rows.append_column("_stat.expanded", pa.array(np.r_[expanded, np.zeros(n_empty, np.int64)]))
