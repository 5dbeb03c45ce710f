import json
import os
import pickle
import stat

import pytest

from privatize.errors import KeyMaterialError
from privatize.keys import (KeyResolver, import_key, load_key_file, new_key, register_keystore,
                            write_key_file)


@pytest.mark.parametrize("kind, size", [("aes-siv", 64), ("aes-ecb", 32), ("hmac", 32)])
def test_new_binary_keys_round_trip_mode_0600(tmp_path, kind, size):
    km = new_key(kind)
    p = write_key_file(km, tmp_path / "k.key")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    data = json.loads(p.read_text())
    assert data["kind"] == kind and data["key_id"] == km.key_id and data["created"].endswith("Z")
    back = load_key_file(p)
    assert back.secret == km.secret and len(back.secret) == size and back.key_id == km.key_id
    with pytest.raises(KeyMaterialError, match="exists"):
        write_key_file(km, p)


def test_keys_are_random_and_ids_differ():
    a, b = new_key("aes-siv"), new_key("aes-siv")
    assert a.secret != b.secret and a.key_id != b.key_id and len(a.key_id) == 16


def test_vigenere_keys_and_alphabets(tmp_path):
    km = new_key("vigenere", length=10, alphabet="latin")
    p = write_key_file(km, tmp_path / "v.key")
    back = load_key_file(p)
    assert back.letters == km.letters and back.alphabet == "latin"
    data = json.loads(p.read_text())
    data["alphabet_sha256"] = "0" * 64
    (tmp_path / "w.key").write_text(json.dumps(data))
    with pytest.raises(KeyMaterialError, match="alphabet_sha256"):
        load_key_file(tmp_path / "w.key")
    assert len(new_key("vigenere").letters) == 100


def test_import_refuses_identity_and_bad_letters():
    assert import_key("vigenere", "hENTu").letters == "hENTu"
    with pytest.raises(KeyMaterialError, match="identity"):
        import_key("vigenere", "zzzz")
    with pytest.raises(KeyMaterialError, match="outside"):
        import_key("vigenere", "abc1")
    with pytest.raises(KeyMaterialError):
        import_key("aes-siv", "abc")


def test_bad_key_files_name_file_and_field_never_bytes(tmp_path):
    p = tmp_path / "k.key"
    p.write_text("{not json")
    with pytest.raises(KeyMaterialError, match="k.key: key file is not JSON"):
        load_key_file(p)
    km = new_key("aes-siv")
    data = km.to_json()
    data["material"] = data["material"][:-8]
    p.write_text(json.dumps(data))
    with pytest.raises(KeyMaterialError) as e:
        load_key_file(p)
    assert "material" in str(e.value) or "64 bytes" in str(e.value)
    assert data["material"][:20] not in str(e.value)


def test_key_material_is_not_picklable_and_repr_hides_secret():
    km = new_key("hmac")
    with pytest.raises(TypeError, match="setup"):
        pickle.dumps(km)
    assert km.secret.hex() not in repr(km)


def test_resolver_file_relative_to_base_and_keystore(tmp_path):
    km = new_key("hmac")
    write_key_file(km, tmp_path / "keys" / "h.key")
    r = KeyResolver(tmp_path)
    assert r.resolve("file:keys/h.key").key_id == km.key_id
    with pytest.raises(KeyMaterialError, match="expected aes-siv"):
        r.resolve("file:keys/h.key", expect=("aes-siv",))
    with pytest.raises(KeyMaterialError, match="not allowed"):
        KeyResolver(tmp_path, allow_file=False).resolve("file:keys/h.key")
    with pytest.raises(KeyMaterialError, match="no key store"):
        r.resolve("keystore:abc")
    register_keystore(lambda kid: km if kid == "abc" else (_ for _ in ()).throw(KeyMaterialError("unknown")))
    try:
        assert r.resolve("keystore:abc").key_id == km.key_id
    finally:
        register_keystore(None)
