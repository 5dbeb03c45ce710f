"""The whole-text polyalphabetic cipher of the Crypto-LLM paper (SEEDS.md section 1).

Position ``i`` counts every code point of a record from 0. A character of the alphabet
with index ``p`` becomes ``alphabet[(p + k_i) mod A]``, where ``k_i`` is the 1-based
number of key letter ``key[i mod L]`` (so the last letter of the alphabet is a shift of
0); every other character, and every reserved token (``<MASK>``, tags, entity tokens),
is copied unchanged but still advances ``i``.

**This is obfuscation, not confidentiality**: one known plaintext reveals the key.

Speed: the work is done on NumPy arrays. For ``letters52`` the text stays UTF-8 bytes
(only ASCII bytes change); a precomputed table maps (shift, byte) to the output byte, and
the shift of each byte is a slice of the key tiled once, offset by the number of UTF-8
continuation bytes before it (constant between non-ASCII characters, so a handful of
slices per document). ``latin`` works on UTF-32 code points.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np

from privatize.ciphers.tokens import reserved_spans
from privatize.errors import KeyMaterialError
from privatize.keys import KeyMaterial, alphabet_chars

log = logging.getLogger(__name__)

OBFUSCATION_WARNING = ("the whole-text cipher is obfuscation, not confidentiality: one known plaintext "
                       "reveals the key")
_warned = False


def warn_obfuscation() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(OBFUSCATION_WARNING, UserWarning, stacklevel=3)


class Vigenere:
    """The cipher for one key. ``encrypt``/``decrypt`` take one record's text."""

    def __init__(self, letters: str, alphabet: str = "letters52"):
        alpha = alphabet_chars(alphabet)
        self.alphabet = alphabet
        index = {c: i for i, c in enumerate(alpha)}
        if not letters or any(c not in index for c in letters):
            raise KeyMaterialError(f"vigenere key must be non-empty letters of the {alphabet} alphabet")
        a = len(alpha)
        self._shifts = np.array([(index[c] + 1) % a for c in letters], dtype=np.int64)
        if not self._shifts.any():
            raise KeyMaterialError("identity key (every shift is 0) refused")
        self._alpha = np.array([ord(c) for c in alpha], dtype=np.uint32)
        self._ascii = alphabet == "letters52"
        self._tables = {}
        self._tiles = {}

    @classmethod
    def from_key(cls, km: KeyMaterial) -> "Vigenere":
        if km.kind != "vigenere":
            raise KeyMaterialError(f"key {km.key_id} is {km.kind}; the whole-text cipher needs a vigenere key")
        return cls(km.letters, km.alphabet or "letters52")

    # -- tables --------------------------------------------------------------------
    def _table(self, sign: int) -> np.ndarray:
        """Flattened (A, N) table: row = shift, column = byte (ASCII) or code point (< N)."""
        if sign in self._tables:
            return self._tables[sign]
        a = len(self._alpha)
        n = 256 if self._ascii else int(self._alpha.max()) + 1
        base = np.arange(n, dtype=np.uint32)
        pos = np.full(n, -1, dtype=np.int64)
        pos[self._alpha] = np.arange(a)
        t = np.empty((a, n), dtype=np.uint8 if self._ascii else np.uint32)
        letters = pos >= 0
        for s in range(a):
            row = base.copy()
            row[letters] = self._alpha[(pos[letters] + sign * s) % a]
            t[s] = row
        self._tables[sign] = t.reshape(-1)
        return self._tables[sign]

    def _tile(self, n: int) -> np.ndarray:
        """Shift (times the table row width) for positions 0..n+L-1, grown as needed."""
        width = 256 if self._ascii else int(self._alpha.max()) + 1
        L = len(self._shifts)
        cur = self._tiles.get("t")
        if cur is None or len(cur) < n + L:
            reps = (max(n, 1 << 16) + L) // L + 1
            dtype = np.uint16 if self._ascii else np.int64
            self._tiles["t"] = np.tile(self._shifts * width, reps).astype(dtype)
        return self._tiles["t"]

    # -- the cipher ------------------------------------------------------------------
    def encrypt(self, text: str) -> str:
        return self._apply(text, +1)

    def decrypt(self, text: str) -> str:
        return self._apply(text, -1)

    def encrypt_many(self, texts: list[str]) -> list[str]:
        return [self._apply(t, +1) for t in texts]

    def decrypt_many(self, texts: list[str]) -> list[str]:
        return [self._apply(t, -1) for t in texts]

    def _apply(self, text: str, sign: int) -> str:
        if not text:
            return text
        if self._ascii:
            return self._apply_utf8(text, sign)
        return self._apply_utf32(text, sign)

    def _apply_utf8(self, text: str, sign: int) -> str:
        raw = text.encode("utf-8")
        b = np.frombuffer(raw, dtype=np.uint8)
        n = len(b)
        tile = self._tile(n)
        ascii_text = len(raw) == len(text)
        table = self._table(sign)
        if ascii_text:  # byte index == code point index
            out = table.take(tile[:n] + b)  # uint16 index: shift * 256 + byte
        else:
            # Code point positions are byte positions with the UTF-8 continuation bytes
            # left out; those bytes are never letters and are copied.
            high = np.flatnonzero(b > 0x7F)
            cont = high[(b[high] & 0xC0) == 0x80]
            keep = np.ones(n, dtype=bool)
            keep[cont] = False
            lead = b[keep]
            out = b.copy()
            out[keep] = table.take(tile[:len(lead)] + lead)
        if b"<" in raw or (b"[" in raw and b"_[" in raw):
            for s, e in reserved_spans(text):
                bs, be = (s, e) if ascii_text else (len(text[:s].encode()), len(text[:e].encode()))
                out[bs:be] = b[bs:be]
        return out.tobytes().decode("utf-8")

    # -- Arrow arrays: the whole batch's UTF-8 buffer at once, no per-record Python --
    def encrypt_array(self, arr) -> "pa.Array":
        return self._apply_array(arr, +1)

    def decrypt_array(self, arr) -> "pa.Array":
        return self._apply_array(arr, -1)

    def _apply_array(self, arr, sign: int):
        import pyarrow as pa

        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        arr = arr.cast(pa.string())
        if not self._ascii or len(arr) == 0:
            return pa.array([None if t is None else self._apply(t, sign) for t in arr.to_pylist()], pa.string())
        n_rec = len(arr)
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset:arr.offset + n_rec + 1]
        o0, o1 = int(offsets[0]), int(offsets[-1])
        data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[o0:o1] if o1 > o0 else np.zeros(0, np.uint8)
        rel = (offsets - o0).astype(np.int64)
        lengths = np.diff(rel)
        high = np.flatnonzero(data > 0x7F)
        if len(high):
            cont = high[(data[high] & 0xC0) == 0x80]
            keep = np.ones(len(data), dtype=bool)
            keep[cont] = False
            lead = data[keep]
            starts = rel[:-1] - np.searchsorted(cont, rel[:-1])  # record starts in lead positions
            lead_len = np.diff(np.append(starts, len(lead)))
        else:
            keep, lead, starts, lead_len = None, data, rel[:-1], lengths
        # the shift of a lead byte comes from its position within its record
        tile = self._tile(int(lead_len.max()) if len(lead_len) else 0)
        if len(lead) >= 512 * n_rec:  # long records: one slice of the tile each
            idx = np.empty(len(lead), dtype=tile.dtype)
            for st, ln in zip(starts.tolist(), lead_len.tolist()):
                np.add(tile[:ln], lead[st:st + ln], out=idx[st:st + ln])
        else:  # short records: positions for the whole batch at once
            pos = np.arange(len(lead), dtype=np.int64) - np.repeat(starts, lead_len)
            idx = tile.take(pos) + lead
        enc = self._table(sign).take(idx)
        if keep is not None:
            out = data.copy()
            out[keep] = enc
        else:
            out = enc
        raw = data.tobytes()
        if b"<" in raw or (b"[" in raw and b"_[" in raw):  # reserved tokens are copied unchanged
            for i in range(n_rec):
                s_, e_ = int(rel[i]), int(rel[i + 1])
                if raw.find(b"<", s_, e_) < 0 and raw.find(b"_[", s_, e_) < 0:
                    continue
                text = raw[s_:e_].decode("utf-8")
                for a, b_ in reserved_spans(text):
                    bs, be = s_ + len(text[:a].encode()), s_ + len(text[:b_].encode())
                    out[bs:be] = data[bs:be]
        new_offsets = pa.py_buffer((offsets - o0).astype(np.int32).tobytes())
        validity = arr.buffers()[0] if arr.null_count else None
        if validity is not None and arr.offset:
            return pa.array([None if t is None else self._apply(t, sign) for t in arr.to_pylist()], pa.string())
        return pa.StringArray.from_buffers(n_rec, new_offsets, pa.py_buffer(out.tobytes()), validity,
                                           arr.null_count)

    def _apply_utf32(self, text: str, sign: int) -> str:
        cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        n = len(cp)
        width = int(self._alpha.max()) + 1
        sh = self._tile(n)[:n]
        clipped = np.minimum(cp, width - 1).astype(np.int64)
        out = np.where(cp < width, self._table(sign).take(sh + clipped), cp).astype(np.uint32)
        for s, e in reserved_spans(text):
            out[s:e] = cp[s:e]
        return out.tobytes().decode("utf-32-le")


def encrypt(text: str, key: KeyMaterial) -> str:
    warn_obfuscation()
    return Vigenere.from_key(key).encrypt(text)


def decrypt(text: str, key: KeyMaterial) -> str:
    return Vigenere.from_key(key).decrypt(text)
