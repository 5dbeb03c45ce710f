"""Key files, key material and key references.

A key file is JSON, mode 0600, written atomically (format in docs/KEYS.md)::

    {"format": "privatize-key/1", "kind": "aes-siv", "key_id": "3f0c…", "created": "2026-…Z",
     "alphabet": null, "alphabet_sha256": null, "material": "<base64>"}

Kinds: ``vigenere`` (the whole-text cipher; ``material`` is the key letters, with the
alphabet named and its SHA-256 recorded), ``aes-siv`` (64 bytes: AES-256-SIV),
``aes-ecb`` (32 bytes, for reproducing the SoE paper only), ``hmac`` (32 bytes, for
``individual_id`` pseudonyms), ``api-key`` (an LLM provider's API key, imported, never
generated: 8 to 4,096 visible ASCII characters; synthesis sends it as a bearer token).

Specs hold key *references* (``file:<path>``, ``keystore:<id>``); a :class:`KeyResolver`
turns one into :class:`KeyMaterial` inside a stage's ``setup()``, on the worker, so key
bytes never travel as task arguments: a stage object holds only the reference until
``setup()`` runs, and ``KeyMaterial`` (like the ciphers built from it) refuses to be
pickled, so a mistake fails loudly instead of shipping a key. ``KeyMaterial`` never
prints its secret; error messages name the file and the field, never the bytes.
The ``keystore:`` backend is pluggable (:func:`register_keystore`): the service installs
its own on workers.
"""

from __future__ import annotations

import base64
import datetime as _dt
import functools
import hashlib
import json
import os
import re
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path

from privatize.errors import KeyMaterialError

FORMAT = "privatize-key/1"
_KEY_ID = re.compile(r"[0-9a-f]{16}")
KINDS = ("vigenere", "aes-siv", "aes-ecb", "hmac", "api-key")
_BYTES = {"aes-siv": 64, "aes-ecb": 32, "hmac": 32}
DEFAULT_VIGENERE_LENGTH = 100
LETTER_KINDS = frozenset({"vigenere"})
"""Kinds whose key is letters of an alphabet, of a length the user chooses."""


@functools.lru_cache(maxsize=None)
def alphabet_chars(name: str) -> str:
    """The cipher alphabets: ``letters52`` (A..Z then a..z, the paper's) or ``latin``
    (every code point up to U+024F whose Unicode category is a letter, in code point
    order)."""
    import unicodedata

    if name == "letters52":
        return "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    if name == "latin":
        return "".join(chr(c) for c in range(0x250) if unicodedata.category(chr(c)).startswith("L"))
    raise KeyMaterialError(f"unknown alphabet {name!r} (letters52 or latin)")


def _sha256(s: str) -> str:
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


class KeyMaterial:
    """Key bytes with their kind and id. ``repr``/``str`` show kind and id only."""

    __slots__ = ("kind", "key_id", "created", "alphabet", "_secret")

    def __init__(self, kind: str, secret: bytes, *, key_id: str | None = None, created: str | None = None,
                 alphabet: str | None = None):
        if kind not in KINDS:
            raise KeyMaterialError(f"unknown key kind {kind!r} (one of {', '.join(KINDS)})")
        self.kind = kind
        self._secret = bytes(secret)
        self.key_id = key_id or secrets.token_hex(8)
        self.created = created or _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.alphabet = (alphabet or "letters52") if kind == "vigenere" else None
        self._check()

    @property
    def secret(self) -> bytes:
        return self._secret

    @property
    def letters(self) -> str:
        """The Vigenère key as letters of its alphabet."""
        if self.kind != "vigenere":
            raise KeyMaterialError(f"key {self.key_id} is {self.kind}, not a vigenere key")
        return self._secret.decode("utf-8")

    def _check(self) -> None:
        if self.kind == "vigenere":
            alpha = alphabet_chars(self.alphabet or "letters52")
            letters = self._secret.decode("utf-8", "replace")
            if not letters:
                raise KeyMaterialError(f"key {self.key_id}: empty vigenere key")
            if any(c not in alpha for c in letters):
                raise KeyMaterialError(f"key {self.key_id}: vigenere key has characters outside the "
                                       f"{self.alphabet or 'letters52'} alphabet")
            if set(letters) == {alpha[-1]}:
                raise KeyMaterialError(f"key {self.key_id}: identity key (every shift is 0) refused")
        elif self.kind == "api-key":
            if not 8 <= len(self._secret) <= 4096 or any(b < 0x21 or b > 0x7E for b in self._secret):
                raise KeyMaterialError(f"key {self.key_id}: an api-key key is 8 to 4096 visible ASCII characters "
                                       "(no spaces or line breaks)")
        elif len(self._secret) != _BYTES[self.kind]:
            raise KeyMaterialError(f"key {self.key_id}: {self.kind} key must be {_BYTES[self.kind]} bytes")

    def __repr__(self) -> str:
        return f"KeyMaterial(kind={self.kind!r}, key_id={self.key_id!r})"

    __str__ = __repr__

    def __reduce__(self):
        raise TypeError("KeyMaterial is not picklable: resolve key references inside setup() on the worker")

    def to_json(self) -> dict:
        alpha = self.alphabet if self.kind == "vigenere" else None
        return {"format": FORMAT, "kind": self.kind, "key_id": self.key_id, "created": self.created,
                "alphabet": alpha, "alphabet_sha256": _sha256(alphabet_chars(alpha)) if alpha else None,
                "material": self._secret.decode("utf-8") if self.kind == "vigenere"
                else base64.b64encode(self._secret).decode("ascii")}


def new_key(kind: str, *, length: int | None = None, alphabet: str = "letters52") -> KeyMaterial:
    """Fresh key material from the operating system's CSPRNG."""
    if kind == "vigenere":
        n = DEFAULT_VIGENERE_LENGTH if length is None else length
        if n < 1:
            raise KeyMaterialError("--length must be at least 1")
        alpha = alphabet_chars(alphabet)
        while True:
            letters = "".join(secrets.choice(alpha) for _ in range(n))
            if set(letters) != {alpha[-1]}:  # never the identity key
                return KeyMaterial(kind, letters.encode("utf-8"), alphabet=alphabet)
    if kind == "api-key":
        raise KeyMaterialError("api-key keys are issued by the LLM provider: import one ('keys import --kind "
                               "api-key' or POST /v1/keys with its material)")
    if kind not in _BYTES:
        raise KeyMaterialError(f"unknown key kind {kind!r} (one of {', '.join(KINDS)})")
    if length is not None:
        raise KeyMaterialError(f"--length applies to vigenere keys only ({kind} keys are {_BYTES[kind]} bytes)")
    return KeyMaterial(kind, secrets.token_bytes(_BYTES[kind]))


def import_key(kind: str, value: str, alphabet: str = "letters52") -> KeyMaterial:
    """Key material from a value the user holds (vigenere: the key letters; api-key: the
    provider's key)."""
    if kind == "api-key":
        return KeyMaterial(kind, value.encode("utf-8"))
    if kind != "vigenere":
        raise KeyMaterialError("only vigenere and api-key keys can be imported (generate AES and HMAC keys with "
                               "'keys new')")
    return KeyMaterial(kind, value.encode("utf-8"), alphabet=alphabet)


def write_key_file(km: KeyMaterial, path: str | os.PathLike) -> Path:
    """Write atomically with mode 0600; refuses to replace an existing file."""
    p = Path(path)
    if p.exists() or p.is_symlink():
        raise KeyMaterialError(f"{p}: exists; refusing to overwrite a key file")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)  # mode 0600
    except OSError as exc:
        raise KeyMaterialError(f"{p}: cannot write key file ({exc.strerror or exc})") from None
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(km.to_json(), fh, indent=2)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, p)  # atomic, and fails if p appeared meanwhile: never overwrite
        except FileExistsError:
            raise KeyMaterialError(f"{p}: exists; refusing to overwrite a key file") from None
        except OSError:  # a file system without hard links: rename (checked just above)
            if p.exists():
                raise KeyMaterialError(f"{p}: exists; refusing to overwrite a key file") from None
            os.replace(tmp, p)
    except OSError as exc:
        raise KeyMaterialError(f"{p}: cannot write key file ({exc.strerror or exc})") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return p


def key_from_json(data: dict, where: str) -> KeyMaterial:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise KeyMaterialError(f"{where}: not a {FORMAT} key file")
    kind = data.get("kind")
    if kind not in KINDS:
        raise KeyMaterialError(f"{where}: field 'kind' must be one of {', '.join(KINDS)}")
    material = data.get("material")
    if not isinstance(material, str) or not material:
        raise KeyMaterialError(f"{where}: field 'material' is missing")
    key_id = data.get("key_id")
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise KeyMaterialError(f"{where}: field 'key_id' must be 16 hex digits")
    created = data.get("created")
    if not isinstance(created, str) or not created:
        raise KeyMaterialError(f"{where}: field 'created' is missing")
    alphabet = data.get("alphabet")
    if kind != "vigenere" and alphabet is not None:
        raise KeyMaterialError(f"{where}: field 'alphabet' applies to vigenere keys only")
    if kind == "vigenere":
        if alphabet not in ("letters52", "latin"):
            raise KeyMaterialError(f"{where}: field 'alphabet' must be letters52 or latin")
        if data.get("alphabet_sha256") != _sha256(alphabet_chars(alphabet)):
            raise KeyMaterialError(f"{where}: field 'alphabet_sha256' does not match this version's "
                                   f"{alphabet} alphabet")
        secret = material.encode("utf-8")
    else:
        try:
            secret = base64.b64decode(material, validate=True)
        except ValueError:
            raise KeyMaterialError(f"{where}: field 'material' is not Base64") from None
    try:
        return KeyMaterial(kind, secret, key_id=key_id, created=created, alphabet=alphabet)
    except KeyMaterialError as exc:
        raise KeyMaterialError(f"{where}: {exc}") from None


def load_key_file(path: str | os.PathLike) -> KeyMaterial:
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise KeyMaterialError(f"{p}: cannot read key file ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw)
    except ValueError:
        raise KeyMaterialError(f"{p}: key file is not JSON") from None
    return key_from_json(data, str(p))


# ---- references -----------------------------------------------------------------------

KeystoreBackend = Callable[[str], KeyMaterial]
_KEYSTORE: list[KeystoreBackend] = []


def register_keystore(backend: KeystoreBackend | None) -> None:
    """Install the process's ``keystore:`` backend (the service installs its own on
    workers, from the master key given to the node as a deployment secret)."""
    _KEYSTORE.clear()
    if backend is not None:
        _KEYSTORE.append(backend)


class KeyResolver:
    """Turns a key reference into key material. ``file:`` paths resolve against
    ``base_dir`` (the spec's folder) when relative."""

    def __init__(self, base_dir: str | os.PathLike | None = None, *, allow_file: bool = True):
        self.base_dir = Path(base_dir) if base_dir else None
        self.allow_file = allow_file

    def file_path(self, ref: str) -> Path:
        """The file a ``file:`` reference names (relative paths against ``base_dir``)."""
        p = Path(ref.partition(":")[2])
        if not p.is_absolute() and self.base_dir is not None:
            p = self.base_dir / p
        return p

    def resolve(self, ref: str, *, expect: tuple[str, ...] | None = None) -> KeyMaterial:
        scheme, _, rest = ref.partition(":")
        if scheme == "file":
            if not self.allow_file:
                raise KeyMaterialError("file: key references are not allowed here; use keystore:<id>")
            km = load_key_file(self.file_path(ref))
        elif scheme == "keystore":
            if not _KEYSTORE:
                raise KeyMaterialError(f"{ref}: no key store configured in this process")
            km = _KEYSTORE[0](rest)
        else:
            raise KeyMaterialError(f"key reference must start with file: or keystore: (got scheme {scheme!r})")
        if expect and km.kind not in expect:
            raise KeyMaterialError(f"{ref}: key {km.key_id} is {km.kind}; expected {' or '.join(expect)}")
        return km
