"""The whole-text polyalphabetic cipher of the Crypto-LLM paper (SEEDS.md section 1).

Position ``i`` counts every code point of a record from 0. A character of the alphabet
with index ``p`` becomes ``alphabet[(p + k_i) mod A]``, where ``k_i`` is the 1-based
number of key letter ``key[i mod L]`` (so the last letter of the alphabet is a shift of
0: key ``z`` in ``letters52``); every other character, and every reserved token, is
copied unchanged but still advances ``i``. Check: ``I am a cat.`` under key ``hENTu`` is
``q oG I quo.``.

**This is obfuscation, not confidentiality**: one known plaintext reveals the key. The
module warns once per process (``warnings.warn`` and a logged warning) when it is used.

Reserved tokens
---------------
``<MASK>``, tags such as ``<PERSON>`` and entity tokens ``Person_[<base64>]`` are copied
unchanged. The cipher's grammar for them is *case-blind*: every letter class accepts
every letter of the cipher's alphabet (``<[A-Za-z][A-Za-z0-9_]*>``,
``[A-Za-z][A-Za-z0-9]*_[<16+ base64 characters>]`` after a non-alphanumeric character),
because the cipher maps letters to letters of either case. With a case-sensitive grammar
two plaintexts could share one ciphertext: ``<mask>`` may encrypt to ``<QBTL>``, which a
case-sensitive grammar takes for a copied tag when decrypting, so decryption would return
``<QBTL>``. A case-blind grammar sees only "a letter" or the exact non-letter, which the
cipher never changes, so encryption and decryption find the same tokens at the same
places and ``decrypt(encrypt(x)) == x`` for every text. The price: any text shaped like
``<word>`` (an HTML tag, say) is copied in the clear.

Speed
-----
``letters52`` works on UTF-8 bytes (only ASCII bytes are letters). A table maps
``(shift, byte)`` to the output byte (shift 0 is the identity row, which also copies
reserved tokens); each byte's shift comes from the key tiled once, laid out per record
with slices, with a dummy entry inserted at each UTF-8 continuation byte (they are never
letters, so any row copies them). One Arrow ``take`` then does the substitution for a whole
batch. :meth:`Vigenere.encrypt_array` runs directly on an Arrow string array's buffers
(no Python strings at all: the ``encrypt_text`` stage's path); ``encrypt_batch`` takes a
list of ``str`` through the same path. ``latin`` works on UTF-32 code points.
See ``benchmarks/cipher_throughput.py``.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Sequence
from typing import Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from privatize.errors import KeyMaterialError
from privatize.keys import KeyMaterial, alphabet_chars

log = logging.getLogger(__name__)

OBFUSCATION_WARNING = ("the whole-text cipher is obfuscation, not confidentiality: one known plaintext "
                       "reveals the key")
_warned = False


def warn_obfuscation(*, every_time: bool = False) -> None:
    """Warn (``warnings.warn`` and the log) that the cipher is weak: once per process, or
    on every call with ``every_time`` (the stage warns at each setup, so each run says so)."""
    global _warned
    if every_time or not _warned:
        _warned = True
        warnings.warn(OBFUSCATION_WARNING, UserWarning, stacklevel=3)
        log.warning(OBFUSCATION_WARNING)


# ---- the case-blind reserved-token grammar -----------------------------------------------

_B64_MIN = 16  # an AES token's Base64 has at least 22 characters; 16 keeps "x_[i]" out


def _grammar(letters: str) -> str:
    """The reserved-token regex with ``letters`` as the letter class (see module doc)."""
    L = letters
    entity = rf"(?<![{L}0-9])[{L}][{L}0-9]*_\[[{L}0-9+/_\-]{{{_B64_MIN},}}={{0,2}}\]"
    tag = rf"<[{L}][{L}0-9_]*>"
    return f"{entity}|{tag}"


_RESERVED_52_BYTES = re.compile(_grammar("A-Za-z").encode("ascii"))
_RESERVED_STR: dict[str, re.Pattern[str]] = {}


def _reserved_str_re(alphabet: str) -> re.Pattern[str]:
    if alphabet not in _RESERVED_STR:
        letters = "A-Za-z" if alphabet == "letters52" else "".join(
            re.escape(c) for c in alphabet_chars(alphabet))
        _RESERVED_STR[alphabet] = re.compile(_grammar(letters))
    return _RESERVED_STR[alphabet]


def reserved_spans(text: str, alphabet: str = "letters52") -> list[tuple[int, int]]:
    """Code-point spans the cipher copies unchanged in ``text`` (the case-blind grammar)."""
    if "<" not in text and "_[" not in text:
        return []
    return [m.span() for m in _reserved_str_re(alphabet).finditer(text)]


# ---- the cipher ------------------------------------------------------------------------

KeyLike = Union[KeyMaterial, tuple[str, str], "Vigenere"]

_TILE_MAX = 1 << 20  # positions per tile slice (rounded to a multiple of the key length)


class Vigenere:
    """The cipher under one key. Build it once and reuse it: the tables cost about a
    millisecond. Refuses to be pickled (its tables are the key)."""

    def __init__(self, letters: str, alphabet: str = "letters52"):
        alpha = alphabet_chars(alphabet)
        index = {c: i for i, c in enumerate(alpha)}
        if not letters or any(c not in index for c in letters):
            raise KeyMaterialError(f"vigenere key must be non-empty letters of the {alphabet} alphabet")
        a = len(alpha)
        shifts = np.array([(index[c] + 1) % a for c in letters], dtype=np.int64)
        if not shifts.any():
            raise KeyMaterialError("identity key (every shift is 0) refused")
        self.alphabet = alphabet
        self.key_length = len(letters)
        self._a = a
        self._shifts = shifts
        self._alpha = np.array([ord(c) for c in alpha], dtype=np.uint32)
        self._utf8 = alphabet == "letters52"
        # one table row per shift; the column is a byte (letters52) or a code point < width
        self._width = 256 if self._utf8 else int(self._alpha.max()) + 1
        self._tables: dict[int, pa.Array] = {}
        self._tiles: dict[int, np.ndarray] = {}
        self._tile_len = (_TILE_MAX // len(letters) + 1) * len(letters)

    @classmethod
    def from_key(cls, km: KeyMaterial) -> Vigenere:
        if km.kind != "vigenere":
            raise KeyMaterialError(f"key {km.key_id} is {km.kind}; the whole-text cipher needs a vigenere key")
        return cls(km.letters, km.alphabet or "letters52")

    def __repr__(self) -> str:
        return f"Vigenere(alphabet={self.alphabet!r}, key_length={self.key_length})"

    def rotated(self, k: int) -> Vigenere:
        """This cipher with its key started ``k`` positions in: text that continues a record
        ``k`` code points (mod the key length) after its start encrypts with it as the record's
        continuation (how a document too big for one array is ciphered in pieces)."""
        k %= self.key_length
        if k == 0:
            return self
        twin = object.__new__(Vigenere)  # (copy.copy would go through the refused __reduce__)
        twin.__dict__.update(self.__dict__)
        twin._shifts = np.roll(self._shifts, -k)
        twin._tiles = {}  # tiles follow the shifts; tables (per sign) do not
        return twin

    def __reduce__(self):
        raise TypeError("Vigenere is not picklable (its tables are the key): build it in setup() on the worker")

    # -- public API --------------------------------------------------------------------
    def encrypt(self, text: str) -> str:
        return self._one(text, +1)

    def decrypt(self, text: str) -> str:
        return self._one(text, -1)

    def encrypt_batch(self, texts: Sequence[str | None]) -> list[str | None]:
        """Many records in one pass (positions restart at each record; ``None`` stays)."""
        return self._batch(texts, +1)

    def decrypt_batch(self, texts: Sequence[str | None]) -> list[str | None]:
        return self._batch(texts, -1)

    encrypt_many = encrypt_batch
    decrypt_many = decrypt_batch

    def encrypt_array(self, arr: pa.Array | pa.ChunkedArray) -> pa.Array:
        """An Arrow string array, record by record, without Python strings (nulls stay)."""
        return self._array(arr, +1)

    def decrypt_array(self, arr: pa.Array | pa.ChunkedArray) -> pa.Array:
        return self._array(arr, -1)

    # -- tables ------------------------------------------------------------------------
    def _table(self, sign: int) -> pa.Array:
        """Flattened (A, width) table as an Arrow array: row = shift, column = byte or
        code point; row 0 is the identity (copies reserved tokens)."""
        t = self._tables.get(sign)
        if t is not None:
            return t
        a, width = self._a, self._width
        pos = np.full(width, -1, dtype=np.int64)
        pos[self._alpha] = np.arange(a)
        letters = pos >= 0
        rows = np.tile(np.arange(width, dtype=np.uint32), (a, 1))
        new_pos = (pos[letters][None, :] + sign * np.arange(a)[:, None]) % a
        rows[:, letters] = self._alpha[new_pos]
        t = pa.array(rows.reshape(-1).astype(np.uint8 if self._utf8 else np.uint16))
        self._tables[sign] = t
        return t

    def _tile(self, n: int) -> np.ndarray:
        """Row offsets (shift * width) for positions 0..n-1 (n <= the tile length)."""
        L = self.key_length
        cur = self._tiles.get(0)
        if cur is None or len(cur) < n:
            size = min(self._tile_len, max(n, 1 << 14) // L * L + L)
            dtype = np.uint16 if self._utf8 else np.uint32
            cur = np.tile((self._shifts * self._width).astype(dtype), size // L)
            self._tiles[0] = cur
        return cur

    def _shift_rows(self, starts: np.ndarray, lengths: np.ndarray, total: int) -> np.ndarray:
        """Per position (records laid end to end from ``starts``), the row offset of the
        shift for its position within its record."""
        dtype = np.uint16 if self._utf8 else np.uint32
        out = np.empty(total, dtype=dtype)
        n_rec = len(starts)
        if n_rec == 0 or total == 0:
            return out
        maxlen = int(lengths.max())
        if maxlen <= self._tile_len and total < 256 * n_rec:
            # many short records: positions for the whole batch at once
            tile = self._tile(maxlen)
            within = np.arange(total, dtype=np.int64) - np.repeat(starts - starts[0], lengths)
            return tile.take(within)
        tile = self._tile(min(maxlen, self._tile_len))
        step = len(tile) // self.key_length * self.key_length  # chunks keep the key's alignment
        base = int(starts[0])
        for st, ln in zip((starts - base).tolist(), lengths.tolist()):
            for c in range(0, ln, step):
                k = min(step, ln - c)
                out[st + c:st + c + k] = tile[:k]
        return out

    # -- letters52: UTF-8 bytes --------------------------------------------------------
    def _utf8_core(self, data: np.ndarray, rel: np.ndarray, sign: int, ascii_only: bool = False) -> pa.Buffer:
        """Cipher over the UTF-8 bytes ``data`` of records delimited by ``rel`` (byte
        offsets, length n_rec + 1, starting at 0). Returns the output bytes."""
        n = len(data)
        starts, ends = rel[:-1], rel[1:]
        cont = None
        if not ascii_only:
            high = np.flatnonzero(data >= 0x80)
            if len(high):
                cont = high[(data[high] & 0xC0) == 0x80]  # continuation bytes: not positions
                if not len(cont):
                    cont = None
        if cont is None:
            rows = self._shift_rows(starts, ends - starts, n)
        else:
            lstarts = starts - np.searchsorted(cont, starts)
            lends = ends - np.searchsorted(cont, ends)
            lead_rows = self._shift_rows(lstarts, lends - lstarts, n - len(cont))
            # expand to byte positions: row 0 (identity) at the continuation bytes
            # (a boolean scatter; measured faster than np.insert)
            keep = np.empty(n, dtype=bool)
            keep.fill(True)
            keep[cont] = False
            rows = np.empty(n, dtype=lead_rows.dtype)
            rows[keep] = lead_rows
            rows[cont] = 0
        self._zero_reserved_utf8(data, rel, rows)
        rows += data
        return pc.take(self._table(sign), pa.array(rows, type=pa.from_numpy_dtype(rows.dtype))).buffers()[1]

    @staticmethod
    def _zero_reserved_utf8(data: np.ndarray, rel: np.ndarray, rows: np.ndarray) -> None:
        """Row 0 (identity) for the bytes of reserved tokens."""
        lt = np.flatnonzero(data == 0x3C)  # '<'
        br = np.flatnonzero(data == 0x5B)  # '['
        if len(br):
            br = br[br > 0]
            br = br[data[br - 1] == 0x5F]  # '_['
        if not len(lt) and not len(br):
            return
        hits = np.concatenate([lt, br])
        recs = np.unique(np.searchsorted(rel, hits, side="right") - 1)
        for r in recs.tolist():
            s, e = int(rel[r]), int(rel[r + 1])
            chunk = data[s:e].tobytes()
            for m in _RESERVED_52_BYTES.finditer(chunk):
                rows[s + m.start():s + m.end()] = 0

    # -- latin: UTF-32 code points -----------------------------------------------------
    def _utf32_core(self, text: str, starts: np.ndarray, lengths: np.ndarray, sign: int,
                    pieces: Sequence[str] | None = None) -> str:
        cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        rows = self._shift_rows(starts, lengths, len(cp))
        if "<" in text or "_[" in text:
            rx = _reserved_str_re(self.alphabet)
            for i, piece in enumerate(pieces if pieces is not None else [text]):
                if "<" in piece or "_[" in piece:
                    base = int(starts[i])
                    for m in rx.finditer(piece):
                        rows[base + m.start():base + m.end()] = 0
        width = self._width
        idx = rows + np.minimum(cp, width - 1)
        sub = np.frombuffer(pc.take(self._table(sign), pa.array(idx)).buffers()[1], dtype=np.uint16)
        out = np.where(cp < width, sub, cp).astype(np.uint32)
        return out.tobytes().decode("utf-32-le")

    # -- entry points ------------------------------------------------------------------
    def _one(self, text: str, sign: int) -> str:
        if not text:
            return text
        if self._utf8:
            raw = text.encode("utf-8")
            data = np.frombuffer(raw, dtype=np.uint8)
            rel = np.array([0, len(raw)], dtype=np.int64)
            return self._utf8_core(data, rel, sign, ascii_only=text.isascii()).to_pybytes().decode("utf-8")
        return self._utf32_core(text, np.zeros(1, np.int64), np.array([len(text)], np.int64), sign)

    def _batch(self, texts: Sequence[str | None], sign: int) -> list[str | None]:
        if self._utf8:
            return self._array(pa.array(texts, type=pa.string()), sign).to_pylist()
        present = [t for t in texts if t]
        if not present:
            return list(texts)
        lengths = np.array([len(t) for t in present], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        out = self._utf32_core("".join(present), starts, lengths, sign, present)
        res, it = [], iter(zip(starts.tolist(), lengths.tolist()))
        for t in texts:
            if t:
                s, ln = next(it)
                res.append(out[s:s + ln])
            else:
                res.append(t)
        return res

    def _array(self, arr: pa.Array | pa.ChunkedArray, sign: int) -> pa.Array:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
        if not pa.types.is_string(arr.type):
            arr = arr.cast(pa.string())
        if not self._utf8:
            return pa.array(self._batch(arr.to_pylist(), sign), type=pa.string())
        if arr.offset:
            arr = pa.concat_arrays([arr])  # normalise: offset 0, validity bitmap aligned
        n_rec = len(arr)
        if n_rec == 0:
            return arr
        validity, offsets_buf, data_buf = arr.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n_rec + 1)
        o0, o1 = int(offsets[0]), int(offsets[-1])
        if o1 == o0:
            return arr
        data = np.frombuffer(data_buf, dtype=np.uint8, count=o1 - o0, offset=o0)
        rel = offsets.astype(np.int64) - o0
        out = self._utf8_core(data, rel, sign)
        new_offsets = offsets_buf if o0 == 0 else pa.py_buffer((rel.astype(np.int32)).tobytes())
        return pa.StringArray.from_buffers(n_rec, new_offsets, out, validity, arr.null_count)


# ---- module-level functions ------------------------------------------------------------

def _cipher(key: KeyLike) -> Vigenere:
    if isinstance(key, Vigenere):
        return key
    if isinstance(key, KeyMaterial):
        return Vigenere.from_key(key)
    if isinstance(key, tuple) and len(key) == 2:
        return Vigenere(key[0], key[1])
    raise TypeError("key must be a vigenere KeyMaterial, a (letters, alphabet) pair or a Vigenere")


def encrypt(text: str, key: KeyLike) -> str:
    """Encrypt one record. ``key``: a vigenere :class:`KeyMaterial`, ``(letters,
    alphabet)`` or a :class:`Vigenere` (build one and reuse it for many calls)."""
    warn_obfuscation()
    return _cipher(key).encrypt(text)


def decrypt(text: str, key: KeyLike) -> str:
    return _cipher(key).decrypt(text)


def encrypt_batch(texts: Sequence[str | None], key: KeyLike) -> list[str | None]:
    """Encrypt many records at once (each from position 0); amortises per-call cost."""
    warn_obfuscation()
    return _cipher(key).encrypt_batch(texts)


def decrypt_batch(texts: Sequence[str | None], key: KeyLike) -> list[str | None]:
    return _cipher(key).decrypt_batch(texts)
