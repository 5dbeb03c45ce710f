"""Keys sealed by the service resolve on a worker through ``keystore:`` references, from
the job's bundle and the node's master key; nothing else resolves."""

from __future__ import annotations

import json
import secrets

import pyarrow.parquet as pq
import pytest

from privatize.ciphers.vigenere import Vigenere
from privatize.errors import KeyMaterialError
from privatize.keys import KeyResolver, new_key, register_keystore
from privatize import run
from privatize.spec import parse_spec
from services.envelope import seal_key
from services.keystore import BundleKeystore, bundle_json, install_worker_keystore


def _bundle(master: bytes, tenant: str, kms) -> bytes:
    keys = []
    for km in kms:
        s = seal_key(master, tenant, km)
        keys.append({"id": km.key_id, "kind": km.kind, "master_key_id": s.master_key_id,
                     "wrapped_dek": s.wrapped_dek, "material_ct": s.material_ct})
    return bundle_json(tenant, keys)


@pytest.fixture(autouse=True)
def _no_keystore():
    yield
    register_keystore(None)


def test_bundle_resolves_only_its_keys():
    master = secrets.token_bytes(32)
    km = new_key("aes-siv")
    store = BundleKeystore(_bundle(master, "t1", [km]), master)
    assert store(km.key_id).secret == km.secret
    with pytest.raises(KeyMaterialError, match="not in this job's key bundle"):
        store("0" * 16)
    with pytest.raises(KeyMaterialError, match="another master key"):
        BundleKeystore(_bundle(master, "t1", [km]), secrets.token_bytes(32))(km.key_id)
    assert km.key_id in repr(store) and "secret" not in repr(store)


def test_worker_hook_resolves_keystore_refs_in_a_pipeline(tmp_path, monkeypatch):
    """What a Ray worker does: the setup hook installs the backend from the environment
    (bundle location, master key file), and a stage's setup() resolves its reference."""
    master_file = tmp_path / "master.key"
    import base64

    master = secrets.token_bytes(32)
    master_file.write_text(base64.b64encode(master).decode())
    text_key, pseudo = new_key("vigenere", length=40), new_key("hmac")
    (tmp_path / "keys.json").write_bytes(_bundle(master, "t1", [text_key, pseudo]))
    monkeypatch.setenv("PRIVATIZE_KEY_BUNDLE", str(tmp_path / "keys.json"))
    monkeypatch.setenv("PRIVATIZE_MASTER_KEY_FILE", str(master_file))
    monkeypatch.delenv("PRIVATIZE_MASTER_KEY", raising=False)
    assert install_worker_keystore() is True
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "a", "text": "Hello there.", "individual_id": "p1"}) + "\n")
    spec = parse_spec({"stages": [{"kind": "encrypt_text", "key": f"keystore:{text_key.key_id}"}],
                       "output": {"num_shards": 1, "pseudonym_key": f"keystore:{pseudo.key_id}"}})
    with pytest.warns(UserWarning, match="obfuscation"):
        m = run(spec, tmp_path / "in.jsonl", tmp_path / "out")
    assert m["key_ids"] == {"stages.0.key": text_key.key_id, "output.pseudonym_key": pseudo.key_id}
    row = pq.read_table(tmp_path / "out" / "shards" / "part-00000-of-00001.parquet").to_pylist()[0]
    assert Vigenere.from_key(text_key).decrypt(row["text"]) == "Hello there."
    assert row["individual_id"] not in (None, "p1")


def test_worker_without_master_key_fails_at_resolution_not_at_startup(tmp_path, monkeypatch):
    (tmp_path / "keys.json").write_bytes(_bundle(secrets.token_bytes(32), "t1", [new_key("hmac")]))
    monkeypatch.setenv("PRIVATIZE_KEY_BUNDLE", str(tmp_path / "keys.json"))
    monkeypatch.delenv("PRIVATIZE_MASTER_KEY_FILE", raising=False)
    monkeypatch.delenv("PRIVATIZE_MASTER_KEY", raising=False)
    assert install_worker_keystore() is True  # never raises in the Ray setup hook
    with pytest.raises(KeyMaterialError, match="no master key on this node"):
        KeyResolver().resolve("keystore:abc")


def test_no_bundle_installs_nothing(monkeypatch):
    monkeypatch.delenv("PRIVATIZE_KEY_BUNDLE", raising=False)
    assert install_worker_keystore() is False
    with pytest.raises(KeyMaterialError, match="no key store configured"):
        KeyResolver().resolve("keystore:abc")
