"""Evaluations through the service: ``POST /v1/evaluations`` attacks some of a tenant's
succeeded trainings with ``attacks.job`` on Ray (the ``evaluate`` job kind),
``GET /v1/evaluations/{id}`` shows the per-model summary, ``.../report`` and
``.../report.json`` serve the report, and ``privatize submit evaluate`` drives it.

What must hold: a real evaluation (perplexity, MIA, canary exposure) of a real tiny
training on a real privatization output with canaries succeeds with its figures on the
row and the model's name in the report; a config naming a location on the server answers
422 with the field; another tenant's trainings, jobs, corpora, keys and evaluations answer
as ids that do not exist; what an active evaluation reads cannot be deleted; creation and
every report read are audited; neither the canary key nor the canaries it derives reach
the row, the stored config, the Ray job, its logs, the results or the answers. The first
tests need no server (the pieces, in process).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from typing import Annotated, Optional

from pydantic import Field

from attacks.registry import Attack, AttackSettings
from privatize.policy import DataSource, Quota, ServerPath
from services.errors import SpecInvalid
from tests.secrets_scan import leaks
from tests.services.conftest import CANARIES
from tests.services.test_trainings import _job_columns, server_test

T, J, C = "0123456789abcdef", "1111111111111111", "2222222222222222"
CONFIG = {"models": [{"name": "tiny crt", "training_id": T}],
          "mia": {"members": {"job_id": J}, "non_members": {"corpus_id": C}, "limit": 20, "group_size": 5},
          "perplexity": {"data": {"corpus_id": C}, "limit": 20}}
LOCATIONS = [("models.0.path", "/srv/models/other-tenant"), ("output", "/tmp/elsewhere"),
             ("mia.members", "/etc/passwd"), ("mia.non_members", "tenants/x/corpora/y/data.jsonl"),
             ("mia.reference", "/srv/reference"), ("perplexity.data", "s3://bucket/other/data.jsonl"),
             # sections that read files by path are not offered by the service at all
             ("reconstruction", {"data": "/etc/passwd", "candidates": "/etc/hosts"}),
             ("true_prefix", {"data": "/etc/passwd"}), ("corpus_stats", {"sources": {"x": "/etc/passwd"}}),
             ("cipher_outputs", {"key": "file:/srv/keys/entity.key", "prompts": "/etc/passwd"}),
             ("identifiers", {"members": "/srv/tenants/other/identifiers"})]


def _with(path: str, value, base: dict = CONFIG) -> dict:
    out = json.loads(json.dumps(base))
    node = out
    *parents, last = path.split(".")
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


# ---- the pieces, in process ------------------------------------------------------------------

def _refusal(config, settings=None) -> list[str]:
    from services.evaluations import check_limits, validate_config
    from services.settings import Settings

    with pytest.raises(SpecInvalid) as exc:
        check_limits(settings or Settings(), validate_config(config))
    return [e["path"] for e in exc.value.extra["errors"]]


class _MarkedProbe(Attack):
    """A plugin attack whose settings carry the service's markers (never run here)."""

    name = "probe_marked"
    title = "Probe (toy attack)"

    class Settings(AttackSettings):
        prompts: list[str] = Field(min_length=1, max_length=10)
        examples: Annotated[int, Quota("eval_max_examples")] = Field(10, ge=1, le=10_000_000)
        wordlist: Annotated[Optional[str], ServerPath(why="a file on the server: give prompts instead")] = None
        corpus: Annotated[Optional[str], DataSource()] = None


def test_a_plugin_attack_runs_through_the_service_within_its_markers():
    """Issue 49, part 3: the service runs registered attacks, plugins included, reading what
    it refuses from the markers on each attack's settings (``privatize.policy``): a field
    naming a file on the server (``ServerPath``) is refused when set, a size beyond a
    service quota (``Quota``) is refused at its field, a field naming texts to read
    (``DataSource``) takes a corpus or job reference as the papers' sections do (a location,
    at its field, is refused), and an unmarked one passes."""
    from attacks import registry
    from attacks.registry import register_attack
    from services.evaluations import check_limits, inputs_of, validate_config
    from services.settings import Settings

    restore = registry.ATTACKS.snapshot()
    register_attack(_MarkedProbe)
    try:
        ok = dict(CONFIG, attacks=[{"kind": "probe_marked", "prompts": ["Hello"], "examples": 50}])
        spec = validate_config(ok)
        check_limits(Settings(), spec)  # admitted: nothing marked is asked beyond the service's bounds
        assert spec.to_dict()["attacks"][0]["kind"] == "probe_marked"
        assert _refusal(dict(ok, attacks=[{"kind": "probe_marked", "prompts": ["x"], "wordlist": "/etc/passwd"}])) \
            == ["attacks.0.wordlist"]
        assert _refusal(dict(ok, attacks=[{"kind": "probe_marked", "prompts": ["x"], "examples": 10**6}])) \
            == ["attacks.0.examples"]
        # a DataSource field: a reference becomes its placeholder, then a location the job reads
        # (and an input an active evaluation holds); a location from the tenant is refused
        read = validate_config(dict(ok, attacks=[{"kind": "probe_marked", "prompts": ["x"], "corpus": {"corpus_id": C}}]))
        assert read.to_dict()["attacks"][0]["corpus"] == f"corpus:{C}"
        stored = {**read.to_dict(), "models": [{"name": "a", "path": f"jobs/{T}/output"}], "mia": None,
                  "perplexity": None, "attacks": [{**read.to_dict()["attacks"][0], "corpus": f"corpora/{C}/data.jsonl"}]}
        assert inputs_of(stored) == {T, C}
        assert _refusal(dict(ok, attacks=[{"kind": "probe_marked", "prompts": ["x"], "corpus": "/etc/passwd"}])) \
            == ["attacks.0.corpus"]
        assert _refusal(dict(ok, attacks=[{"kind": "probe_marked", "prompts": ["x"], "corpus": {"job_id": J},
                                           "wordlist": "/etc/hosts"}])) == ["attacks.0.wordlist"]
        # the service's schema says so: the entry's corpus is a reference, and the sections it
        # does not offer are not in it
        from attacks.config import config_model
        from services.evaluations import service_schema

        schema = config_model().model_json_schema()
        defs = schema["$defs"]
        out = service_schema(schema, lambda ref: defs[ref["$ref"].rsplit("/", 1)[1]])
        corpus = defs["ProbeMarkedEntry"]["properties"]["corpus"]  # optional: a reference or null
        assert corpus["anyOf"][1] == {"type": "null"}
        assert [set(o["required"]) for o in corpus["anyOf"][0]["oneOf"]] == [{"corpus_id"}, {"job_id"}]
        assert defs["MiaSettings"]["properties"]["members"]["oneOf"] == corpus["anyOf"][0]["oneOf"]
        assert defs["MiaEntry"]["properties"]["reference"]["anyOf"][0]["required"] == ["training_id"]
        assert "prompts" not in str(defs["ProbeMarkedEntry"]["properties"]["prompts"].get("oneOf", ""))
        assert not {"reconstruction", "true_prefix", "cipher_outputs", "identifiers", "corpus_stats",
                    "output"} & set(out["properties"])
        # a built-in attack the service does not offer is refused in the list form too
        assert _refusal(dict(ok, attacks=[{"kind": "reconstruction"}])) == ["attacks.0.kind"]
    finally:
        restore()


@pytest.mark.parametrize("path,value", LOCATIONS)
def test_a_config_naming_a_location_is_refused_with_the_field(path, value):
    assert _refusal(_with(path, value)) == [path]


def test_references_become_placeholders_then_locations_in_the_tenants_folder():
    from services.evaluations import inputs_of, training_ids, validate_config

    spec = validate_config(_with("mia.reference", {"training_id": T}))
    d = spec.to_dict()
    assert "output" not in d and d["models"][0]["path"] == f"training:{T}"
    assert (d["mia"]["members"], d["mia"]["non_members"], d["mia"]["reference"]) == \
        (f"job:{J}", f"corpus:{C}", f"training:{T}")
    stored = {**d, "models": [{"name": "a", "path": f"jobs/{T}/output"}],
              "mia": {**d["mia"], "members": f"jobs/{J}/output", "non_members": f"corpora/{C}/data.jsonl",
                      "reference": None},
              "perplexity": {**d["perplexity"], "data": f"corpora/{C}/data.jsonl"}}
    assert inputs_of(stored) == {T, J, C} and training_ids(stored) == [T]


def test_bad_references_and_bounds_name_the_field():
    assert _refusal(_with("models.0", {"name": "x"})) == ["models.0.training_id"]
    assert _refusal(_with("mia.members", {"corpus_id": C, "job_id": J})) == ["mia.members"]
    assert _refusal(_with("perplexity.data", {"path": "/etc"})) == ["perplexity.data"]
    assert _refusal(_with("mia.limit", 5)) == ["mia.limit"]  # the config's own bound
    assert _refusal(_with("canaries", {"key": "keystore:k", "digits": 9})) == ["canaries"]  # exact: <= 7 digits
    assert _refusal({"models": CONFIG["models"]}) == [""]  # nothing to run
    assert _refusal([1]) == [""]
    many = _with("scoring", {"workers": 16}, _with("mia.limit", 50_000, _with("canaries", {"key": "keystore:k",
                                                                                          "digits": 7})))
    assert sorted(_refusal(many)) == ["canaries.digits", "mia.limit", "scoring.workers"]
    from services.settings import Settings

    two = [{"name": "a", "training_id": T}, {"name": "b", "training_id": T}]
    assert _refusal(_with("models", two), Settings(eval_max_models=1)) == ["models"]


def test_attack_job_refuses_output_and_locations_outside_its_root(tmp_path, capsys):
    from attacks.job import locations, main

    cfg = {"models": [{"name": "m", "path": "jobs/x/output"}], "perplexity": {"data": "corpora/c/data.jsonl"}}
    assert locations(cfg) == [("models.0.path", "jobs/x/output"), ("perplexity.data", "corpora/c/data.jsonl")]
    for bad, field in (({**cfg, "output": "o"}, "output"),
                       ({**cfg, "perplexity": {"data": "../../etc/passwd"}}, "perplexity.data"),
                       ({**cfg, "models": [{"name": "m", "path": "/srv/x"}]}, "models.0.path")):
        (tmp_path / "cfg.json").write_text(json.dumps(bad))
        assert main([str(tmp_path / "cfg.json"), str(tmp_path), str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"attack: error: {field}: "), err
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    assert main([str(tmp_path / "cfg.json"), str(tmp_path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "jobs/x/output" in err and str(tmp_path) not in err, err  # named as the config names it


def test_attack_job_reads_and_writes_remote_storage(tmp_path, monkeypatch):
    """A remote ROOT's locations are copied to local folders (and named back in results);
    a remote OUTPUT gets the report, then evaluation.json (on a loopback S3 server)."""
    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    from attacks.config import parse_config
    from attacks.job import _upload, localize
    from tests.services.conftest import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        for k, v in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
                     "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(k, v)
        fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1", scheme="http",
                               endpoint_override=f"127.0.0.1:{port}", allow_bucket_creation=True)
        fs.create_dir("evals-bucket")
        files = {"root/jobs/t1/output/model/config.json": b"{}", "root/jobs/t1/output/summary.json": b"{}",
                 "root/corpora/c1/data.jsonl": b'{"text": "x"}\n'}
        for path, data in files.items():
            with fs.open_output_stream(f"evals-bucket/{path}") as f:
                f.write(data)
        cfg = parse_config({"models": [{"name": "m", "path": "jobs/t1/output"}],
                            "perplexity": {"data": "corpora/c1/data.jsonl"}})
        local, names = localize(cfg, "s3://evals-bucket/root", tmp_path)
        model, data = Path(local.models[0].path), Path(local.perplexity.data)
        assert (model / "model" / "config.json").read_bytes() == b"{}" and (model / "summary.json").is_file()
        assert data.read_bytes() == b'{"text": "x"}\n' and tmp_path in model.parents and tmp_path in data.parents
        assert names == {str(model): "jobs/t1/output", str(data): "corpora/c1/data.jsonl"}
        out = tmp_path / "out"
        out.mkdir()
        (out / "report.html").write_text("<!DOCTYPE html>")
        (out / "evaluation.json").write_text("{}")
        _upload(out, "s3://evals-bucket/evals/e1/output")
        got = fs.get_file_info(pafs.FileSelector("evals-bucket/evals/e1/output"))
        assert sorted(i.base_name for i in got) == ["evaluation.json", "report.html"]
    finally:
        server.stop()


def test_the_summary_is_per_model_from_evaluation_json():
    from services.evaluations import summary_counts

    ev = {"id": "e", "created": "2026-01-01T00:00:00Z", "models": [
        {"name": "a", "path": "jobs/t/output", "perplexity": float("inf"),
         "exposure": {"format": "f", "digits": 3, "candidates": 1000, "method": "exact", "scored": "s",
                      "canaries": [], "max_exposure": 4.123456, "mean_exposure": 3.0,
                      "max_reference_exposure": 1.0},
         "mia": {"members": 10, "non_members": 10, "context": "c", "scores": [
             {"score": "loss", "auc": 0.61234, "tpr_at": [], "fpr": [], "tpr": []},
             {"score": "zlib", "auc": 0.7, "tpr_at": [], "fpr": [], "tpr": []}]}}]}
    assert summary_counts(ev) == {"models": [{"name": "a", "perplexity": None, "max_exposure": 4.123,
                                              "mia_auc": {"score": "zlib", "auc": 0.7}}]}
    assert summary_counts({"models": "nonsense"}) is None


# ---- what an active evaluation reads stays (in process, Ray faked) ---------------------------

def test_what_an_active_evaluation_reads_cannot_be_deleted(tmp_path, monkeypatch):
    from services.context import build_context
    from services.corpora import delete_corpus
    from services.db import session_scope
    from services.errors import Conflict, NotFound
    from services.jobkinds import EVALUATE
    from services.jobs import cancel, create_job, delete_job, entrypoint_for
    from services.keys import create_key
    from services.models import Corpus, Job
    from services.settings import Settings
    from services.tenants import create_tenant
    from tests.services.test_jobkinds import FakeCluster

    monkeypatch.setenv("PRIVATIZE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PRIVATIZE_ENV", "development")
    ctx = build_context(Settings())
    ctx.cluster = FakeCluster()
    ctx.cluster.stop = lambda job_id: True
    with session_scope(ctx.sessions) as s:
        tenant, _, _ = create_tenant(s, "t", storage_limit_bytes=10**9, max_concurrent_jobs=5)
        other, _, _ = create_tenant(s, "u", storage_limit_bytes=10**9, max_concurrent_jobs=5)
        tid = tenant.id
        for cid, who in ((C, tid), ("3" * 16, other.id)):
            s.add(Corpus(id=cid, tenant_id=who, name="c", format="jsonl", bytes=10, records=3, sha256="0" * 64,
                         storage_path=f"tenants/{who}/corpora/{cid}/data.jsonl"))
        for jid, kind in ((J, "privatize"), (T, "train")):
            s.add(Job(id=jid, tenant_id=tid, corpus_id=C, kind=kind, status="succeeded", spec={},
                      spec_sha256="0" * 64, key_ids=[], output_path=f"tenants/{tid}/jobs/{jid}/output"))
        hmac_key = create_key(s, ctx.master, tid, kind="hmac").id
        text_key = create_key(s, ctx.master, tid, kind="vigenere", length=64).id
        theirs = create_key(s, ctx.master, other.id, kind="hmac").id

    def refused(config, status):
        with pytest.raises(status) as exc:
            create_job(ctx, tid, None, config, kind=EVALUATE)
        return exc.value

    # references the tenant does not have answer as missing ids; keys like a spec's keys
    err = refused(_with("perplexity.data", {"corpus_id": "3" * 16}), NotFound)
    assert (err.message, err.extra) == (f"no corpus {'3' * 16!r}", {"path": "perplexity.data.corpus_id"})
    assert refused(_with("models.0.training_id", J), NotFound).message == f"no training {J!r}"
    err = refused(_with("mia.members", {"job_id": T}), Conflict)
    assert (err.message, err.extra) == (f"job {T} is a train job; give a privatize job", {"path": "mia.members.job_id"})
    for key, why in ((f"keystore:{theirs}", f"no key {theirs!r}"), ("file:/etc/canary.key", "file: key references"),
                     (f"keystore:{text_key}", "is a vigenere key; this field takes hmac keys")):
        err = refused(_with("canaries", {"key": key, **CANARIES}), SpecInvalid)
        assert err.extra["errors"][0]["path"] == "canaries.key" and why in err.message
        # the same attack as an entry of ``attacks``: its key is checked the same way (a review
        # found it was not: a file: key read on the worker)
        err = refused(_with("attacks", [{"kind": "canaries", "key": key, **CANARIES}]), SpecInvalid)
        assert err.extra["errors"][0]["path"] == "attacks.0.key" and why in err.message
    # mia as an entry: its reference model is a training of the tenant's, never a path
    entry = {"kind": "mia", "members": {"job_id": J}, "non_members": {"corpus_id": C}, "limit": 20, "group_size": 5}
    as_entry = {k: v for k, v in CONFIG.items() if k != "mia"}
    err = refused(dict(as_entry, attacks=[dict(entry, reference="/srv/storage/tenants/u/jobs/x/output")]), SpecInvalid)
    assert [e["path"] for e in err.extra["errors"]] == ["attacks.0.reference"]
    err = refused(dict(as_entry, attacks=[dict(entry, reference={"training_id": "4" * 16})]), NotFound)
    assert err.extra == {"path": "attacks.0.reference.training_id"}
    with session_scope(ctx.sessions) as s:
        assert s.query(Job).filter_by(kind=EVALUATE).count() == 0
    # admitted: every reference a location in the tenant's folder, which is the job's input
    ev = create_job(ctx, tid, None, _with("canaries", {"key": f"keystore:{hmac_key}", **CANARIES}), kind=EVALUATE)
    assert (ev.kind, ev.corpus_id, ev.input_job_id, ev.status, ev.key_ids) == (EVALUATE, None, None, "pending",
                                                                               [hmac_key])
    assert ev.spec["models"][0]["path"] == f"jobs/{T}/output" and "output" not in ev.spec
    ev2 = create_job(ctx, tid, None, dict(as_entry, attacks=[dict(entry, reference={"training_id": T}),
                                                           {"kind": "canaries", "key": f"keystore:{hmac_key}",
                                                            **CANARIES}]), kind=EVALUATE)
    assert ev2.spec["attacks"][0]["reference"] == f"jobs/{T}/output" and ev2.key_ids == [hmac_key]
    assert ev2.spec["attacks"][0]["members"] == f"jobs/{J}/output"
    was, ctx.cluster.status = ctx.cluster.status, "STOPPED"
    assert cancel(ctx, tid, ev2.id).status == "cancelled"  # (what follows is about ev's inputs alone)
    ctx.cluster.status = was
    assert ev.spec["mia"]["members"] == f"jobs/{J}/output"
    assert ev.spec["perplexity"]["data"] == ev.spec["mia"]["non_members"] == f"corpora/{C}/data.jsonl"
    sent = ctx.cluster.submitted[ev.id]
    assert entrypoint_for(ctx, ev, None).split()[-2] == ctx.storage.location(f"tenants/{tid}")
    assert sent["runtime_env"]["env_vars"]["PRIVATIZE_JOB_ID"] == ev.id
    assert sent["runtime_env"]["env_vars"]["PRIVATIZE_KEY_BUNDLE"].endswith(f"/jobs/{ev.id}/keys.json")
    assert "privatize_corpus" not in sent["metadata"] and sent["metadata"]["privatize_kind"] == EVALUATE
    for delete, rid in ((delete_job, T), (delete_job, J), (delete_corpus, C)):
        with pytest.raises(Conflict, match=f"active job\\(s\\) {ev.id}"):
            delete(ctx, tid, rid)
    ctx.cluster.status = "STOPPED"
    assert cancel(ctx, tid, ev.id).status == "cancelled"
    delete_job(ctx, tid, T)  # once it has ended, they can go
    with pytest.raises(NotFound):
        delete_job(ctx, tid, T)


# ---- through the real service ------------------------------------------------------------------

def _secrets(key: bytes) -> list[str]:
    from privatize.stages.canaries import canary_text, derive_secrets

    return [canary_text("My ID is: {secret}", x) for x in derive_secrets(key, CANARIES["digits"],
                                                                        CANARIES["count"] + CANARIES["held_out"])]


@pytest.fixture(scope="module")
def evaluated(service, tiny_training, tmp_path_factory):
    """An evaluation (perplexity, MIA, canary exposure) of the shared tiny training on a
    privatization output with canaries (``tests/services/conftest.py``), run with
    ``privatize submit evaluate --wait --download`` (shared by the server tests below)."""
    import yaml

    from privatize.corpus import make_corpus

    t, job, key, training = (tiny_training[k] for k in ("tenant", "job", "key", "training"))
    assert training["status"] == "succeeded", training["message"]
    tmp = tmp_path_factory.mktemp("evaluation")
    make_corpus(tmp / "heldout.jsonl", n_docs=40, seed=8)
    heldout = t.upload(tmp / "heldout.jsonl").json()
    config = {"models": [{"name": "tiny crt", "training_id": training["id"], "protection": "canaries only"}],
              "canaries": {"key": key["ref"], **CANARIES},
              "mia": {"members": {"job_id": job["id"]}, "non_members": {"corpus_id": heldout["id"]}, "limit": 20,
                      "group_size": 5},
              "perplexity": {"data": {"corpus_id": heldout["id"]}, "limit": 20}}
    (tmp / "evaluation.yaml").write_text(yaml.safe_dump(config))
    env = {"PRIVATIZE_URL": service.url, "PRIVATIZE_TOKEN": t.token}
    t0 = time.monotonic()
    r = service.cli("submit", "evaluate", str(tmp / "evaluation.yaml"), "--wait", "--poll", "0.5", "--download",
                    str(tmp / "dl"), env=env, check=False, timeout=300)
    seconds = time.monotonic() - t0
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
    logs = t.http.get(f"/v1/jobs/{out['id']}/logs").text if out.get("id") else ""
    assert r.returncode == 0, (r.stderr[-2000:], out.get("message"), logs[-6000:])
    return {"tenant": t, "job": job, "training": training, "heldout": heldout, "key": key, "cli": out,
            "stderr": r.stderr, "dir": tmp, "seconds": seconds, "logs": logs}


@server_test
def test_an_evaluation_of_a_tiny_training(service, evaluated):
    t, out, training = evaluated["tenant"], evaluated["cli"], evaluated["training"]
    eid = out["id"]
    assert (out["kind"], out["status"]) == ("evaluate", "succeeded"), out
    assert t.http.get(f"/v1/evaluations/{eid}").json()["training_ids"] == [training["id"]]
    (m,) = out["summary"]["models"]
    assert (m["name"], m["training_id"]) == ("tiny crt", training["id"])
    assert math.isfinite(m["perplexity"]) and m["perplexity"] > 1
    assert 0 <= m["max_exposure"] <= math.log2(10 ** CANARIES["digits"]) + 1e-9
    assert m["mia_auc"]["score"] in ("loss", "zlib", "min_k", "min_k_pp") and 0 <= m["mia_auc"]["auc"] <= 1
    assert f"submitted evaluation {eid}\n" in evaluated["stderr"]
    # the API's view agrees; the evaluation is a job of kind evaluate reading the tenant's folder
    got = t.http.get(f"/v1/evaluations/{eid}").json()
    assert (got["status"], got["summary"], got["key_ids"]) == ("succeeded", out["summary"], [evaluated["key"]["id"]])
    assert got["config"]["models"][0]["path"] == f"jobs/{training['id']}/output"
    assert got["config"]["mia"]["members"] == f"jobs/{evaluated['job']['id']}/output"
    assert got["config"]["perplexity"]["data"].startswith(f"corpora/{evaluated['heldout']['id']}/")
    assert [e["id"] for e in t.http.get("/v1/evaluations").json()] == [eid]
    as_job = t.http.get(f"/v1/jobs/{eid}").json()
    assert (as_job["kind"], as_job["corpus_id"], as_job["input_job_id"]) == ("evaluate", None, None)
    r = t.http.get(f"/v1/jobs/{eid}/results")
    assert r.status_code == 404 and f"/v1/evaluations/{eid}/report" in r.json()["detail"]
    # the report: one HTML page naming the model, and the results behind it, as downloaded
    r = t.http.get(f"/v1/evaluations/{eid}/report")
    assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.text.lstrip().lower().startswith("<!doctype html") and "tiny crt" in r.text and eid in r.text
    assert "default-src 'none'" in r.headers["content-security-policy"]
    assert (evaluated["dir"] / "dl" / "report.html").read_bytes() == r.content
    r = t.http.get(f"/v1/evaluations/{eid}/report.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    ev = r.json()
    assert ev["id"] == eid and [x["name"] for x in ev["models"]] == ["tiny crt"]
    assert ev["models"][0]["path"] == f"jobs/{training['id']}/output"  # never a path on the server
    exposure = ev["models"][0]["attacks"]["canaries"]  # each result keyed by its attack
    assert [c["repeats"] for c in exposure["canaries"]] == [5, 5, 0, 0]
    assert ev["models"][0]["training"]["protection"] == "canaries only"
    assert ev["models"][0]["attacks"]["mia"]["members"] == ev["models"][0]["attacks"]["mia"]["non_members"] == 20
    for blob in (r.content, (evaluated["dir"] / "dl" / "report.html").read_bytes()):
        assert str(service.data).encode() not in blob and b"attack-job-" not in blob
    # what the job ran: attacks.job on the tenant's folder, named by the service
    info = service.ray_jobs().get_job_info(eid)
    assert info.entrypoint.startswith("python -m services.jobrun evaluate ")
    assert info.entrypoint.split()[-2].endswith(f"tenants/{t.id}")
    assert info.metadata["privatize_kind"] == "evaluate" and "privatize_corpus" not in info.metadata
    assert not service.files.exists(f"tenants/{t.id}/jobs/{eid}/keys.json")  # the key bundle went with the job
    print(f"evaluation through the service: {evaluated['seconds']:.1f} s (CLI submit to succeeded)")


@server_test
def test_the_audit_log_has_the_evaluation_and_every_report_read(service, evaluated):
    t, eid = evaluated["tenant"], evaluated["cli"]["id"]
    before = t.http.get("/v1/audit", params={"resource_id": eid, "action": "evaluation.report"}).json()["events"]
    assert t.http.get(f"/v1/evaluations/{eid}/report.json").status_code == 200
    events = t.http.get("/v1/audit", params={"resource_id": eid}).json()["events"]
    created = [e for e in events if e["action"] == "evaluation.create"]
    assert len(created) == 1 and created[0]["status"] == 201 and created[0]["actor"].startswith("token:")
    assert created[0]["detail"] == {"config_sha256": t.http.get(f"/v1/evaluations/{eid}").json()["config_sha256"],
                                    "training_ids": [evaluated["training"]["id"]]}
    reads = [e for e in events if e["action"] == "evaluation.report"]
    assert len(reads) == len(before) + 1 and reads[0]["detail"] == {"file": "evaluation.json"}
    assert {e["detail"]["file"] for e in reads} >= {"report.html", "evaluation.json"}  # (the CLI's download)
    assert all(e["status"] == 200 and e["request_id"] for e in reads)
    assert [e["action"] for e in events if e["actor"] == "system"] == ["job.succeeded"]


@server_test
def test_no_key_material_or_canary_reaches_the_evaluation(service, evaluated):
    from privatize.keys import key_from_json

    t, eid = evaluated["tenant"], evaluated["cli"]["id"]
    secret = key_from_json(t.http.post(f"/v1/keys/{evaluated['key']['id']}/export").json(), "export").secret
    canaries = [c.encode() for c in _secrets(secret)]
    row = service.query("select * from jobs where id = :id", id=eid)
    assert row and json.loads(dict(zip(_job_columns(service), row[0]))["key_ids"]) == [evaluated["key"]["id"]]
    info = service.ray_jobs().get_job_info(eid)
    base = f"tenants/{t.id}/jobs/{eid}"
    blobs = {"row": json.dumps(row, default=str).encode(),
             "audit": json.dumps(service.query("select * from audit_events where resource_id = :id", id=eid),
                                 default=str).encode(),
             "spec.json": service.files.read(f"{base}/spec.json"),
             "evaluation.json": service.files.read(f"{base}/output/evaluation.json"),
             "report.html": service.files.read(f"{base}/output/report.html"),
             "ray job": json.dumps({"entrypoint": info.entrypoint, "metadata": info.metadata,
                                    "runtime_env": info.runtime_env}).encode(),
             "logs": evaluated["logs"].encode(), "stderr": evaluated["stderr"].encode(),
             "answers": b"\n".join(t.responses)}
    for where, blob in blobs.items():
        assert not leaks(blob, secret), where
        assert not [c for c in canaries if c in blob], where
    # the canaries are in what the model was trained on (so the exposure measures something)
    shards = service.files.list(f"tenants/{t.id}/jobs/{evaluated['job']['id']}/output/shards")
    import pyarrow.parquet as pq

    text = "\n".join(x for p in shards for x in pq.read_table(service.files.fs.open_input_file(
        f"{service.files.root}/{p}")).column("text").to_pylist() if x)
    assert [text.count(c.decode()) for c in canaries] == [5, 5, 0, 0]


@server_test
def test_refusals(service, evaluated):
    t, eid = evaluated["tenant"], evaluated["cli"]["id"]
    job, training, heldout = evaluated["job"], evaluated["training"], evaluated["heldout"]
    ok = {"models": [{"name": "m", "training_id": training["id"]}], "perplexity": {"data": {"corpus_id":
                                                                                          heldout["id"]}}}

    def post(config, who=t):
        return who.http.post("/v1/evaluations", json={"config": config})

    # a location on the server, anywhere one could go: 422 naming the field, nothing created
    for path, value in LOCATIONS:
        r = post(_with(path, value, ok))
        assert r.status_code == 422, (path, r.text)
        assert [e["path"] for e in r.json()["errors"]] == [path] and path in r.json()["detail"], r.json()
    r = post({**ok, "canaries": {"key": "file:/etc/canary.key", **CANARIES}})
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "canaries.key"
    assert post("not an object").status_code == 422 and t.http.post("/v1/evaluations", json={}).status_code == 422
    # not a training, or not a succeeded one of the tenant's
    r = post(_with("models.0.training_id", job["id"], ok))
    assert r.status_code == 404 and r.json() == {"detail": f"no training {job['id']!r}", "code": "not_found",
                                                 "path": "models.0.training_id"}
    r = post(_with("models.0.training_id", eid, ok))
    assert r.status_code == 404 and r.json()["detail"] == f"no training {eid!r}"
    # another tenant: the owner's ids answer exactly as ids that do not exist
    other = service.new_tenant("snoop-evaluations")
    # (another tenant's corpora, jobs and keys: in process, above)
    r, r2 = post(ok, other), post(_with("models.0.training_id", "0" * 16, ok), other)
    assert r.status_code == r2.status_code == 404, r.text
    assert r.json()["detail"].replace(training["id"], "X") == r2.json()["detail"].replace("0" * 16, "X")
    assert r.json()["path"] == r2.json()["path"] == "models.0.training_id"
    for path in (f"/v1/evaluations/{eid}", f"/v1/evaluations/{eid}/report", f"/v1/evaluations/{eid}/report.json",
                 f"/v1/jobs/{eid}", f"/v1/jobs/{eid}/logs"):
        r, r2 = other.http.get(path), other.http.get(path.replace(eid, "0" * 16))
        assert r.status_code == r2.status_code == 404, path
        assert r.json()["detail"].replace(eid, "X") == r2.json()["detail"].replace("0" * 16, "X")
    assert other.http.delete(f"/v1/jobs/{eid}").status_code == 404
    assert other.http.get("/v1/evaluations").json() == []
    snooped = other.http.get("/v1/audit", params={"action": "evaluation.report"}).json()["events"]
    assert {(e["resource_id"], e["status"]) for e in snooped} == {(eid, 404), ("0" * 16, 404)}
    # a training is no evaluation; the owner's evaluation is untouched
    assert t.http.get(f"/v1/evaluations/{training['id']}").json()["detail"] == f"no evaluation {training['id']!r}"
    assert t.http.get(f"/v1/evaluations/{eid}").json()["status"] == "succeeded"
