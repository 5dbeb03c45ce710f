"""Issue 49: a kind's ``config`` in the service's OpenAPI document is its config model's
schema (``JobKind.config_model``, ``services.routes.kinds.ConfigSchema``), not a free-form
object: an evaluation's ``attacks`` are the registered attacks by ``kind``, a training's
config its sections; every ``$ref`` of the document resolves; and what the service answers
for a config it refuses is still the kind's own 422, field paths and all (FastAPI checks
only that ``config`` is an object).

In process: FastAPI's TestClient on SQLite with a Ray address nothing answers on."""

from __future__ import annotations

import pytest
from pydantic import Field

from attacks.registry import ATTACKS, Attack, AttackSettings, register_attack


@pytest.fixture
def api(tmp_path):
    from fastapi.testclient import TestClient

    from services.app import create_app
    from services.db import make_engine, session_factory, session_scope
    from services.settings import Settings
    from services.tenants import create_tenant

    settings = Settings(env="development", data_dir=tmp_path / "data", ray_address="http://127.0.0.1:9",
                        poll_interval_s=60)
    with TestClient(create_app(settings)) as client:
        engine = make_engine(settings.effective_database_url)
        with session_scope(session_factory(engine)) as s:
            _, _, token = create_tenant(s, "openapi", storage_limit_bytes=1 << 30, max_concurrent_jobs=4)
        client.headers["Authorization"] = f"Bearer {token}"
        yield client
        engine.dispose()


def _refs(node, out: set[str]) -> set[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                out.add(v)
            else:
                _refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _refs(v, out)
    return out


def _resolve(doc: dict, ref: str) -> dict:
    assert ref.startswith("#/"), ref
    node = doc
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _body_config(doc: dict, path: str) -> dict:
    """The ``config`` (or ``spec``) property of the JSON body of ``POST path``."""
    body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    body = _resolve(doc, body["$ref"]) if "$ref" in body else body
    props = body["properties"]
    config = props.get("config", props.get("spec"))
    return _resolve(doc, config["$ref"]) if "$ref" in config else config


def _attack_kinds(doc: dict, config: dict) -> set[str]:
    items = config["properties"]["attacks"]["items"]
    entry = _resolve(doc, items["$ref"]) if "$ref" in items else items
    assert entry["discriminator"]["propertyName"] == "kind"
    members = {_resolve(doc, m["$ref"])["properties"]["kind"]["const"] for m in entry["oneOf"]}
    assert set(entry["discriminator"]["mapping"]) == members
    return members


def test_each_kinds_config_is_its_model_and_every_ref_resolves(api):
    from openapi_spec_validator import validate

    doc = api.get("/openapi.json").json()
    validate(doc)
    for ref in _refs(doc, set()):
        _resolve(doc, ref)  # a KeyError is a broken $ref
    evaluation = _body_config(doc, "/v1/evaluations")
    assert _attack_kinds(doc, evaluation) == set(ATTACKS.names())
    assert {"models", "attacks", "scoring"} <= set(evaluation["properties"])
    assert "output" not in evaluation["properties"]  # the service sets it
    model = _resolve(doc, evaluation["properties"]["models"]["items"]["$ref"])
    assert {"training_id", "model"} <= set(model["properties"]) and "path" not in model["properties"]
    mia = _resolve(doc, evaluation["properties"]["mia"]["anyOf"][0]["$ref"])  # data sources are references
    assert [set(o["required"]) for o in mia["properties"]["members"]["oneOf"]] == [{"corpus_id"}, {"job_id"}]
    # the reference model: one of the tenant's trainings, or null (it is optional)
    assert mia["properties"]["reference"]["anyOf"] == [{**mia["properties"]["reference"]["anyOf"][0],
                                                        "required": ["training_id"]}, {"type": "null"}]
    training = _body_config(doc, "/v1/trainings")
    assert {"kind", "optim", "dp", "data", "model"} <= set(training["properties"])
    assert "target_epsilon" in _resolve(doc, training["properties"]["dp"]["anyOf"][0]["$ref"])["properties"]
    assert {"epochs", "holdout", "map"} <= set(_body_config(doc, "/v1/detectors")["properties"])
    assert "stages" in _body_config(doc, "/v1/jobs")["properties"]  # privatize's pipeline spec
    # GET /v1/kinds: the same schema, its definitions under its own $defs
    kinds = {k["name"]: k for k in api.get("/v1/kinds").json()}
    body = kinds["evaluate"]["body"]
    for ref in _refs(body, set()):
        _resolve(body, ref)
    assert _attack_kinds(body, body["properties"]["config"]) == set(ATTACKS.names())


class Probe(Attack):
    """A plugin attack (never run here)."""

    name = "probe_openapi"
    title = "Probe (toy attack)"

    class Settings(AttackSettings):
        prompts: list[str] = Field(min_length=1, max_length=10)


def test_a_plugin_attack_registered_before_the_app_is_in_its_schema(tmp_path):
    from fastapi.testclient import TestClient

    from services.app import create_app
    from services.settings import Settings

    restore = ATTACKS.snapshot()
    try:
        register_attack(Probe)
        settings = Settings(env="development", data_dir=tmp_path / "data", ray_address="http://127.0.0.1:9")
        doc = TestClient(create_app(settings)).get("/openapi.json").json()
        assert "probe_openapi" in _attack_kinds(doc, _body_config(doc, "/v1/evaluations"))
    finally:
        restore()


def test_a_refused_config_is_still_the_kinds_own_422(api):
    from services.errors import SpecInvalid
    from services.jobkinds import job_kind

    bad = {"models": [{"name": "a", "training_id": "t" * 8}],
           "attacks": [{"kind": "canaries", "key": "keystore:k", "digits": 9}]}
    with pytest.raises(SpecInvalid) as own:
        job_kind("evaluate").validate(bad)
    r = api.post("/v1/evaluations", json={"config": bad})
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == own.value.extra["errors"] and r.json()["detail"] == own.value.message
    assert r.json()["errors"][0]["path"] == "attacks.0.canaries", r.text
    # a config that is not an object is FastAPI's refusal, as before
    r = api.post("/v1/evaluations", json={"config": [1]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "config"], r.text
