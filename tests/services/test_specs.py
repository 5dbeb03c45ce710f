"""Spec checks: field paths, and which key references a tenant may use."""

from __future__ import annotations

import secrets

import pytest

from services.db import make_engine, migrate, session_factory, session_scope
from services.errors import SpecInvalid
from services.keys import create_key, destroy_key, set_enabled
from services.specs import check_key_references, key_references, validate_spec, with_input_format
from services.storage import Storage
from services.tenants import create_tenant


@pytest.fixture
def db(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 's.db'}")
    migrate(engine)
    return session_factory(engine)


def spec(key: str = "keystore:k", pseudo: str | None = None) -> dict:
    d = {"stages": [{"kind": "split"}, {"kind": "dedup"}, {"kind": "split_private"},
                    {"kind": "encrypt_text", "key": key}]}
    if pseudo:
        d["output"] = {"pseudonym_key": pseudo}
    return d


def test_errors_carry_field_paths():
    with pytest.raises(SpecInvalid) as ei:
        validate_spec({"stages": [{"kind": "split", "unit": "word"}], "output": {"num_shards": -1}})
    paths = {e["path"] for e in ei.value.extra["errors"]}
    assert paths == {"stages.0.split.unit", "output.num_shards"}
    assert ei.value.message.startswith("stages.0.split.unit: ") or ei.value.message.startswith("output")
    with pytest.raises(SpecInvalid) as ei:  # an order error is reported at the stage that breaks it
        validate_spec({"stages": [{"kind": "split"}, {"kind": "encrypt_text", "key": "keystore:k"},
                                  {"kind": "dedup"}]})
    assert ei.value.extra["errors"][0]["path"] == "stages.2"
    assert "dedup after encrypt_text" in ei.value.extra["errors"][0]["message"]
    with pytest.raises(SpecInvalid):
        validate_spec(["not", "a", "mapping"])


def test_key_references_are_found_with_their_paths():
    s = validate_spec(spec("keystore:a", "file:p.key"))
    assert key_references(s) == [("output.pseudonym_key", "file:p.key"), ("stages.3.key", "keystore:a")]


def test_only_the_tenants_enabled_keys(db, tmp_path):
    master = secrets.token_bytes(32)
    with session_scope(db) as s:
        a, _, _ = create_tenant(s, "a", storage_limit_bytes=10, max_concurrent_jobs=1)
        b, _, _ = create_tenant(s, "b", storage_limit_bytes=10, max_concurrent_jobs=1)
        ka = create_key(s, master, a.id, kind="vigenere", length=10)
        kb = create_key(s, master, b.id, kind="vigenere")
        ha = create_key(s, master, a.id, kind="hmac")
    with session_scope(db) as s:
        assert check_key_references(s, a.id, validate_spec(spec(f"keystore:{ka.id}", f"keystore:{ha.id}"))) == \
            [ha.id, ka.id]
        for bad, path, msg in ((f"keystore:{kb.id}", "stages.3.key", f"no key '{kb.id}'"),
                               ("file:/etc/key", "stages.3.key", "file: key references are not accepted")):
            with pytest.raises(SpecInvalid) as ei:
                check_key_references(s, a.id, validate_spec(spec(bad)))
            assert ei.value.extra["errors"][0]["path"] == path and msg in ei.value.message
        set_enabled(s, a.id, ka.id, False)
    with session_scope(db) as s, pytest.raises(SpecInvalid, match="is disabled"):
        check_key_references(s, a.id, validate_spec(spec(f"keystore:{ka.id}")))
    with session_scope(db) as s:
        destroy_key(s, Storage(str(tmp_path / "st")), a.id, ka.id)
    with session_scope(db) as s, pytest.raises(SpecInvalid, match="is destroyed"):
        check_key_references(s, a.id, validate_spec(spec(f"keystore:{ka.id}")))


def test_input_format_follows_the_corpus():
    s = validate_spec(spec())
    assert with_input_format(s, "parquet").input.format == "parquet"
    with pytest.raises(SpecInvalid, match="input.format"):
        with_input_format(validate_spec({**spec(), "input": {"format": "text"}}), "jsonl")


def test_a_nested_key_reference_is_checked_at_its_field_path(db):
    from typing import Literal

    from pydantic import BaseModel

    from privatize.settings import KeyRef, StageSettings
    from privatize.spec import InputSettings, OutputSettings, PipelineSpec

    class Operator(BaseModel):
        key: KeyRef

    class NestedSettings(StageSettings):
        kind: Literal["nested"] = "nested"
        operators: list[Operator]

    spec_ = PipelineSpec.model_construct(input=InputSettings(), output=OutputSettings(pseudonym_key="file:p.key"),
                                         stages=[NestedSettings(operators=[Operator(key="file:/etc/op.key")])])
    assert key_references(spec_) == [("output.pseudonym_key", "file:p.key"),
                                      ("stages.0.operators.0.key", "file:/etc/op.key")]
    with session_scope(db) as s:
        a, _, _ = create_tenant(s, "a", storage_limit_bytes=10, max_concurrent_jobs=1)
        with pytest.raises(SpecInvalid) as ei:
            check_key_references(s, a.id, spec_)
    assert [e["path"] for e in ei.value.extra["errors"]] == ["output.pseudonym_key", "stages.0.operators.0.key"]
    assert ei.value.extra["errors"][1]["loc"] == ["body", "spec", "stages", "0", "operators", "0", "key"]


def test_a_spec_is_validated_once(monkeypatch):
    from privatize.spec import PipelineSpec

    calls = []
    validate = PipelineSpec.model_validate.__func__

    def counting(cls, *args, **kwargs):
        calls.append(1)
        return validate(cls, *args, **kwargs)

    monkeypatch.setattr(PipelineSpec, "model_validate", classmethod(counting))
    s = validate_spec(spec())
    with_input_format(s, "jsonl")
    with pytest.raises(SpecInvalid) as ei:
        validate_spec({"stages": [{"kind": "split"}, {"kind": "encrypt_text", "key": "keystore:k"}, {"kind": "dedup"}]})
    assert len(calls) == 2  # one per validate_spec, none for the field paths or the input format
    assert ei.value.extra["errors"] == [{"path": "stages.2", "loc": ["body", "spec", "stages", "2"],
                                         "message": "dedup after encrypt_text finds nothing (ciphertext depends on "
                                                    "position); put dedup before the cipher"}]


def test_input_format_gives_the_spec_a_new_parse_would():
    from privatize.spec import parse_spec

    s = validate_spec(spec())
    fixed = with_input_format(s, "parquet")
    reparsed = parse_spec({**s.to_dict(), "input": {**s.to_dict()["input"], "format": "parquet"}})
    assert fixed == reparsed and fixed.sha256() == reparsed.sha256() and fixed.to_dict() == reparsed.to_dict()
    assert with_input_format(fixed, "parquet") == fixed


def test_a_key_of_the_wrong_kind_is_refused_at_its_field_path(db):
    """issue 23: the kind each key field takes is what its settings class declares
    (``KeyKinds``): encrypt_text a vigenere key, redact's encrypt operator an aes-siv
    or aes-ecb key, output.pseudonym_key an hmac key."""
    master = secrets.token_bytes(32)
    with session_scope(db) as s:
        a, _, _ = create_tenant(s, "a", storage_limit_bytes=10, max_concurrent_jobs=1)
        keys = {kind: create_key(s, master, a.id, kind=kind).id for kind in ("vigenere", "aes-siv", "hmac")}
    ref = {kind: f"keystore:{kid}" for kind, kid in keys.items()}

    def redact(key: str) -> dict:
        return {"stages": [{"kind": "split"}, {"kind": "redact", "operator": "encrypt", "key": key}]}

    with session_scope(db) as s:
        assert check_key_references(s, a.id, validate_spec(spec(ref["vigenere"], ref["hmac"]))) == \
            [keys["hmac"], keys["vigenere"]]  # in field path order
        assert check_key_references(s, a.id, validate_spec(redact(ref["aes-siv"]))) == [keys["aes-siv"]]
        for bad, path, kind, takes in ((spec(ref["aes-siv"]), "stages.3.key", "aes-siv", "vigenere"),
                                       (spec(ref["vigenere"], ref["aes-siv"]), "output.pseudonym_key", "aes-siv",
                                        "hmac"),
                                       (redact(ref["vigenere"]), "stages.1.key", "vigenere", "aes-siv or aes-ecb")):
            with pytest.raises(SpecInvalid) as ei:
                check_key_references(s, a.id, validate_spec(bad))
            (err,) = ei.value.extra["errors"]
            assert err["path"] == path and err["loc"] == ["body", "spec", *path.split(".")]
            assert err["message"] == f"key {keys[kind]} is a {kind} key; this field takes {takes} keys"
            assert ei.value.message == f"{path}: {err['message']}"


def test_every_key_field_of_every_registered_stage_declares_its_kinds():
    """A key field without declared kinds would take any key: the registry is checked,
    so a new stage cannot forget."""
    from privatize.keys import KINDS
    from privatize.settings import field_holds_key_ref, field_key_kinds
    from privatize.spec import OutputSettings
    from privatize.stages import registered_kinds

    seen = []

    def fields(model, prefix):
        for name, f in model.model_fields.items():
            if field_holds_key_ref(f):
                kinds = field_key_kinds(f)
                assert kinds and set(kinds) <= set(KINDS), (prefix, name, kinds)
                seen.append((f"{prefix}.{name}", kinds))

    fields(OutputSettings, "output")
    for kind, (settings_cls, _) in registered_kinds().items():
        fields(settings_cls, kind)
    assert ("encrypt_text.key", ("vigenere",)) in seen and ("redact.key", ("aes-siv", "aes-ecb")) in seen
    assert ("output.pseudonym_key", ("hmac",)) in seen


def test_settings_naming_server_files_are_refused_before_parsing(monkeypatch):
    """A tenant cannot point a stage at a file on the server (a word list, a filler
    model); the spec is refused at the field before validation would look at the path."""
    import os

    looked = []
    real = os.path.isfile
    monkeypatch.setattr(os.path, "isfile", lambda p: looked.append(p) or real(p))
    with pytest.raises(SpecInvalid) as ei:
        validate_spec({"stages": [{"kind": "mask", "technique": "allow_list", "word_list": "/etc/passwd"},
                                  {"kind": "refill", "checkpoint": "/srv/models/x"}]})
    assert [e["path"] for e in ei.value.extra["errors"]] == ["stages.0.mask.word_list", "stages.1.refill.checkpoint"]
    assert all("names a file on the server" in e["message"] for e in ei.value.extra["errors"])
    assert looked == []  # refused before any path was looked at
    assert validate_spec({"stages": [{"kind": "mask", "technique": "allow_list"}]}).stages[0].kind == "mask"
    # a filler by reference (one of the tenant's trainings, checked at admission) parses,
    # looking at no path; anything else in that field is a server file
    mask = {"kind": "mask", "technique": "allow_list"}
    ref = validate_spec({"stages": [mask, {"kind": "refill", "checkpoint": "training:" + "ab" * 8}]})
    assert ref.stages[1].checkpoint == "training:abababababababab" and looked == []
    with pytest.raises(SpecInvalid, match="names a file on the server"):
        validate_spec({"stages": [mask, {"kind": "refill", "checkpoint": "training:nope"}]})


def test_synthesize_takes_only_a_keystore_api_key_and_a_listed_endpoint():
    """A tenant's synthesize stage could name the server's environment as its API key and
    send it to an address of its choosing: an ``env:``/``file:`` key and a ``cache`` folder
    are refused at the field before parsing, an endpoint the operator did not list by the
    limits; what runs keeps no answers on disk."""
    from services.limits import pipeline_limits
    from services.settings import Settings
    from services.specs import for_service

    def synth(**llm):
        return {"stages": [{"kind": "redact"}, {"kind": "synthesize", "llm": {
            "base_url": "http://attacker.example/v1", "model": "m", **llm}}]}

    with pytest.raises(SpecInvalid) as ei:
        validate_spec(synth(api_key="env:PRIVATIZE_MASTER_KEY"))
    assert [e["path"] for e in ei.value.extra["errors"]] == ["stages.1.synthesize.llm.api_key"]
    assert "keystore:<id>" in ei.value.extra["errors"][0]["message"]
    with pytest.raises(SpecInvalid) as ei:
        validate_spec({**synth(api_key="keystore:0123456789abcdef"), "stages": [
            {"kind": "redact"}, {**synth()["stages"][1], "cache": "/srv/other-tenant/cache"}]})
    assert [e["path"] for e in ei.value.extra["errors"]] == ["stages.1.synthesize.cache"]
    spec = validate_spec(synth(api_key="keystore:0123456789abcdef"))
    assert key_references(spec) == [("stages.1.llm.api_key", "keystore:0123456789abcdef")]
    none = Settings(llm_base_urls="")
    listed = Settings(llm_base_urls="https://llm.internal/v1/, http://vllm:8000/v1")
    assert [p for p, _ in pipeline_limits(none, spec)] == ["stages.1.llm.base_url"]
    assert "PRIVATIZE_LLM_BASE_URLS" in pipeline_limits(none, spec)[0][1]
    assert pipeline_limits(listed, spec) == [("stages.1.llm.base_url", "not an LLM endpoint of this service (it "
                                              "calls https://llm.internal/v1, http://vllm:8000/v1)")]
    ok = validate_spec({"stages": [{"kind": "redact"}, {"kind": "synthesize", "llm": {
        "base_url": "https://llm.internal/v1", "model": "m"}}]})
    assert pipeline_limits(listed, ok) == []
    assert ok.stages[1].cache == ".llm-cache" and for_service(ok).stages[1].cache is None
    assert for_service(for_service(ok)) == for_service(ok)