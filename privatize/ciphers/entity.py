"""Deterministic entity tokens (the SoE paper's format): ``Person_[<base64>]``.

* **AES-SIV** (the default; RFC 5297, AES-256-SIV from a 64-byte key): deterministic and
  authenticated. The entity type (``PERSON``) is bound as associated data, so a token
  moved to another type, edited, or invented by a model fails to decrypt instead of
  decrypting to garbage. The token's Base64 is ``V || C`` (synthetic IV, then
  ciphertext), as RFC 5297 writes it. The primitive is OpenSSL's AES-SIV through
  ``cryptography`` (one key schedule per key; ``benchmarks/aes_siv_tokens.py`` measures
  it against bare pycryptodome ``AES.MODE_SIV``, whose output is identical: a test checks
  both against RFC 5297 A.1 and each other).
* **AES-ECB** with PKCS7 padding (32-byte key), only to reproduce the paper: it leaks
  equality and block patterns and warns so when chosen. The type is not bound.

Format
------
``<Prefix>_[<Base64>]``. Base64 is the **standard** alphabet (``+``, ``/``) with ``=``
padding, as in the paper. The prefix is the Presidio type in CamelCase
(``PERSON`` -> ``Person``, ``PHONE_NUMBER`` -> ``PhoneNumber``, ``US_SSN`` -> ``UsSsn``; the
table in :mod:`privatize.ciphers.tokens`, otherwise CamelCase of the type); a type whose
prefix would not map back to it (``X_1``) is refused, so prefix and type always round-trip.

Decryption
----------
:func:`decrypt_text` scans any text for tokens (:data:`TOKEN_RE`) and reports each as
``ok``, ``revised`` (the Base64 length was not a multiple of 4; ``=`` padding was added,
as the paper's fallback does, and it then decrypted) or ``invalid`` (bad Base64, Base64
that does not re-encode to exactly itself, failed authentication, bad PKCS7 padding). An
invalid token is left in the text exactly as it was, never guessed. A token glued to a
preceding word (``JohnPerson_[...]``, from a span inside a word) is found too: with SIV
the prefix that authenticates wins (``Person``); ECB binds no type, so it takes the whole
capitalised run as the prefix, as the paper's format does.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from Crypto.Cipher import AES
from Crypto.Util.Padding import pad, unpad
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from privatize.ciphers.tokens import ENTITY_PREFIX, entity_prefix, entity_type_of
from privatize.errors import KeyMaterialError
from privatize.keys import KeyMaterial

log = logging.getLogger(__name__)

ECB_WARNING = ("AES-ECB entity tokens leak equality and block patterns; use aes-siv (ECB exists only to "
               "reproduce the SoE paper)")

# An entity token anywhere in a text: a CamelCase prefix, then ``_[``, Base64 (standard
# or, to report it as invalid rather than miss it, URL-safe characters) with optional
# ``=`` padding, then ``]``. No look-behind: a token glued to a preceding word is found
# (see decrypt_text for how its prefix is chosen).
TOKEN_RE = re.compile(r"([A-Z][A-Za-z0-9]*)_\[([A-Za-z0-9+/_-]+={0,2})\]")

_KNOWN_PREFIXES = frozenset(ENTITY_PREFIX.values())


def siv_encrypt(key: bytes, plaintext: bytes, associated_data: Sequence[bytes]) -> bytes:
    """RFC 5297 S2V + CTR: returns ``V || C``. ``associated_data`` is the list of AD parts
    (each bound separately, in order)."""
    return AESSIV(key).encrypt(plaintext, list(associated_data))


def siv_decrypt(key: bytes, data: bytes, associated_data: Sequence[bytes]) -> bytes:
    """Inverse of :func:`siv_encrypt`; raises ``ValueError`` when authentication fails."""
    try:
        return AESSIV(key).decrypt(data, list(associated_data))
    except InvalidTag:
        raise ValueError("SIV authentication failed") from None


@dataclass
class DecryptReport:
    """Counts, and per token ``start``, ``end`` (in the input text), ``entity_type``,
    ``status`` and the ``token`` itself (ciphertext, safe to log)."""

    ok: int = 0
    revised: int = 0
    invalid: int = 0
    tokens: list[dict] = field(default_factory=list)

    def add(self, other: DecryptReport) -> None:
        self.ok += other.ok
        self.revised += other.revised
        self.invalid += other.invalid
        self.tokens.extend(other.tokens)

    @property
    def total(self) -> int:
        return self.ok + self.revised + self.invalid

    def summary(self) -> dict[str, Any]:
        """The SoE paper's Table 5 statistics: unique cipher tokens, unique failures,
        total tokens, failure ratio (failures = invalid tokens)."""
        unique = {t["token"] for t in self.tokens}
        failures = {t["token"] for t in self.tokens if t["status"] == "invalid"}
        return {"ok": self.ok, "revised": self.revised, "invalid": self.invalid, "total_tokens": self.total,
                "unique_tokens": len(unique), "unique_failures": len(failures),
                "failure_ratio": self.invalid / self.total if self.total else 0.0}


_PREFIX_OK: dict[str, str] = {}


def token_prefix(entity_type: str) -> str:
    """The token prefix of a Presidio type; refuses types whose prefix is ambiguous."""
    p = _PREFIX_OK.get(entity_type)
    if p is None:
        try:
            p = entity_prefix(entity_type)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        if entity_type_of(p) != entity_type:
            raise ValueError(f"entity type {entity_type!r} has no unambiguous token prefix "
                             f"({p!r} reads back as {entity_type_of(p)!r})")
        if len(_PREFIX_OK) < 10_000:  # decrypted text may bring any number of made-up types
            _PREFIX_OK[entity_type] = p
    return p


def _canonical_type(prefix: str) -> str | None:
    """The type whose token prefix is exactly ``prefix``, or None."""
    etype = entity_type_of(prefix)
    try:
        return etype if token_prefix(etype) == prefix else None
    except ValueError:
        return None


class EntityCipher:
    """Entity tokens under one AES key (``aes-siv`` or ``aes-ecb``). Refuses to be
    pickled: build it in a stage's ``setup()``."""

    def __init__(self, km: KeyMaterial):
        if not isinstance(km, KeyMaterial) or km.kind not in ("aes-siv", "aes-ecb"):
            what = km.kind if isinstance(km, KeyMaterial) else type(km).__name__
            raise KeyMaterialError(f"entity tokens need an aes-siv or aes-ecb key, not {what}")
        self.mode = km.kind
        self.key_id = km.key_id
        if self.mode == "aes-siv":
            self._siv = AESSIV(km.secret)
        else:
            warnings.warn(ECB_WARNING, UserWarning, stacklevel=2)
            log.warning(ECB_WARNING)
            self._ecb = AES.new(km.secret, AES.MODE_ECB)
        self._cache: dict[tuple[str, str], str] = {}

    def __repr__(self) -> str:
        return f"EntityCipher(mode={self.mode!r}, key_id={self.key_id!r})"

    def __reduce__(self):
        raise TypeError("EntityCipher is not picklable (it holds the key): build it in setup() on the worker")

    # -- encryption --------------------------------------------------------------------
    def token(self, entity: str, entity_type: str) -> str:
        """The token of ``entity``: the same entity and type always give the same token."""
        k = (entity, entity_type)
        tok = self._cache.get(k)
        if tok is None:
            tok = self._token_uncached(entity, entity_type)
            if len(self._cache) < 100_000:
                self._cache[k] = tok
        return tok

    def _token_uncached(self, entity: str, entity_type: str) -> str:
        prefix = token_prefix(entity_type)
        pt = entity.encode("utf-8")
        if self.mode == "aes-siv":
            raw = self._siv.encrypt(pt, [entity_type.encode("utf-8")])
        else:
            raw = self._ecb.encrypt(pad(pt, 16))
        return f"{prefix}_[{base64.b64encode(raw).decode('ascii')}]"

    def encrypt_spans(self, text: str, spans: Iterable[Mapping[str, Any]]) -> str:
        """Replace each span (``start``, ``end``, ``entity_type``; code-point offsets,
        non-overlapping, non-empty) by its token. Raises ``ValueError`` on a bad span."""
        out, pos = [], 0
        try:
            norm = sorted((int(sp["start"]), int(sp["end"]), str(sp["entity_type"])) for sp in spans)
        except (KeyError, TypeError, ValueError):
            raise ValueError("a span needs integer start and end and an entity_type") from None
        for s, e, etype in norm:
            if not 0 <= s < e <= len(text):
                raise ValueError(f"span {s}..{e} is empty or outside the text (length {len(text)})")
            if s < pos:
                raise ValueError(f"span {s}..{e} overlaps the previous span")
            out.append(text[pos:s])
            out.append(self.token(text[s:e], etype))
            pos = e
        out.append(text[pos:])
        return "".join(out)

    # -- decryption --------------------------------------------------------------------
    def _open(self, b64: str, entity_type: str) -> tuple[str | None, str]:
        status = "ok"
        if len(b64) % 4:
            b64 += "=" * (-len(b64) % 4)
            status = "revised"
        try:
            raw = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            return None, "invalid"
        if base64.b64encode(raw).decode("ascii") != b64:  # non-canonical: padding bits set
            return None, "invalid"
        try:
            if self.mode == "aes-siv":
                if len(raw) < 16:
                    return None, "invalid"
                pt = self._siv.decrypt(raw, [entity_type.encode("utf-8")])
            else:
                if not raw or len(raw) % 16:
                    return None, "invalid"
                pt = unpad(self._ecb.decrypt(raw), 16)
            return pt.decode("utf-8"), status
        except (ValueError, UnicodeDecodeError, InvalidTag):
            return None, "invalid"

    def _prefix_starts(self, group: str) -> list[int]:
        """Where the prefix may start inside ``group``. SIV: the whole group, then each
        capitalised suffix (a word glued before the token); authentication decides, so
        trying them is safe. ECB authenticates nothing: the whole group, as the paper."""
        if self.mode != "aes-siv":
            return [0]
        starts = [i for i, c in enumerate(group) if "A" <= c <= "Z"]
        known = [i for i in starts[1:] if group[i:] in _KNOWN_PREFIXES]  # likelier first
        return [0] + known + [i for i in starts[1:] if i not in known]

    def decrypt_text(self, text: str) -> tuple[str, DecryptReport]:
        """Decrypt every token in ``text``; invalid tokens stay as they are."""
        report = DecryptReport()
        out, pos = [], 0
        for m in TOKEN_RE.finditer(text):
            group, b64 = m.group(1), m.group(2)
            starts = self._prefix_starts(group)
            found = None
            for i in starts:
                etype = _canonical_type(group[i:])
                if etype is None:  # not a prefix this module writes (e.g. "PErson")
                    continue
                plain, status = self._open(b64, etype)
                if plain is not None:
                    found = (i, etype, plain, status)
                    break
            if found is None:
                i = starts[0]
                etype, plain, status = entity_type_of(group[i:]), None, "invalid"
            else:
                i, etype, plain, status = found
            start = m.start() + i
            setattr(report, status, getattr(report, status) + 1)
            report.tokens.append({"start": start, "end": m.end(), "entity_type": etype, "status": status,
                                  "token": text[start:m.end()]})
            out.append(text[pos:start])
            out.append(plain if plain is not None else text[start:m.end()])
            pos = m.end()
        out.append(text[pos:])
        return "".join(out), report


# ---- module-level functions ------------------------------------------------------------

CipherLike = Union[KeyMaterial, EntityCipher]


def _cipher(key: CipherLike) -> EntityCipher:
    return key if isinstance(key, EntityCipher) else EntityCipher(key)


def encrypt_entity(key: CipherLike, text: str, entity_type: str) -> str:
    """The token of one entity (build an :class:`EntityCipher` once for many)."""
    return _cipher(key).token(text, entity_type)


def encrypt_spans(key: CipherLike, text: str, spans: Iterable[Mapping[str, Any]]) -> str:
    """``text`` with each span (``start``, ``end``, ``entity_type``) replaced by its token."""
    return _cipher(key).encrypt_spans(text, spans)


def decrypt_text(key: CipherLike, text: str) -> tuple[str, DecryptReport]:
    """``(plaintext, report)``: every token in ``text`` decrypted or reported invalid."""
    return _cipher(key).decrypt_text(text)
