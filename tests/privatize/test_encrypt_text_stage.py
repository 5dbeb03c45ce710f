import logging
import pickle

import pyarrow as pa
import pytest

from privatize.ciphers import vigenere
from privatize.ciphers.vigenere import Vigenere
from privatize.errors import KeyMaterialError
from privatize.keys import import_key, new_key, write_key_file
from privatize.stage import QUARANTINE, StageContext
from privatize.stages import build_stage, registered_kinds
from privatize.stages.encrypt_text import EncryptText, EncryptTextSettings
from tests.secrets_scan import leaks


def _batch(texts):
    n = len(texts)
    return pa.table({"doc_id": [f"d{i}" for i in range(n)], "text": pa.array(texts, pa.string()),
                     "individual_id": pa.array([None] * n, pa.string()), "meta": pa.array([None] * n, pa.string()),
                     "_src": pa.array([0] * n, pa.int32()), "_line": pa.array(range(n), pa.int64()),
                     "_seg": pa.array([0] * n, pa.int32())})


@pytest.fixture()
def spec_dir(tmp_path):
    km = import_key("vigenere", "hENTu")
    write_key_file(km, tmp_path / "keys" / "text.key")
    return tmp_path, km


def _stage(base, ref="file:keys/text.key"):
    return build_stage(EncryptTextSettings(key=ref), StageContext(base_dir=str(base)))


def test_registered_and_settings_hold_a_reference_only():
    settings_cls, cls = registered_kinds()["encrypt_text"]
    assert settings_cls is EncryptTextSettings and cls is EncryptText
    with pytest.raises(ValueError):
        EncryptTextSettings(key="hENTu")  # a key, not a reference
    with pytest.raises(ValueError):
        EncryptTextSettings(key="file:k", extra=1)


def test_encrypts_text_counts_characters_and_quarantines_nulls(spec_dir, monkeypatch, caplog):
    base, km = spec_dir
    stage = _stage(base)
    assert stage.key_ids() == {}
    monkeypatch.setattr(vigenere, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="privatize.ciphers.vigenere"):
        with pytest.warns(UserWarning, match="obfuscation"):
            stage.setup()
    assert any("obfuscation" in r.getMessage() for r in caplog.records)
    with pytest.warns(UserWarning, match="obfuscation"):  # every setup says so, not only the first
        _stage(base).setup()
    assert stage.key_ids() == {"key": km.key_id}
    out = stage.process_batch(_batch(["I am a cat.", None, "héllo <MASK>", ""]))
    assert out["text"].to_pylist() == ["q oG I quo.", None, Vigenere("hENTu").encrypt("héllo <MASK>"), ""]
    assert out["text"].to_pylist()[2].endswith(" <MASK>")
    assert out[QUARANTINE].to_pylist() == [None, "no text to encrypt", None, None]
    assert out["_stat.chars_encrypted"].to_pylist() == [11, 0, 12, 0]
    assert out["doc_id"].to_pylist() == ["d0", "d1", "d2", "d3"]  # other columns untouched
    clean = stage.process_batch(_batch(["abc"]))
    assert QUARANTINE not in clean.column_names


def test_refuses_a_key_that_is_not_vigenere(tmp_path):
    write_key_file(new_key("aes-siv"), tmp_path / "e.key")
    stage = _stage(tmp_path, "file:e.key")
    with pytest.raises(KeyMaterialError, match="expected vigenere"):
        stage.setup()
    with pytest.raises(KeyMaterialError, match="cannot read"):
        _stage(tmp_path, "file:missing.key").setup()


@pytest.mark.filterwarnings("ignore:the whole-text cipher")
def test_pickled_stage_carries_no_key_bytes_before_or_after_setup(spec_dir):
    base, _ = spec_dir
    km = new_key("vigenere", length=300)  # long enough that any leak is unmistakable
    write_key_file(km, base / "keys" / "long.key")
    stage = _stage(base, "file:keys/long.key")
    blob = pickle.dumps(stage)
    assert not leaks(blob, km.secret)
    stage.setup()
    blob = pickle.dumps(stage)  # the cipher (key-derived tables) is dropped
    assert not leaks(blob, km.secret)
    again = pickle.loads(blob)
    assert again.process_batch(_batch(["Some text"]))["text"].to_pylist() == [Vigenere(km.letters).encrypt("Some text")]
