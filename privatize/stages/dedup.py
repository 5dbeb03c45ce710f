"""``dedup``: the second and later occurrences of a segment (or of a document), in the
global order (input paths sorted, then line, then segment), are masked or dropped:
step 1 of the CRT preprocessing (paper 004, Algorithm 1), before any redaction, or after
``redact`` with ``skip_clean`` (the product's CRT recipe, ``privatize/specs/crt.yaml``).

A :class:`~privatize.stage.GlobalStage`:

* ``keys``: the SHA-1 digest (20 bytes) of each record's UTF-8 text, after the optional
  normalisation. Records shorter than ``min_length`` characters, with no or empty text,
  or whose text is exactly the mask token take no part (null key).
* ``decide``: the runner hands over every keyed row of one hash partition, in the global
  order. ``sha1``: a row is a hit unless it is the first with its digest (exact).
  ``bloom``: a Bloom filter per partition (``bloom_capacity / NUM_PARTITIONS`` items at
  ``bloom_fp_rate``); a row is a hit when the filter already holds its digest, then the
  digest is added. It never misses a duplicate, and flags a first occurrence (a false
  positive) at about ``bloom_fp_rate`` while the partition holds at most its share of
  the capacity. Returns the hits only (sparse): their positions and ``dedup_hit``.
* ``apply``: column ``dedup_hit`` (bool, false for rows without a decision); with
  ``action: mask`` the text of a hit becomes exactly ``<MASK>`` (the token redaction
  uses), with ``action: drop`` the row gets ``_drop`` = "duplicate".

Statistics: ``_stat.dedup_hits``; ``_stat.masked_chars``, the characters of hit records
(masked, or removed with the record for ``drop``); ``_stat.chars``, every character the
stage saw, so the manifest gives the masked fraction of characters.

``unit: segment`` expects records that a ``split`` stage made; ``unit: document`` expects
whole documents (no split before). The spec validator enforces both; the unit changes
nothing in how records are compared.

``min_length`` defaults to 0 (every repeat counts, as in the paper). Corpora with
templated segments ("Thank you.", greetings in dialogues) route most records private
that way: the paper's dedup makes 0.3% of a 1,000-dialogue CustomerSim sample public.
A length threshold keeps short templates public, but it also lets short secrets repeat:
the 16-character canary ``My ID is: 123456`` escapes ``min_length: 20`` and reaches
DP-SGD 20 times (up to 20 epsilon).

``skip_clean`` is the sound way to keep templates public. Placed after ``redact``, dedup
skips the records that both of redact's policies passed (``pi_hit`` and ``pi_c_hit``
false) and masks every later repeat of the others, however short. A secret can only
reach a skipped record when the conservative policy pi_c misses it, the event of
probability delta_2 that CRT's guarantee already carries (those records are trained
plainly whatever dedup does), so the guarantee is the paper's: every secret pi_c sees
counts once (its Proposition 7). Dedup then compares redacted text. Two records that
differ only in what redaction replaced become duplicates ("My name is <MASK>."), but
both were private already, so this costs utility and no privacy.

Bounds: ``bloom_capacity`` at most 10^10 and ``bloom_fp_rate`` at least 10^-12, so the
filters of one stage stay under about 72 GB (:meth:`DedupSettings.bloom_memory_bytes`
says how much a setting asks for; the service holds tenants to a far smaller quota,
``PRIVATIZE_PIPELINE_MAX_BLOOM_BYTES``); ``min_length`` at most 10^6 characters.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator, model_validator

from privatize.bloom import BloomFilter, bloom_bytes
from privatize.errors import SpecError
from privatize.policy import Quota
from privatize.settings import AfterOneOf, Before, StageSettings
from privatize.stage import DECISION_ROW, DROP, NUM_PARTITIONS, GlobalStage, register_stage, set_column
from privatize.ciphers.tokens import MASK_TOKEN

log = logging.getLogger(__name__)

DIGEST_SIZE = 20
MAX_BLOOM_CAPACITY = 10_000_000_000
MIN_BLOOM_FP_RATE = 1e-12
MAX_MIN_LENGTH = 1_000_000
DROP_DUPLICATE = "duplicate"
# whitespace for ``normalize``: ASCII whitespace and the Unicode space and line separators
_WS_RUN = r"[\s\x0b\x{85}\p{Zs}\x{2028}\x{2029}]+"


CLEAN_FLAGS = ("pi_hit", "pi_c_hit")
"""redact's flags that, all false, make a record clean for ``skip_clean`` (the default)."""


class DedupSettings(StageSettings):
    kind: Literal["dedup"] = "dedup"
    order_rules = (
        Before("encrypt_text", "dedup after encrypt_text finds nothing (ciphertext depends on position); "
                               "put dedup before the cipher"),
        Before("redact", "dedup after redact creates false duplicates (\"My name is <MASK>\"); "
                         "put dedup before redact (or set skip_clean, which reads redact's flags)",
               when={"skip_clean": False}),
        AfterOneOf("redact", "dedup with skip_clean reads the flags of a redact stage before it",
                   when={"skip_clean": True}),
        AfterOneOf("split", "dedup with unit 'segment' needs a split stage before it", when={"unit": "segment"}),
        Before("split", "dedup with unit 'document' must come before split", when={"unit": "document"}),
    )
    method: Literal["sha1", "bloom"] = "sha1"
    unit: Literal["segment", "document"] = "segment"
    """``segment``: records from a ``split`` before; ``document``: whole documents."""
    action: Literal["mask", "drop"] = "mask"
    min_length: int = Field(0, ge=0, le=MAX_MIN_LENGTH)
    """Records with fewer characters (code points) take no part."""
    skip_clean: bool = False
    """Records that the ``redact`` stage before this one called clean (``pi_hit`` and
    ``pi_c_hit`` both false) take no part: repeats of a clean sentence stay in the clear
    and public, while every sentence that may hold a secret, however short, is masked from
    its second occurrence on. See the module notes."""
    clean_flags: list[Literal["pi_hit", "pi_c_hit"]] = Field(default_factory=lambda: list(CLEAN_FLAGS), min_length=1)
    """With ``skip_clean``: the flags whose absence makes a record clean. The CRT recipe
    with ``masked: public`` names ``pi_c_hit`` alone (pi_c then judges what pi left in
    the clear, ``pi_c.scope: rest``): a masked record whose rest pi_c passes is public,
    holds no secret but with the probability delta_2 already carries, and its repeats
    stay too."""

    @field_validator("clean_flags")
    @classmethod
    def _pi_c_decides(cls, v):
        if "pi_c_hit" not in v:  # a record pi_c flags must meet dedup: its repeats count once (Proposition 7)
            raise ValueError("clean_flags must include pi_c_hit: a record the conservative policy flags is never "
                             "clean")
        return v

    @model_validator(mode="after")
    def _flags_need_skip_clean(self):
        if not self.skip_clean and set(self.clean_flags) != set(CLEAN_FLAGS):
            raise ValueError("clean_flags applies with skip_clean only (without it every record takes part)")
        return self

    normalize: Literal["none", "whitespace", "whitespace_case"] = "none"
    """``none``: exact bytes; ``whitespace``: runs of whitespace count as one space and
    leading/trailing whitespace is ignored; ``whitespace_case``: also case-insensitive
    (Unicode lower case)."""
    bloom_capacity: Annotated[int, Quota(
        "pipeline_max_bloom_bytes", measure="bloom_memory_bytes", total=True, what="Bloom filters",
        asked="bloom_capacity {bloom_capacity} at bloom_fp_rate {bloom_fp_rate:g}",
        hint="lower bloom_capacity, raise bloom_fp_rate or use method sha1")] = Field(10_000_000, ge=1,
                                                                                     le=MAX_BLOOM_CAPACITY)
    """Expected number of distinct keyed records in the corpus (``method: bloom``)."""
    bloom_fp_rate: float = Field(1e-6, ge=MIN_BLOOM_FP_RATE, lt=1)

    def bloom_memory_bytes(self) -> int:
        """The bytes of every Bloom filter this stage allocates (one per hash partition,
        ``bloom_capacity / NUM_PARTITIONS`` items each, at ``bloom_fp_rate``): an upper
        bound on what its decide tasks hold at once. 0 for ``method: sha1``."""
        if self.method != "bloom":
            return 0
        return NUM_PARTITIONS * bloom_bytes(math.ceil(self.bloom_capacity / NUM_PARTITIONS), self.bloom_fp_rate)


def _array(col) -> pa.Array:
    """A column as one array; ``combine_chunks`` would copy even a single chunk."""
    if not isinstance(col, pa.ChunkedArray):
        return col
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _string_array(col) -> pa.Array:
    arr = _array(col)
    if not pa.types.is_string(arr.type):
        arr = arr.cast(pa.string())
    return arr


def _clean(batch: pa.Table, flags=("pi_hit", "pi_c_hit")) -> pa.Array:
    """``skip_clean``: true where redact's policies passed the record (every one of
    ``flags`` false); a null flag (no verdict) is not clean."""
    missing = [f for f in flags if f not in batch.column_names]
    if missing:
        raise SpecError(f"dedup: skip_clean needs the flag column(s) {missing} that a redact stage records; "
                        "put redact before dedup")
    passed = [pc.fill_null(pc.invert(pc.cast(_array(batch[f]), pa.bool_())), False) for f in flags]
    out = passed[0]
    for p in passed[1:]:
        out = pc.and_(out, p)
    return out


def _digest_matrix(keys: pa.Array) -> np.ndarray:
    """A fixed_size_binary(20) array without nulls as a (n, 20) uint8 matrix."""
    w = keys.type.byte_width
    return np.frombuffer(keys.buffers()[1], dtype=np.uint8)[keys.offset * w:(keys.offset + len(keys)) * w] \
        .reshape(-1, w)


def first_occurrences(digests: np.ndarray) -> np.ndarray:
    """Boolean mask: row ``i`` of a ``(n, width)`` uint8 matrix is the first row with its
    digest. Exact (Arrow's hash table compares whole digests), and no sort: the
    dictionary numbers distinct digests in the order they first appear, so a row is
    first when its number is above every number before it."""
    n = len(digests)
    if n < 2:
        return np.ones(n, dtype=bool)
    d = np.ascontiguousarray(digests)
    keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(d.shape[1]), n, [None, pa.py_buffer(d)])
    return first_numbered(pc.dictionary_encode(keys).indices.to_numpy())


def first_numbered(number: np.ndarray) -> np.ndarray:
    """Boolean mask over values numbered in order of first appearance (a dictionary
    encoding's indices): row ``i`` is a value's first row when its number is above every
    number before it."""
    first = np.ones(len(number), dtype=bool)
    if len(number) > 1:
        np.greater(number[1:], np.maximum.accumulate(number[:-1]), out=first[1:])
    return first


@register_stage("dedup", DedupSettings)
class Dedup(GlobalStage):
    def keys(self, batch: pa.Table) -> pa.Array:
        text = _string_array(batch["text"])
        n = len(text)
        if n == 0:
            return pa.array([], pa.binary(DIGEST_SIZE))
        # a text is empty exactly when it has no bytes: count code points only when needed
        length = pc.binary_length(text) if self.settings.min_length <= 1 else pc.utf8_length(text)
        skip = pc.or_kleene(pc.less(length, max(1, self.settings.min_length)), pc.equal(text, MASK_TOKEN))
        if self.settings.skip_clean:
            skip = pc.or_kleene(skip, _clean(batch, tuple(self.settings.clean_flags)))
        skip = pc.fill_null(skip, True).to_numpy(zero_copy_only=False)
        # texts repeated inside the batch are hashed once (a hash table in Arrow's C++
        # finds them); one hashlib call per distinct text is the floor, about 0.6 us
        encoded = pc.dictionary_encode(self._normalized(text))
        distinct = _string_array(encoded.dictionary)
        offs = np.frombuffer(distinct.buffers()[1], dtype=np.int32)[distinct.offset:distinct.offset + len(distinct) + 1]
        data = distinct.buffers()[2]
        buf = data.to_pybytes() if data is not None else b""
        sha1 = hashlib.sha1
        bounds = offs.tolist()
        joined = b"".join([sha1(buf[a:b]).digest() for a, b in zip(bounds, bounds[1:])])
        table = np.frombuffer(joined, dtype=np.uint8).reshape(-1, DIGEST_SIZE)
        index = pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False)
        digests = np.take(table, index, axis=0) if len(table) else np.zeros((n, DIGEST_SIZE), np.uint8)
        validity = pa.array(~skip).buffers()[1] if skip.any() else None
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(DIGEST_SIZE), n, [validity, pa.py_buffer(digests)])

    def _normalized(self, text: pa.Array) -> pa.Array:
        mode = self.settings.normalize
        if mode == "none":
            return text
        out = pc.utf8_trim(pc.replace_substring_regex(text, _WS_RUN, " "), characters=" ")
        if mode == "whitespace_case":
            out = pc.utf8_lower(out)
        return _string_array(out)

    def decide(self, partition: pa.Table) -> pa.Table:
        keys = _array(partition["key"])
        rows = np.arange(len(keys), dtype=np.int64)
        if keys.null_count:
            valid = pc.is_valid(keys)
            keys, rows = keys.filter(valid), rows[valid.to_numpy(zero_copy_only=False)]
        if not pa.types.is_fixed_size_binary(keys.type) or keys.type.byte_width < 16:
            keys = keys.cast(pa.binary(DIGEST_SIZE))
        digests = _digest_matrix(keys)
        if self.settings.method == "sha1":
            hit = ~first_occurrences(digests)
        else:
            bloom = BloomFilter(math.ceil(self.settings.bloom_capacity / NUM_PARTITIONS), self.settings.bloom_fp_rate)
            hit = bloom.add_many(digests)
            if bloom.count > bloom.capacity:
                log.warning("dedup: a partition holds %d keys, over the Bloom capacity share %d: "
                            "false positives rise above bloom_fp_rate", bloom.count, bloom.capacity)
        hits = rows[hit]
        return pa.table({DECISION_ROW: pa.array(hits), "dedup_hit": pa.array(np.ones(len(hits), dtype=bool))})

    def apply(self, batch: pa.Table, decisions: pa.Table) -> pa.Table:
        hit = decisions["dedup_hit"]
        hit = pc.fill_null(hit, False)
        lengths = pc.cast(pc.fill_null(pc.utf8_length(batch["text"]), 0), pa.int64())
        if self.settings.action == "mask":
            batch = set_column(batch, "text", pc.if_else(hit, MASK_TOKEN, batch["text"]))
        else:
            batch = set_column(batch, DROP, pc.if_else(hit, DROP_DUPLICATE, pa.scalar(None, pa.string())))
        batch = set_column(batch, "dedup_hit", hit)
        batch = set_column(batch, "_stat.dedup_hits", pc.cast(hit, pa.int64()))
        batch = set_column(batch, "_stat.masked_chars", pc.if_else(hit, lengths, 0))
        return set_column(batch, "_stat.chars", lengths)
