"""The word scanner that ``mask``, ``identifiers`` and ``refill`` share: character classes over
every code point, code points in the narrowest array, vectorised polynomial hashes of ranges,
runs, a vectorised hash set, and a lower case that keeps offsets. Pure numpy; no stage."""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["INNER", "JOINS", "WORD_CHAR", "HashSet", "char_classes", "code_points", "lower_in_place", "runs",
           "token_hashes"]

_HASH_BASE = np.uint64(1_000_003)
_HASH_INV = np.uint64(pow(1_000_003, -1, 2**64))
WORD_CHAR, INNER, JOINS = 1, 2, 4
"""Character classes: a word character of ``WORD`` (``[^\\W_]``, which is ``str.isalnum``),
an inner character that may join the parts of one word (apostrophes, hyphen), and what
may stand between two masks that merge (``_JOIN``: space, tab, hyphen)."""


@functools.cache
def char_classes() -> np.ndarray:
    """The class bits of every code point."""
    table = np.fromiter((chr(c).isalnum() for c in range(0x110000)), np.uint8, count=0x110000)
    for c in "'’-":
        table[ord(c)] |= INNER
    for c in " \t-":
        table[ord(c)] |= JOINS
    return table


def code_points(text: str) -> np.ndarray:
    """The code points of ``text`` in the narrowest array that holds them (the dense
    passes of the scan then move a quarter or a half of the bytes)."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), np.uint8)
    wide = text.encode("utf-16-le", "surrogatepass")
    if len(wide) == 2 * len(text):  # no code point beyond the BMP
        return np.frombuffer(wide, np.uint16)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)


class _Powers:
    """``B**i`` and ``B**-i`` modulo 2**64 for i up to the longest batch yet."""

    def __init__(self) -> None:
        self.up = self.down = np.ones(1, np.uint64)

    def __call__(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self.up) <= n:
            size = max(n + 1, 2 * len(self.up))
            with np.errstate(over="ignore"):
                self.up, self.down = (
                    np.cumprod(np.concatenate((np.ones(1, np.uint64), np.full(size - 1, b, np.uint64))),
                               dtype=np.uint64) for b in (_HASH_BASE, _HASH_INV))
        return self.up, self.down


_powers = _Powers()


def token_hashes(cps: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A polynomial hash modulo 2**64 of each range ``[starts, ends)`` of the code points
    ``cps``, all at once: prefix sums of ``cp * B**i``, differenced and shifted back by
    ``B**-start`` (B odd, so invertible modulo 2**64). Equal ranges hash equal wherever
    they are."""
    n = len(cps)
    up, down = _powers(n)
    with np.errstate(over="ignore"):
        prefix = np.zeros(n + 1, np.uint64)
        np.cumsum(cps * up[:n], dtype=np.uint64, out=prefix[1:])
        return (prefix[ends] - prefix[starts]) * down[starts]


def runs(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the runs of True in ``flags``."""
    padded = np.concatenate(([False], flags, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return edges[0::2], edges[1::2]


class HashSet:
    """Membership of 64-bit hashes, vectorised: a direct-address table on the top bits
    (one look-up per query), and a binary search only for the buckets two members share."""

    def __init__(self, hashes: np.ndarray):
        self.sorted = np.unique(hashes)
        bits = max(20, int(np.ceil(np.log2(64 * len(self.sorted) + 1))))  # 8 MB for 16K members
        self.shift = np.uint64(64 - bits)
        bucket = self._bucket(self.sorted)
        counts = np.bincount(bucket, minlength=1 << bits)
        self.table = np.zeros(1 << bits, np.uint64)
        self.table[bucket] = self.sorted
        self.filled, self.shared = counts > 0, counts > 1

    def _bucket(self, h: np.ndarray) -> np.ndarray:
        """Fibonacci hashing: the top bits of ``h`` times 2**64 / phi (a short word's
        polynomial hash has no high bits of its own)."""
        with np.errstate(over="ignore"):
            return ((h * np.uint64(0x9E3779B97F4A7C15)) >> self.shift).astype(np.int64)

    def member(self, h: np.ndarray) -> np.ndarray:
        bucket = self._bucket(h)
        found = self.filled[bucket] & (self.table[bucket] == h)
        shared = np.flatnonzero(self.shared[bucket])
        if len(shared):
            at = np.minimum(np.searchsorted(self.sorted, h[shared]), len(self.sorted) - 1)
            found[shared] = self.sorted[at] == h[shared]
        return found


def lower_in_place(text: str) -> str:
    """``text.lower()`` with every offset kept: a character whose lower case is longer
    (``İ``) stays as it is."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
