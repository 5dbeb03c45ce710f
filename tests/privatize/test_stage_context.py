"""The key resolver a stage gets through its context, and the redaction modules' imports."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

import privatize.redaction
from privatize import keys
from privatize.keys import KeyResolver, import_key, register_keystore, write_key_file
from privatize.stage import StageContext
from privatize.stages import build_stage
from privatize.stages.encrypt_text import EncryptTextSettings

pytestmark = pytest.mark.filterwarnings("ignore:the whole-text cipher is obfuscation")


class _RecordingResolver:
    def __init__(self, km):
        self.km, self.calls = km, []

    def resolve(self, ref, *, expect=None):
        self.calls.append((ref, expect))
        return self.km


def test_the_default_resolver_resolves_against_base_dir(tmp_path):
    km = import_key("vigenere", "hENTu")
    write_key_file(km, tmp_path / "keys" / "text.key")
    ctx = StageContext(base_dir=str(tmp_path))
    assert isinstance(ctx.key_resolver, KeyResolver) and ctx.key_resolver is ctx.key_resolver
    assert ctx.key_resolver.base_dir == tmp_path
    stage = build_stage(EncryptTextSettings(key="file:keys/text.key"), ctx)
    stage.setup()
    assert stage.key_ids() == {"key": km.key_id}
    assert StageContext().key_resolver.base_dir is None


def test_a_stage_resolves_its_key_through_the_injected_resolver():
    km = import_key("vigenere", "hENTu")
    resolver = _RecordingResolver(km)
    stage = build_stage(EncryptTextSettings(key="keystore:k1"), StageContext(key_resolver=resolver))
    stage.setup()
    assert resolver.calls == [("keystore:k1", ("vigenere",))]
    out = stage.process_batch(pa.table({"doc_id": ["d"], "text": ["abc"]}))
    assert out["text"].to_pylist() != ["abc"]


def test_the_keystore_backend_is_seen_by_a_context_made_before_it_was_installed(monkeypatch):
    """The service installs its ``keystore:`` backend in each worker process; a context
    (and its lazily made resolver) shipped there resolves through it."""
    km = import_key("vigenere", "hENTu")
    ctx = pickle.loads(pickle.dumps(StageContext(base_dir=None)))
    monkeypatch.setattr(keys, "_KEYSTORE", [])  # this process's backend, restored after the test
    register_keystore(lambda key_id: km if key_id == "k1" else None)
    stage = build_stage(EncryptTextSettings(key="keystore:k1"), ctx)
    stage.setup()
    assert stage.key_ids() == {"key": km.key_id}


def test_recognizers_do_not_import_the_detector():
    """``detect`` loads the recognizers; what both need (stop words) lives in ``words``."""
    def imported(name: str) -> set[str]:
        tree = ast.parse((Path(privatize.redaction.__file__).parent / f"{name}.py").read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}

    # the name recognizers (redaction/names.py, loaded by recognizers.py) are the ones using stop words
    assert "privatize.redaction.detect" not in imported("recognizers") | imported("names")
    assert "privatize.redaction.words" in imported("names") & imported("detect")
