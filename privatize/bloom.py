"""A deterministic Bloom filter over digests: no Python ``hash()``, no random seeds, so
the same digests give the same answers in every process and on every platform.

Sizing (the standard optimum): ``m = ceil(-n ln p / (ln 2)^2)`` bits and
``k = round(m / n * ln 2)`` hash functions for ``n = capacity`` and ``p = fp_rate``.
Bit positions come from the digest by double hashing (Kirsch and Mitzenmacher, 2006):
with ``h1``, ``h2`` the first two little-endian 64-bit words of the digest,
``g_i = (a + i * b) mod m`` for ``i < k``, where ``a = h1 mod m`` and
``b = h2 mod (m - 1) + 1`` (never 0, so the k positions do not collapse into one).
The digest must have at least 16 bytes (SHA-1 has 20) and be a good hash of the item.

A member is never reported absent (no false negatives); a non-member is reported
present with probability about ``fp_rate`` once ``capacity`` items are in, and more
often beyond that (``fill_ratio`` says how full the filter is).

:meth:`BloomFilter.add_many` adds a whole array of digests with NumPy, with exactly the
answers a loop of :meth:`add` would give in the same order.
"""

from __future__ import annotations

import math

import numpy as np

_CHUNK = 1 << 16  # rows per vectorised step of add_many


def bloom_bits(capacity: int, fp_rate: float) -> int:
    """``m``, the bits of a filter for ``capacity`` items at ``fp_rate`` (the optimum)."""
    return max(8, math.ceil(-int(capacity) * math.log(float(fp_rate)) / math.log(2) ** 2))


def bloom_bytes(capacity: int, fp_rate: float) -> int:
    """The bytes a :class:`BloomFilter` of this size allocates for its bits, before any
    item is added (what a settings check can bound)."""
    return (bloom_bits(capacity, fp_rate) + 7) // 8


class BloomFilter:
    def __init__(self, capacity: int, fp_rate: float):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if not 0 < fp_rate < 1:
            raise ValueError("fp_rate must be in (0, 1)")
        self.capacity = int(capacity)
        self.fp_rate = float(fp_rate)
        self.m = bloom_bits(self.capacity, self.fp_rate)
        self.k = max(1, round(self.m / self.capacity * math.log(2)))
        self.bits = np.zeros((self.m + 7) // 8, dtype=np.uint8)
        self.count = 0  # items added (duplicates included)

    # ---- positions ------------------------------------------------------------------

    def positions(self, digests) -> np.ndarray:
        """The k bit positions of each digest, shape ``(n, k)`` (int64).

        ``digests`` is a ``bytes`` object, a list of them, or a uint8 array of shape
        ``(n, width)`` with ``width >= 16``."""
        d = _as_matrix(digests)
        words = np.ascontiguousarray(d[:, :16]).view("<u8")
        m = np.uint64(self.m)
        a = words[:, 0] % m
        step = words[:, 1] % np.uint64(self.m - 1) + np.uint64(1)
        out = np.empty((len(d), self.k), dtype=np.int64)
        pos = a
        for i in range(self.k):  # a + i*b mod m, step by step: never overflows 64 bits
            out[:, i] = pos
            pos = pos + step
            pos = np.where(pos >= m, pos - m, pos)
        return out

    # ---- one item -------------------------------------------------------------------

    def add(self, digest: bytes) -> bool:
        """Add one digest; return whether the filter already (possibly) held it."""
        return bool(self.add_many(digest)[0])

    def __contains__(self, digest: bytes) -> bool:
        return bool(self.contains_many(digest)[0])

    # ---- many items -----------------------------------------------------------------

    def contains_many(self, digests) -> np.ndarray:
        """Whether each digest is (possibly) in the filter; the filter is unchanged."""
        pos = self.positions(digests)
        return self._get(pos.ravel()).reshape(pos.shape).all(axis=1)

    def add_many(self, digests) -> np.ndarray:
        """Add the digests in order; element ``i`` of the result says whether the filter
        held digest ``i`` just before it was added (what ``add`` would have returned).

        An item is held when all its k bits are set: by an earlier call, or by an earlier
        item of this call. The second part is found without a Python loop: the
        (position, row) pairs of a chunk are sorted, and a bit counts as set for a row when
        a smaller row of the chunk has the same position."""
        pos = self.positions(digests)
        n, k = pos.shape
        held = np.empty(n, dtype=bool)
        step = max(1, min(_CHUNK, (1 << 62) // self.m))  # position * rows fits in int64
        for c0 in range(0, n, step):
            chunk = pos[c0:c0 + step]
            c = len(chunk)
            rows = np.repeat(np.arange(c, dtype=np.int64), k)
            pairs = np.sort(chunk.ravel() * c + rows)
            p, r = pairs // c, pairs % c
            first = np.ones(len(p), dtype=bool)
            first[1:] = p[1:] != p[:-1]
            first_row = r[np.maximum.accumulate(np.where(first, np.arange(len(p)), 0))]
            earlier = self._get(p) | (r > first_row)
            missing = np.bincount(r[~earlier], minlength=c)
            held[c0:c0 + c] = missing == 0
            self._set(p[first])
        self.count += n
        return held

    @property
    def fill_ratio(self) -> float:
        """Share of bits set (about 0.5 at capacity, for the optimal k)."""
        return float(np.unpackbits(self.bits)[: self.m].mean())

    def _get(self, p: np.ndarray) -> np.ndarray:
        return (self.bits[p >> 3] >> (p & 7).astype(np.uint8)) & 1 == 1

    def _set(self, p: np.ndarray) -> None:
        # bitwise_or.at: repeated bytes in p each get their bit
        np.bitwise_or.at(self.bits, p >> 3, (np.uint8(1) << (p & 7).astype(np.uint8)))


def _as_matrix(digests) -> np.ndarray:
    if isinstance(digests, (bytes, bytearray, memoryview)):
        d = np.frombuffer(bytes(digests), dtype=np.uint8)[None, :]
    elif isinstance(digests, np.ndarray):
        d = digests
        if d.ndim != 2 or d.dtype != np.uint8:
            raise ValueError("digests must be a uint8 array of shape (n, width)")
    else:
        items = list(digests)
        if not items:
            return np.zeros((0, 16), dtype=np.uint8)
        width = len(items[0])
        if any(len(x) != width for x in items):
            raise ValueError("digests must all have the same length")
        d = np.frombuffer(b"".join(items), dtype=np.uint8).reshape(len(items), width)
    if d.shape[1] < 16:
        raise ValueError("a digest must have at least 16 bytes")
    return d
