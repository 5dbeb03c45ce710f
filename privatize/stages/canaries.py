"""``canaries``: secret canaries inserted into the corpus, to measure how much of them a
model trained on it exposes (Carlini et al., "The Secret Sharer"; the CRT paper inserts 10
canaries "My ID is: <6 random digits>" 20 times each).

**Secrets are derived, never stored.** :func:`derive_secrets` computes them from an
``hmac`` key (``privatize keys new --kind hmac``), the number of digits and an optional
``seed_label``: whoever holds the key reference and the stage's settings re-derives the
list, which is how the secret list is kept with the run. Of the derived list, positions
``0 .. count-1`` are the inserted canaries and ``count .. count+held_out-1`` the held-out
references (never inserted; an evaluation ranks them as the baseline): see
:func:`canary_secrets`. The secrets never appear in the spec, the manifest, ``meta``,
logs, exception messages or Ray task arguments: the key is resolved in ``setup()`` on
the worker, key-derived state is dropped when the stage is pickled, and the decisions
that travel between workers hold canary *numbers* only.

**Placement is global and exact** (a :class:`~privatize.stage.GlobalStage`): every
record with text has the same key, so all of them reach one ``decide`` call in the
global order, which picks ``count * repeats`` distinct records with a keyed random
stream (HMAC-SHA256, independent of Python's hash, NumPy's generators, batch size and
worker count). Insertion slot ``s`` holds canary ``s // repeats`` and goes to the
``s % m``-th picked record, ``m = min(count * repeats, records)``. A corpus with fewer
records than ``count * repeats`` is not refused: every record gets one or more canaries
(a warning says so), so each canary is still inserted exactly ``repeats`` times, in
``repeats`` distinct records while there are at least that many.

``apply`` appends each canary to its record's text after a blank line
(:data:`SEPARATOR`): a paragraph break is a cut for every ``split`` unit, so a later
``split`` makes each canary its own data point whatever the record ends with. Records
without text (null or empty) take no part. The stage must come first in a pipeline
(other ``canaries`` stages aside): the privatizing stages after it must see the
canaries as they would see the owner's secrets.

Statistics: ``_stat.canaries_inserted`` (canaries appended to the record), so the
manifest shows ``count * repeats``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator, model_validator

from privatize.settings import KeyKinds, KeyRef, OrderRule, StageSettings, declared_key_kinds
from privatize.stage import DECISION_ROW, GlobalStage, register_stage, set_column

log = logging.getLogger(__name__)

PLACEHOLDER = "{secret}"
SEPARATOR = "\n\n"
MAX_COUNT = 10_000
MAX_REPEATS = 10_000
MAX_INSERTIONS = 1_000_000
"""Bound of ``count * repeats``: the decisions of one run sit in one task's memory."""
MAX_FORMAT_LENGTH = 1_000
MAX_LABEL_LENGTH = 200
_DOMAIN = b"privatize/canaries/v1"
_KEY_WIDTH = 8


def _framed(*parts: bytes) -> bytes:
    """Length-prefixed concatenation: distinct inputs give distinct messages."""
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def derive_secrets(key: bytes, digits: int, n: int, label: str = "") -> list[str]:
    """The first ``n`` distinct secrets of ``digits`` decimal digits (zero-padded) derived
    from ``key`` under ``label``. Candidate ``i`` is HMAC-SHA256(key, domain, label,
    digits, i) reduced modulo ``10**digits`` (a 256-bit value: the bias is below
    ``2**-220``); a candidate equal to an earlier one is skipped. The list is
    prefix-stable: asking for more secrets never changes the first ones, so the held-out
    references (after the inserted ones) can be added without moving the canaries."""
    if not isinstance(key, (bytes, bytearray)) or not key:
        raise ValueError("derive_secrets: key must be non-empty bytes")
    if not isinstance(digits, int) or not 1 <= digits <= 18:
        raise ValueError(f"derive_secrets: digits must be 1..18, not {digits!r}")
    space = 10 ** digits
    if not isinstance(n, int) or not 0 <= n <= space:
        raise ValueError(f"derive_secrets: n must be 0..{space} (distinct secrets of {digits} digits), not {n!r}")
    prefix = _framed(_DOMAIN + b"/secret", label.encode("utf-8"), str(digits).encode("ascii"))
    mac = hmac.new(bytes(key), prefix, hashlib.sha256)
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while len(out) < n:
        m = mac.copy()
        m.update(i.to_bytes(8, "big"))
        secret = str(int.from_bytes(m.digest(), "big") % space).zfill(digits)
        i += 1
        if secret not in seen:
            seen.add(secret)
            out.append(secret)
    return out


def canary_text(fmt: str, secret: str) -> str:
    """The canary sentence: ``fmt`` with its one ``{secret}`` replaced (no other brace is
    interpreted, so a format may hold literal braces)."""
    return fmt.replace(PLACEHOLDER, secret)


def canary_secrets(settings: "CanariesSettings", key: bytes) -> tuple[list[str], list[str]]:
    """(inserted secrets, held-out secrets) of a ``canaries`` stage with ``settings``,
    ``key`` being the bytes its ``key`` reference resolves to: what an evaluation needs to
    rank the canaries against their references."""
    secrets = derive_secrets(key, settings.digits, settings.count + settings.held_out, settings.seed_label)
    return secrets[:settings.count], secrets[settings.count:]


class KeyedStream:
    """Uniform random integers from HMAC-SHA256(seed, counter): reproducible from the key
    alone, on every platform and library version."""

    def __init__(self, seed: bytes):
        self._mac = hmac.new(seed, _DOMAIN + b"/stream", hashlib.sha256)
        self._counter = 0
        self._words: list[int] = []

    def _next64(self) -> int:
        if not self._words:
            m = self._mac.copy()
            m.update(self._counter.to_bytes(8, "big"))
            self._counter += 1
            d = m.digest()
            self._words = [int.from_bytes(d[i:i + 8], "big") for i in range(24, -1, -8)]
        return self._words.pop()

    def below(self, bound: int) -> int:
        """Uniform in ``[0, bound)`` (rejection sampling: no modulo bias)."""
        if not 0 < bound <= 1 << 64:
            raise ValueError(f"bound must be in 1..2**64, not {bound}")
        limit = (1 << 64) - (1 << 64) % bound
        while True:
            x = self._next64()
            if x < limit:
                return x % bound

    def sample(self, n: int, m: int) -> list[int]:
        """``m`` distinct integers of ``[0, n)`` in random order: the first ``m`` steps of
        a Fisher-Yates shuffle of ``range(n)``, kept sparse (O(m) time and memory)."""
        moved: dict[int, int] = {}
        out = []
        for i in range(m):
            j = i + self.below(n - i)
            out.append(moved.get(j, j))
            moved[j] = moved.get(i, i)
        return out


class First(OrderRule):
    """The stage comes before every stage of another kind."""

    def broken(self, settings, earlier: Sequence[str]) -> bool:
        return any(kind != settings.kind for kind in earlier)


class CanariesSettings(StageSettings):
    kind: Literal["canaries"] = "canaries"
    order_rules = (First("canaries must come before every other stage: the privatizing stages must see the "
                         "canaries as they see the corpus's secrets, and a split after it makes each canary "
                         "its own data point"),)
    key: Annotated[KeyRef, KeyKinds("hmac")]
    """An ``hmac`` key, by reference: the secrets and their placement derive from it."""
    format: str = Field("My ID is: {secret}", min_length=1, max_length=MAX_FORMAT_LENGTH)
    """The canary sentence, with ``{secret}`` exactly once."""
    digits: int = Field(6, ge=1, le=9)
    count: int = Field(10, ge=1, le=MAX_COUNT)
    """Distinct canaries inserted."""
    repeats: int = Field(20, ge=1, le=MAX_REPEATS)
    """Insertions of each canary."""
    held_out: int = Field(10, ge=0, le=MAX_COUNT)
    """Reference canaries derived after the inserted ones and never inserted."""
    seed_label: str = Field("", max_length=MAX_LABEL_LENGTH)
    """Independent canary sets (secrets and placement) from one key."""

    @field_validator("format")
    @classmethod
    def _one_placeholder(cls, v: str) -> str:
        if v.count(PLACEHOLDER) != 1:
            raise ValueError(f"must contain {PLACEHOLDER} exactly once (found {v.count(PLACEHOLDER)})")
        return v

    @model_validator(mode="after")
    def _feasible(self) -> "CanariesSettings":
        if self.count * self.repeats > MAX_INSERTIONS:
            raise ValueError(f"count * repeats must be at most {MAX_INSERTIONS} (is {self.count * self.repeats})")
        if self.count + self.held_out > 10 ** self.digits:
            raise ValueError(f"count + held_out ({self.count + self.held_out}) exceeds the {10 ** self.digits} "
                             f"distinct secrets of {self.digits} digit(s)")
        return self


@register_stage("canaries", CanariesSettings)
class Canaries(GlobalStage):
    _sentences: list[str] | None = None
    _seed: bytes | None = None
    _key_id: str | None = None

    def setup(self) -> None:
        s = self.settings
        km = self.context.key_resolver.resolve(s.key, expect=declared_key_kinds(s, "key"))
        inserted, _ = canary_secrets(s, km.secret)
        self._sentences = [canary_text(s.format, x) for x in inserted]
        self._seed = hmac.new(km.secret, _framed(_DOMAIN + b"/placement", s.seed_label.encode("utf-8")),
                              hashlib.sha256).digest()
        self._key_id = km.key_id
        log.info("canaries: key %s, %d canaries x %d repeats, %d held out", km.key_id, s.count, s.repeats,
                 s.held_out)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_sentences", None)  # key-derived: never travels
        state.pop("_seed", None)
        return state

    def key_ids(self) -> dict[str, str]:
        """``{"key": <key id>}``, the manifest's ``stages.<i>.key``."""
        return {"key": self._key_id} if self._key_id else {}

    def keys(self, batch: pa.Table) -> pa.Array:
        """One constant key for every record with text (one partition); null otherwise."""
        n = batch.num_rows
        takes = pc.fill_null(pc.greater(pc.binary_length(batch["text"]), 0), False).to_numpy(zero_copy_only=False)
        validity = None if takes.all() else pa.array(takes).buffers()[1]
        zeros = pa.py_buffer(bytes(n * _KEY_WIDTH))
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(_KEY_WIDTH), n, [validity, zeros])

    def decide(self, partition: pa.Table) -> pa.Table:
        """The picked rows (positions in ``partition``), each with the numbers of the
        canaries it receives."""
        n = partition.num_rows
        if n == 0:
            return pa.table({DECISION_ROW: pa.array([], pa.int64()), "canaries": pa.array([], pa.list_(pa.int32()))})
        if self._seed is None:
            self.setup()
        total = self.settings.count * self.settings.repeats
        m = min(total, n)
        if m < total:
            log.warning("canaries: %d record(s) take part, fewer than count x repeats = %d: records get several "
                        "canaries each", n, total)
        rows = np.asarray(KeyedStream(self._seed).sample(n, m), dtype=np.int64)
        slots = np.arange(total, dtype=np.int64)
        holder = slots % m  # which picked row each slot goes to
        order = np.argsort(holder, kind="stable")  # by row, then slot (so canary) ascending
        offsets = np.zeros(m + 1, np.int32)
        np.cumsum(np.bincount(holder, minlength=m), out=offsets[1:])
        numbers = (slots[order] // self.settings.repeats).astype(np.int32)
        return pa.table({DECISION_ROW: pa.array(rows),
                         "canaries": pa.ListArray.from_arrays(pa.array(offsets), pa.array(numbers))})

    def apply(self, batch: pa.Table, decisions: pa.Table) -> pa.Table:
        if self._sentences is None:
            self.setup()
        lists = decisions["canaries"]
        inserted = pc.fill_null(pc.list_value_length(lists), 0).cast(pa.int64())
        at = np.flatnonzero(inserted.to_numpy(zero_copy_only=False))
        if len(at):
            sentences = self._sentences
            suffixes = ["".join(SEPARATOR + sentences[c] for c in numbers)
                        for numbers in lists.take(pa.array(at)).to_pylist()]
            pick = np.zeros(batch.num_rows, np.int64)
            pick[at] = np.arange(1, len(at) + 1)
            suffix = pa.array(["", *suffixes], pa.string()).take(pa.array(pick))
            text = batch["text"]
            if not pa.types.is_string(text.type):
                text = pc.cast(text, pa.string())
            batch = set_column(batch, "text", pc.binary_join_element_wise(text, suffix, ""))
        return set_column(batch, "_stat.canaries_inserted", inserted)
