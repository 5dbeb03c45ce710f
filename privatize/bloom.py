"""A deterministic Bloom filter over digests (no Python ``hash()``, no random seeds).

Bit positions come from the digest by double hashing (Kirsch and Mitzenmacher):
``h1 + i * h2 mod m`` for ``i < k``, with ``h1``, ``h2`` the first two 64-bit words of
the digest (SHA-1 gives 160 bits). It never misses a member; it reports a non-member
as present with probability about ``fp_rate`` once filled to ``capacity``.
"""

from __future__ import annotations

import math


class BloomFilter:
    def __init__(self, capacity: int, fp_rate: float):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if not 0 < fp_rate < 1:
            raise ValueError("fp_rate must be in (0, 1)")
        self.capacity = capacity
        self.fp_rate = fp_rate
        self.m = max(8, math.ceil(-capacity * math.log(fp_rate) / math.log(2) ** 2))
        self.k = max(1, round(self.m / capacity * math.log(2)))
        self._bits = bytearray((self.m + 7) // 8)
        self.count = 0

    def _positions(self, digest: bytes):
        if len(digest) < 16:
            raise ValueError("digest must have at least 16 bytes")
        h1 = int.from_bytes(digest[:8], "little")
        h2 = int.from_bytes(digest[8:16], "little") | 1
        m = self.m
        return [(h1 + i * h2) % m for i in range(self.k)]

    def add(self, digest: bytes) -> bool:
        """Add ``digest``; return whether it was (possibly) present before."""
        bits = self._bits
        present = True
        for p in self._positions(digest):
            byte, mask = p >> 3, 1 << (p & 7)
            if not bits[byte] & mask:
                present = False
                bits[byte] |= mask
        self.count += 1
        return present

    def __contains__(self, digest: bytes) -> bool:
        bits = self._bits
        return all(bits[p >> 3] & (1 << (p & 7)) for p in self._positions(digest))
