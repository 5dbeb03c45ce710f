"""Deterministic entity tokens (the SoE paper's format): ``Person_[<base64>]``.

* **AES-SIV** (default, RFC 5297; OpenSSL's implementation through ``cryptography``): deterministic and authenticated; the entity type is
  bound as associated data, so a token moved to another type, or one a model invented,
  fails to decrypt instead of decrypting to garbage. The token's Base64 (standard
  alphabet, padded) is ``V || C`` (synthetic IV, then ciphertext), as RFC 5297 writes it.
* **AES-ECB** with PKCS7 padding, only to reproduce the paper: it leaks equality and
  block patterns, and says so with a warning.

``decrypt_text`` scans any text for tokens and reports each as ``ok``, ``revised``
(Base64 padding was missing and was repaired, as the paper's fallback does) or
``invalid`` (bad Base64, Base64 that does not re-encode to exactly itself, failed
authentication, bad PKCS7 padding): an invalid token is left in the text as it was,
never guessed.
"""

from __future__ import annotations

import base64
import binascii
import logging
import warnings
from dataclasses import dataclass, field

from Crypto.Cipher import AES
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from Crypto.Util.Padding import pad, unpad

from privatize.ciphers.tokens import ENTITY_TOKEN_RE, entity_prefix, entity_type_of
from privatize.errors import KeyMaterialError
from privatize.keys import KeyMaterial

log = logging.getLogger(__name__)

ECB_WARNING = ("AES-ECB entity tokens leak equality and block patterns; use aes-siv (ECB exists only to "
               "reproduce the SoE paper)")


def siv_encrypt(key: bytes, plaintext: bytes, associated_data: list[bytes]) -> bytes:
    """RFC 5297 S2V + CTR: returns ``V || C``. ``associated_data`` is the list of AD parts."""
    return AESSIV(key).encrypt(plaintext, associated_data)


def siv_decrypt(key: bytes, data: bytes, associated_data: list[bytes]) -> bytes:
    """Inverse of :func:`siv_encrypt`; raises ``ValueError`` when authentication fails."""
    try:
        return AESSIV(key).decrypt(data, associated_data)
    except InvalidTag:
        raise ValueError("SIV authentication failed") from None


@dataclass
class DecryptReport:
    ok: int = 0
    revised: int = 0
    invalid: int = 0
    tokens: list[dict] = field(default_factory=list)  # per token: start, end, entity_type, status

    def add(self, other: "DecryptReport") -> None:
        self.ok += other.ok
        self.revised += other.revised
        self.invalid += other.invalid
        self.tokens.extend(other.tokens)


class EntityCipher:
    """Entity tokens under one AES key (``aes-siv`` or ``aes-ecb``)."""

    def __init__(self, km: KeyMaterial):
        if km.kind not in ("aes-siv", "aes-ecb"):
            raise KeyMaterialError(f"key {km.key_id} is {km.kind}; entity tokens need an aes-siv or aes-ecb key")
        self.mode = km.kind
        self._key = km.secret
        self.key_id = km.key_id
        if self.mode == "aes-siv":
            self._siv = AESSIV(self._key)  # OpenSSL's AES-SIV: one key schedule for every token
        if self.mode == "aes-ecb":
            warnings.warn(ECB_WARNING, UserWarning, stacklevel=2)
            self._ecb = AES.new(self._key, AES.MODE_ECB)
        self._cache: dict[tuple[str, str], str] = {}

    def __repr__(self) -> str:
        return f"EntityCipher(mode={self.mode!r}, key_id={self.key_id!r})"

    def token(self, entity: str, entity_type: str) -> str:
        """The same entity and type always give the same token."""
        k = (entity, entity_type)
        tok = self._cache.get(k)
        if tok is None:
            tok = self._token_uncached(entity, entity_type)
            if len(self._cache) < 100_000:
                self._cache[k] = tok
        return tok

    def _token_uncached(self, entity: str, entity_type: str) -> str:
        pt = entity.encode("utf-8")
        if self.mode == "aes-siv":
            raw = self._siv.encrypt(pt, [entity_type.encode("utf-8")])
        else:
            raw = self._ecb.encrypt(pad(pt, 16))
        return f"{entity_prefix(entity_type)}_[{base64.b64encode(raw).decode('ascii')}]"

    def encrypt_spans(self, text: str, spans: list[dict]) -> str:
        """Replace each span (``start``, ``end``, ``entity_type``; non-overlapping) by its token."""
        out, pos = [], 0
        for sp in sorted(spans, key=lambda s: (s["start"], s["end"])):
            s, e = int(sp["start"]), int(sp["end"])
            if not 0 <= s < e <= len(text):
                raise ValueError(f"span {s}..{e} outside the text (length {len(text)})")
            if s < pos:
                raise ValueError(f"span {s}..{e} overlaps the previous span")
            out.append(text[pos:s])
            out.append(self.token(text[s:e], sp["entity_type"]))
            pos = e
        out.append(text[pos:])
        return "".join(out)

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

    def decrypt_text(self, text: str) -> tuple[str, DecryptReport]:
        report = DecryptReport()
        out, pos = [], 0
        for m in ENTITY_TOKEN_RE.finditer(text):
            etype = entity_type_of(m.group(1))
            plain, status = self._open(m.group(2), etype)
            setattr(report, status, getattr(report, status) + 1)
            report.tokens.append({"start": m.start(), "end": m.end(), "entity_type": etype, "status": status})
            out.append(text[pos:m.start()])
            out.append(plain if plain is not None else m.group(0))
            pos = m.end()
        out.append(text[pos:])
        return "".join(out), report
