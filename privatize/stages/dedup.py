"""``dedup``: the second and later occurrences of a segment (or document), in the global
order (input files sorted, then line, then segment), are masked or dropped.

A :class:`~privatize.stage.GlobalStage`: ``keys`` is the SHA-1 of each record's text;
the runner groups keys into a fixed number of hash partitions, so ``decide`` sees every
occurrence of a key in one partition, in the global order, whatever the batch size or
worker count. ``method: bloom`` keeps a Bloom filter per partition instead of the exact
set of digests: it never misses a duplicate and may flag a first occurrence (false
positive) at about ``bloom_fp_rate``.

Records shorter than ``min_length`` characters take no part (short, common segments
such as "Thank you." would otherwise be masked everywhere). The text of a hit becomes
``<MASK>`` (action ``mask``, the token redaction uses) or the record is dropped
(action ``drop``). Columns: ``dedup_hit``; statistics ``dedup_hits``, ``masked_chars``
and ``chars`` (so the manifest gives the masked fraction of characters).
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from privatize.bloom import BloomFilter
from privatize.ciphers.tokens import MASK_TOKEN
from privatize.settings import StageSettings
from privatize.stage import DROP, NUM_PARTITIONS, GlobalStage, register_stage, set_column

_WS = re.compile(r"\s+")


class DedupSettings(StageSettings):
    kind: Literal["dedup"] = "dedup"
    method: Literal["sha1", "bloom"] = "sha1"
    unit: Literal["segment", "document"] = "segment"
    """``segment`` needs a ``split`` before; ``document`` must come before any split."""
    action: Literal["mask", "drop"] = "mask"
    min_length: int = Field(0, ge=0)
    """Records with fewer characters are left alone."""
    normalize: Literal["none", "whitespace", "whitespace_case"] = "none"
    bloom_capacity: int = Field(10_000_000, ge=1)
    bloom_fp_rate: float = Field(1e-6, gt=0, lt=1)


@register_stage("dedup", DedupSettings)
class Dedup(GlobalStage):
    def _normal(self, text: str) -> str:
        n = self.settings.normalize
        if n == "none":
            return text
        text = _WS.sub(" ", text).strip()
        return text.lower() if n == "whitespace_case" else text

    def keys(self, batch: pa.Table) -> pa.Array:
        text = batch["text"].combine_chunks().cast(pa.string())
        if self.settings.normalize != "none":
            text = pa.array([None if t is None else self._normal(t) for t in text.to_pylist()], pa.string())
        skip = pc.fill_null(pc.or_(pc.less(pc.utf8_length(text), self.settings.min_length),
                                   pc.equal(text, MASK_TOKEN)), True).to_numpy(zero_copy_only=False)
        if not len(text):
            return pa.array([], pa.binary(20))
        # hash straight from the Arrow buffer: no Python string per segment
        offs = np.frombuffer(text.buffers()[1], dtype=np.int32)[text.offset:text.offset + len(text) + 1].tolist()
        mv = memoryview(text.buffers()[2]) if text.buffers()[2] is not None else memoryview(b"")
        sha1 = hashlib.sha1
        keys = [None if sk else sha1(mv[a:b]).digest() for sk, a, b in zip(skip.tolist(), offs, offs[1:])]
        return pa.array(keys, pa.binary(20))

    def decide(self, partition: pa.Table) -> pa.Table:
        ids = partition["doc_id"]
        if self.settings.method == "sha1":
            # the partition is in the global order: a row is a hit unless it is the first
            # row with its digest (np.unique's return_index gives the first occurrence)
            keys = partition["key"].combine_chunks()
            raw = np.frombuffer(keys.buffers()[1], dtype=np.uint8)[keys.offset * 20:(keys.offset + len(keys)) * 20]
            _, first = np.unique(raw.reshape(-1, 20).copy().view("V20").ravel(), return_index=True)
            hit = np.ones(len(keys), dtype=bool)
            hit[first] = False
            hits = ids.filter(pa.array(hit))
        else:
            bloom = BloomFilter(math.ceil(self.settings.bloom_capacity / NUM_PARTITIONS), self.settings.bloom_fp_rate)
            hits = pa.array([d for d, k in zip(ids.to_pylist(), partition["key"].to_pylist()) if bloom.add(k)],
                            pa.string())
        return pa.table({"doc_id": hits, "dedup_hit": pa.array([True] * len(hits), pa.bool_())})

    def apply(self, batch: pa.Table, decisions: pa.Table) -> pa.Table:
        hit = pc.is_in(batch["doc_id"], value_set=decisions["doc_id"]) if decisions.num_rows \
            else pa.array([False] * batch.num_rows)
        lengths = pc.fill_null(pc.utf8_length(batch["text"]), 0)
        masked = pc.if_else(hit, lengths, 0)
        if self.settings.action == "mask":
            batch = set_column(batch, "text", pc.if_else(hit, MASK_TOKEN, batch["text"]))
        else:
            batch = set_column(batch, DROP, pc.if_else(hit, "duplicate", pa.scalar(None, pa.string())))
        batch = set_column(batch, "dedup_hit", hit)
        batch = set_column(batch, "_stat.dedup_hits", pc.cast(hit, pa.int64()))
        batch = set_column(batch, "_stat.masked_chars", pc.cast(masked, pa.int64()))
        return set_column(batch, "_stat.chars", pc.cast(lengths, pa.int64()))
