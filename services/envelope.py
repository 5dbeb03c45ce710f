"""Envelope encryption of key material under the master key (pycryptodome AES-256-GCM).

Each key gets its own random 32-byte data key (DEK). The material (the key file JSON of
``privatize.keys``) is encrypted under the DEK; the DEK is wrapped under the master
key. Both carry associated data binding them to their tenant, key id and kind, so a
blob copied to another row or tenant fails authentication instead of decrypting.
Deleting the two blobs is crypto-shredding: nothing left can recover the material.

Blob layout: ``nonce (12) || ciphertext || tag (16)``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from Crypto.Cipher import AES

from privatize.errors import KeyMaterialError
from privatize.keys import KeyMaterial, key_from_json

_NONCE = 12
_TAG = 16
DEK_BYTES = 32


def master_key_id(master: bytes) -> str:
    """A short id of the master key (an HMAC of a constant; reveals nothing of the key),
    stored with each key so a wrong master key gives a clear error."""
    return hmac.new(master, b"privatize master key id", hashlib.sha256).hexdigest()[:16]


def _seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    nonce = secrets.token_bytes(_NONCE)
    c = AES.new(key, AES.MODE_GCM, nonce=nonce, mac_len=_TAG)
    c.update(aad)
    ct, tag = c.encrypt_and_digest(plaintext)
    return nonce + ct + tag


def _open(key: bytes, blob: bytes, aad: bytes) -> bytes:
    if len(blob) < _NONCE + _TAG:
        raise ValueError("sealed blob too short")
    nonce, ct, tag = blob[:_NONCE], blob[_NONCE:-_TAG], blob[-_TAG:]
    c = AES.new(key, AES.MODE_GCM, nonce=nonce, mac_len=_TAG)
    c.update(aad)
    return c.decrypt_and_verify(ct, tag)


def _aad(purpose: str, tenant_id: str, key_id: str, kind: str) -> bytes:
    return f"privatize-{purpose}/1|{tenant_id}|{key_id}|{kind}".encode()


@dataclass(frozen=True)
class Sealed:
    master_key_id: str
    wrapped_dek: bytes
    material_ct: bytes


def seal_key(master: bytes, tenant_id: str, km: KeyMaterial) -> Sealed:
    dek = secrets.token_bytes(DEK_BYTES)
    body = json.dumps(km.to_json(), sort_keys=True).encode("utf-8")
    return Sealed(master_key_id(master),
                  _seal(master, dek, _aad("dek", tenant_id, km.key_id, km.kind)),
                  _seal(dek, body, _aad("key", tenant_id, km.key_id, km.kind)))


def open_key(master: bytes, tenant_id: str, key_id: str, kind: str, sealed: Sealed) -> KeyMaterial:
    if sealed.master_key_id != master_key_id(master):
        raise KeyMaterialError(f"keystore:{key_id}: sealed under another master key "
                               f"({sealed.master_key_id}); this node has {master_key_id(master)}")
    try:
        dek = _open(master, sealed.wrapped_dek, _aad("dek", tenant_id, key_id, kind))
        body = _open(dek, sealed.material_ct, _aad("key", tenant_id, key_id, kind))
    except ValueError:
        raise KeyMaterialError(f"keystore:{key_id}: sealed key failed authentication") from None
    km = key_from_json(json.loads(body), f"keystore:{key_id}")
    if km.key_id != key_id or km.kind != kind:
        raise KeyMaterialError(f"keystore:{key_id}: sealed key does not match its record")
    return km
