"""Envelope encryption of tenants' keys under the master key."""

from __future__ import annotations

import secrets

import pytest

from privatize.errors import KeyMaterialError
from privatize.keys import new_key
from services.envelope import Sealed, master_key_id, open_key, seal_key
from tests.secrets_scan import leaks


@pytest.fixture
def master() -> bytes:
    return secrets.token_bytes(32)


@pytest.mark.parametrize("kind", ["vigenere", "aes-siv", "hmac"])
def test_round_trip(master, kind):
    km = new_key(kind, length=500) if kind == "vigenere" else new_key(kind)
    sealed = seal_key(master, "tenant-a", km)
    back = open_key(master, "tenant-a", km.key_id, kind, sealed)
    assert back.secret == km.secret and back.kind == kind and back.key_id == km.key_id
    assert back.alphabet == km.alphabet
    for blob in (sealed.wrapped_dek, sealed.material_ct):
        assert not leaks(blob, km.secret)
    assert not leaks(sealed.wrapped_dek + sealed.material_ct, master)


def test_sealing_is_randomised(master):
    km = new_key("aes-siv")
    a, b = seal_key(master, "t", km), seal_key(master, "t", km)
    assert a.wrapped_dek != b.wrapped_dek and a.material_ct != b.material_ct


def test_blobs_are_bound_to_tenant_key_and_kind(master):
    km = new_key("aes-siv")
    sealed = seal_key(master, "tenant-a", km)
    with pytest.raises(KeyMaterialError, match="failed authentication"):
        open_key(master, "tenant-b", km.key_id, "aes-siv", sealed)
    with pytest.raises(KeyMaterialError, match="failed authentication"):
        open_key(master, "tenant-a", "0123456789abcdef", "aes-siv", sealed)
    with pytest.raises(KeyMaterialError, match="failed authentication"):
        open_key(master, "tenant-a", km.key_id, "hmac", sealed)
    flipped = bytearray(sealed.material_ct)
    flipped[20] ^= 1
    with pytest.raises(KeyMaterialError, match="failed authentication"):
        open_key(master, "tenant-a", km.key_id, "aes-siv",
                 Sealed(sealed.master_key_id, sealed.wrapped_dek, bytes(flipped)))
    other = seal_key(master, "tenant-a", new_key("aes-siv"))  # another key's DEK with this material
    with pytest.raises(KeyMaterialError):
        open_key(master, "tenant-a", km.key_id, "aes-siv",
                 Sealed(sealed.master_key_id, other.wrapped_dek, sealed.material_ct))


def test_wrong_master_key_is_named(master):
    km = new_key("hmac")
    sealed = seal_key(master, "t", km)
    other = secrets.token_bytes(32)
    with pytest.raises(KeyMaterialError, match="another master key") as ei:
        open_key(other, "t", km.key_id, "hmac", sealed)
    assert master_key_id(master) in str(ei.value) and master_key_id(other) in str(ei.value)
    assert not leaks(str(ei.value).encode(), master)
