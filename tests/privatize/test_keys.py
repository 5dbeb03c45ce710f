import base64
import datetime as dt
import hashlib
import json
import os
import pickle
import stat
import unicodedata

import pytest

from privatize.errors import KeyMaterialError
from privatize.keys import (KeyMaterial, KeyResolver, alphabet_chars, import_key, load_key_file, new_key,
                            register_keystore, write_key_file)


@pytest.mark.parametrize("kind, size", [("aes-siv", 64), ("aes-ecb", 32), ("hmac", 32)])
def test_new_binary_keys_round_trip_mode_0600(tmp_path, kind, size):
    km = new_key(kind)
    p = write_key_file(km, tmp_path / "k.key")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    data = json.loads(p.read_text())
    assert set(data) == {"format", "kind", "key_id", "created", "alphabet", "alphabet_sha256", "material"}
    assert data["format"] == "privatize-key/1" and data["kind"] == kind and data["key_id"] == km.key_id
    assert data["alphabet"] is None and data["alphabet_sha256"] is None
    created = dt.datetime.strptime(data["created"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    assert abs((dt.datetime.now(dt.timezone.utc) - created).total_seconds()) < 120
    assert base64.b64decode(data["material"]) == km.secret and len(km.secret) == size
    back = load_key_file(p)
    assert back.secret == km.secret and back.key_id == km.key_id and back.kind == kind
    assert [f.name for f in tmp_path.iterdir()] == ["k.key"]  # no temporary file left behind


def test_write_refuses_to_overwrite_and_leaves_the_old_file(tmp_path):
    a, b = new_key("hmac"), new_key("hmac")
    p = write_key_file(a, tmp_path / "k.key")
    before = p.read_bytes()
    with pytest.raises(KeyMaterialError, match="exists"):
        write_key_file(b, p)
    assert p.read_bytes() == before
    (tmp_path / "link.key").symlink_to(tmp_path / "nowhere")
    with pytest.raises(KeyMaterialError, match="exists"):
        write_key_file(b, tmp_path / "link.key")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["k.key", "link.key"]


def test_keys_are_random_and_ids_differ():
    keys = [new_key("aes-siv") for _ in range(20)]
    assert len({k.secret for k in keys}) == 20 and len({k.key_id for k in keys}) == 20
    assert all(len(k.key_id) == 16 and int(k.key_id, 16) >= 0 for k in keys)
    letters = {new_key("vigenere").letters for _ in range(20)}
    assert len(letters) == 20


def test_vigenere_keys_and_alphabets(tmp_path):
    assert alphabet_chars("letters52") == "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    latin = alphabet_chars("latin")
    assert latin == "".join(chr(c) for c in range(0x250) if unicodedata.category(chr(c)).startswith("L"))
    assert latin[:3] == "ABC" and latin[-1] == "ɏ" and "ª" in latin and "×" not in latin
    km = new_key("vigenere", length=10, alphabet="latin")
    p = write_key_file(km, tmp_path / "v.key")
    data = json.loads(p.read_text())
    assert data["alphabet"] == "latin"
    assert data["alphabet_sha256"] == hashlib.sha256(latin.encode()).hexdigest()
    assert data["material"] == km.letters and len(km.letters) == 10
    back = load_key_file(p)
    assert back.letters == km.letters and back.alphabet == "latin"
    data["alphabet_sha256"] = "0" * 64  # the alphabet definition changed: refuse
    (tmp_path / "w.key").write_text(json.dumps(data))
    with pytest.raises(KeyMaterialError, match="w.key.*alphabet_sha256"):
        load_key_file(tmp_path / "w.key")
    assert len(new_key("vigenere").letters) == 100 and new_key("vigenere").alphabet == "letters52"
    with pytest.raises(KeyMaterialError, match="length"):
        new_key("vigenere", length=0)
    with pytest.raises(KeyMaterialError, match="vigenere keys only"):
        new_key("aes-siv", length=10)
    with pytest.raises(KeyMaterialError, match="alphabet"):
        new_key("vigenere", alphabet="greek")


def test_generated_keys_are_never_the_identity():
    # length 1 over letters52: the identity is "z" (1 in 52); 300 draws would hit it often
    assert all(new_key("vigenere", length=1).letters != "z" for _ in range(300))


def test_import_refuses_identity_and_bad_letters():
    assert import_key("vigenere", "hENTu").letters == "hENTu"
    assert import_key("vigenere", "ÀÿA", "latin").alphabet == "latin"
    with pytest.raises(KeyMaterialError, match="identity"):
        import_key("vigenere", "zzzz")
    with pytest.raises(KeyMaterialError, match="identity"):
        import_key("vigenere", "ɏ", "latin")
    with pytest.raises(KeyMaterialError, match="outside"):
        import_key("vigenere", "abc1")
    with pytest.raises(KeyMaterialError, match="outside"):
        import_key("vigenere", "abé")  # é is not in letters52
    with pytest.raises(KeyMaterialError):
        import_key("vigenere", "")
    with pytest.raises(KeyMaterialError):
        import_key("aes-siv", "abc")


@pytest.mark.parametrize("field, value, msg", [
    ("format", "other/1", "not a privatize-key/1"),
    ("kind", "rsa", "'kind'"),
    ("key_id", "XYZ", "'key_id'"),
    ("key_id", None, "'key_id'"),
    ("created", None, "'created'"),
    ("alphabet", "letters52", "'alphabet'"),
    ("material", "!!not base64!!", "'material'"),
    ("material", None, "'material'"),
])
def test_bad_key_files_name_file_and_field_never_bytes(tmp_path, field, value, msg):
    km = new_key("aes-siv")
    data = km.to_json()
    data[field] = value
    p = tmp_path / "k.key"
    p.write_text(json.dumps(data))
    with pytest.raises(KeyMaterialError, match=msg) as e:
        load_key_file(p)
    assert "k.key" in str(e.value)
    for form in (km.secret.hex(), base64.b64encode(km.secret).decode(), data.get("material") or "x" * 99):
        assert form[:12] not in str(e.value)


def test_truncated_material_and_unreadable_files(tmp_path):
    km = new_key("aes-siv")
    data = km.to_json()
    data["material"] = base64.b64encode(km.secret[:40]).decode()
    p = tmp_path / "k.key"
    p.write_text(json.dumps(data))
    with pytest.raises(KeyMaterialError, match="64 bytes") as e:
        load_key_file(p)
    assert data["material"][:12] not in str(e.value)
    p.write_text("{not json")
    with pytest.raises(KeyMaterialError, match="k.key: key file is not JSON"):
        load_key_file(p)
    with pytest.raises(KeyMaterialError, match="cannot read"):
        load_key_file(tmp_path / "missing.key")


def test_key_material_is_not_picklable_and_repr_hides_secret():
    for km in (new_key("hmac"), new_key("vigenere")):
        with pytest.raises(TypeError, match="setup"):
            pickle.dumps(km)
        for s in (repr(km), str(km), f"{km}"):
            assert km.key_id in s and km.kind in s
            for form in (km.secret, km.secret.hex().encode(), base64.b64encode(km.secret),
                         base64.urlsafe_b64encode(km.secret)):
                assert form.decode("utf-8", "replace")[:12] not in s


def test_key_material_checks_sizes():
    with pytest.raises(KeyMaterialError, match="64 bytes"):
        KeyMaterial("aes-siv", b"\x00" * 32)
    with pytest.raises(KeyMaterialError, match="unknown key kind"):
        KeyMaterial("des", b"\x00" * 8)
    assert KeyMaterial("aes-siv", b"\x00" * 64, alphabet="latin").alphabet is None


def test_resolver_file_relative_to_base_and_keystore(tmp_path):
    km = new_key("hmac")
    write_key_file(km, tmp_path / "keys" / "h.key")
    r = KeyResolver(tmp_path)
    assert r.resolve("file:keys/h.key").key_id == km.key_id
    assert KeyResolver().resolve(f"file:{tmp_path}/keys/h.key").key_id == km.key_id  # absolute
    with pytest.raises(KeyMaterialError, match="expected aes-siv"):
        r.resolve("file:keys/h.key", expect=("aes-siv",))
    with pytest.raises(KeyMaterialError, match="not allowed"):
        KeyResolver(tmp_path, allow_file=False).resolve("file:keys/h.key")
    with pytest.raises(KeyMaterialError, match="file: or keystore:"):
        r.resolve("s3cr3t")
    with pytest.raises(KeyMaterialError, match="no key store configured"):
        r.resolve("keystore:abc")

    def backend(kid: str) -> KeyMaterial:
        if kid != "abc":
            raise KeyMaterialError(f"no key {kid}")
        return km

    register_keystore(backend)
    try:
        assert r.resolve("keystore:abc").key_id == km.key_id
        with pytest.raises(KeyMaterialError, match="no key zzz"):
            r.resolve("keystore:zzz")
    finally:
        register_keystore(None)
    with pytest.raises(KeyMaterialError, match="no key store configured"):
        r.resolve("keystore:abc")


def test_api_keys_are_imported_checked_and_round_trip(tmp_path):
    """An LLM provider's API key: imported (never generated), 8 to 4096 visible ASCII
    characters, stored as Base64 in a key file that loads back to the same bytes."""
    secret = "sk-proj-" + "Ab9_-" * 10
    km = import_key("api-key", secret)
    assert km.kind == "api-key" and km.secret == secret.encode() and secret not in repr(km)
    again = load_key_file(write_key_file(km, tmp_path / "llm.key"))
    assert again.secret == km.secret and again.key_id == km.key_id
    assert secret not in (tmp_path / "llm.key").read_text()  # Base64, as every byte key
    for bad in ("short", "sk-with space-123", "sk-line\nbreak-123", "x" * 4097, "sk-ünïcode-123"):
        with pytest.raises(KeyMaterialError, match="8 to 4096 visible ASCII characters") as e:
            import_key("api-key", bad)
        assert bad not in str(e.value)
    with pytest.raises(KeyMaterialError, match="issued by the LLM provider: import one"):
        new_key("api-key")
