"""Detector adaptation through the service (issue 51, item 2): ``POST /v1/detectors`` on an
annotated corpus (the ``adapt`` kind, ``privatize.adapt_job`` on Ray), its evaluation as its
summary, and a privatize spec's redact stage naming it as ``model: detector:<id>``.

In process (the app with its storage, Ray unreachable: jobs stay queued): the config's
refusals (422 naming the field), the quota, another tenant's corpus or detector (404), a
detector that has not succeeded (409), a server path as redact's model refused, and the
location the workers get. One test on the real service trains a detector on a tiny sample
annotating a made-up record number type (80 short notes, 6 epochs: seconds of training, as
the CLI's test) and redacts with it, through the service, sentences it never saw.
"""

from __future__ import annotations

import json

import pytest

from services.errors import SpecInvalid
from tests.privatize.test_ner_adapt import MRN_UNSEEN as UNSEEN
from tests.privatize.test_ner_adapt import make_sample



def sample_bytes(n: int = 80) -> bytes:
    """Short notes annotating only a made-up record number type, MRN (two letters, four
    digits, a letter), which no recognizer of the default detector knows (the CLI's test's)."""
    return "".join(json.dumps(r) + "\n" for r in make_sample(n)).encode("utf-8")


# ---- in process -------------------------------------------------------------------------------

@pytest.fixture
def api(tmp_path):
    """The app in process (storage on local files, a Ray address nothing answers: jobs stay
    queued) with two tenants, each with an annotated corpus; ``make_job`` writes a job row."""
    from fastapi.testclient import TestClient

    from services.app import create_app
    from services.db import make_engine, session_factory, session_scope
    from services.settings import Settings
    from services.tenants import create_tenant

    settings = Settings(env="development", data_dir=tmp_path / "data", ray_address="http://127.0.0.1:9",
                        poll_interval_s=60, detector_max_epochs=5)
    with TestClient(create_app(settings)) as client:
        engine = make_engine(settings.effective_database_url)
        factory = session_factory(engine)
        tenants = {}
        for name in ("acme", "other"):
            with session_scope(factory) as s:
                tenant, _, token = create_tenant(s, f"det-{name}", storage_limit_bytes=1 << 30,
                                                 max_concurrent_jobs=8)
                tid = tenant.id
            headers = {"Authorization": f"Bearer {token}"}
            r = client.post("/v1/corpora?format=jsonl&name=annotated", content=sample_bytes(), headers=headers)
            assert r.status_code == 201, r.text
            tenants[name] = {"id": tid, "headers": headers, "corpus": r.json()["id"]}

        def make_job(who: str, kind: str, status: str, spec: dict | None = None) -> str:
            from services.models import Job, new_id
            from services.storage import job_dir

            t = tenants[who]
            jid = new_id()
            with session_scope(factory) as s:
                s.add(Job(id=jid, tenant_id=t["id"], corpus_id=t["corpus"], kind=kind, status=status,
                          spec=spec or {}, spec_sha256="0" * 64, key_ids=[],
                          output_path=f"{job_dir(t['id'], jid)}/output"))
            return jid

        yield {"client": client, "tenants": tenants, "make_job": make_job, "ctx": client.app.state.ctx,
               "sessions": factory}
        engine.dispose()


def _post(api, who: str, config, corpus: str | None = None):
    t = api["tenants"][who]
    return api["client"].post("/v1/detectors", json={"corpus_id": corpus or t["corpus"], "config": config},
                              headers=t["headers"])


def _paths(r) -> list[str]:
    return [e["path"] for e in r.json()["errors"]]


def test_the_kind_is_registered_with_its_resource(api):
    kinds = {k["name"]: k for k in api["client"].get("/v1/kinds", headers=api["tenants"]["acme"]["headers"]).json()}
    assert kinds["adapt"]["resource"] == "detectors"
    paths = api["client"].get("/openapi.json").json()["paths"]
    assert {"/v1/detectors", "/v1/detectors/{job_id}", "/v1/detectors/{job_id}/detector.json"} <= set(paths)


def test_a_detector_job_is_admitted_with_its_config(api):
    r = _post(api, "acme", {"epochs": 2, "seed": 3, "map": {"Patient": "PERSON"}, "complete": True})
    assert r.status_code == 201, r.text
    got = r.json()
    assert got["kind"] == "adapt" and got["reference"] == f"detector:{got['id']}"
    assert got["config"] == {"format": "jsonl", "holdout": 0.2, "epochs": 2, "seed": 3, "map": {"Patient": "PERSON"},
                             "complete": True, "general_rehearsal": 0.5, "sample_terms": True}
    assert got["corpus_id"] == api["tenants"]["acme"]["corpus"] and got["status"] == "queued"
    h = api["tenants"]["acme"]["headers"]
    assert [j["id"] for j in api["client"].get("/v1/detectors", headers=h).json()] == [got["id"]]
    assert api["client"].get(f"/v1/detectors/{got['id']}", headers=h).json()["id"] == got["id"]
    # what the driver runs: the kind's module on the corpus's own location, into the job's folder
    from services.jobs import entrypoint_for
    from services.db import session_scope
    from services.models import Corpus, Job

    with session_scope(api["sessions"]) as s:
        job = s.get(Job, got["id"])
        ep = entrypoint_for(api["ctx"], job, s.get(Corpus, job.corpus_id))
    assert ep.startswith("python -m services.jobrun adapt ")
    assert f"tenants/{api['tenants']['acme']['id']}/corpora/" in ep and f"jobs/{got['id']}/output" in ep
    # an audit entry names the action
    rows = api["ctx"].sessions
    from sqlalchemy import text

    with rows() as s:
        actions = [a for (a,) in s.execute(text("select action from audit_events")).all()]
    assert "detector.create" in actions


@pytest.mark.parametrize("config, path", [
    ({"epochs": 0}, "epochs"),
    ({"epochs": 51}, "epochs"),
    ({"holdout": 1.0}, "holdout"),
    ({"format": "multiwoz"}, "format"),
    ({"map": {"MRN": "lower"}}, "map.MRN"),
    ({"complete": "everything"}, "complete"),
    ({"output": "/tmp/x"}, "output"),
    ({"annotated": "/etc/passwd"}, "annotated"),
])
def test_bad_configs_answer_422_naming_the_field(api, config, path):
    r = _post(api, "acme", config)
    assert api["client"].post("/v1/detectors", json={"corpus_id": api["tenants"]["acme"]["corpus"],
                                                     "config": "epochs: 2"},
                              headers=api["tenants"]["acme"]["headers"]).status_code == 422
    assert r.status_code == 422, r.text
    assert _paths(r) == [path]


def test_epochs_beyond_the_quota_answer_422(api):
    r = _post(api, "acme", {"epochs": 6})  # the model takes 50, this service 5
    assert r.status_code == 422 and _paths(r) == ["epochs"]
    assert "at most 5" in r.json()["errors"][0]["message"]


def test_another_tenants_corpus_is_not_found(api):
    r = _post(api, "acme", {"epochs": 1}, corpus=api["tenants"]["other"]["corpus"])
    assert r.status_code == 404, r.text
    assert api["client"].get("/v1/detectors", headers=api["tenants"]["acme"]["headers"]).json() == []


def test_another_tenants_detector_is_not_found(api):
    theirs = api["make_job"]("other", "adapt", "succeeded")
    h = api["tenants"]["acme"]["headers"]
    c = api["client"]
    assert c.get(f"/v1/detectors/{theirs}", headers=h).status_code == 404
    assert c.get(f"/v1/detectors/{theirs}/detector.json", headers=h).status_code == 404
    r = c.post("/v1/jobs", json={"corpus_id": api["tenants"]["acme"]["corpus"],
                                 "spec": {"version": 1, "stages": [{"kind": "redact", "model": f"detector:{theirs}"}]}},
               headers=h)
    assert r.status_code == 404, r.text
    # the owner's own detector is found
    oh = api["tenants"]["other"]["headers"]
    assert c.get(f"/v1/detectors/{theirs}", headers=oh).status_code == 200


def _redact_job(api, who: str, model, kind: str = "redact"):
    t = api["tenants"][who]
    stage = {"kind": kind, "model": model}
    if kind == "mask":
        stage["technique"] = "entity_tagger"
    return api["client"].post("/v1/jobs", json={"corpus_id": t["corpus"], "spec": {"version": 1, "stages": [stage]}},
                              headers=t["headers"])


@pytest.mark.parametrize("model", ["/opt/models/en_core_web_lg", "../../tenants/x/jobs/y/output/detector",
                                   "models/x", ".hidden", "C:\\models\\x", "detector:../x", "training:0123456789abcdef"])
def test_a_path_as_redacts_model_is_refused(api, model):
    r = _redact_job(api, "acme", model)
    assert r.status_code == 422, r.text
    assert _paths(r) == ["stages.0.redact.model"]
    r = _redact_job(api, "acme", model, kind="mask")
    assert r.status_code == 422 and _paths(r) == ["stages.0.mask.model"], r.text


def test_an_installed_models_name_is_taken(api):
    from services.specs import validate_spec

    spec = validate_spec({"version": 1, "stages": [{"kind": "redact", "model": "en_core_web_lg"}]})
    assert spec.stages[0].model == "en_core_web_lg"
    with pytest.raises(SpecInvalid):
        validate_spec({"version": 1, "stages": [{"kind": "redact", "model": "/srv/model"}]})


def test_a_detector_not_succeeded_is_a_conflict(api):
    running = api["make_job"]("acme", "adapt", "running")
    r = _redact_job(api, "acme", f"detector:{running}")
    assert r.status_code == 409, r.text
    # a job of another kind by that id is not a detector
    priv = api["make_job"]("acme", "privatize", "succeeded")
    assert _redact_job(api, "acme", f"detector:{priv}").status_code == 404


def test_a_succeeded_detector_is_handed_to_the_workers(api):
    from services.db import session_scope
    from services.jobs import runtime_env_for
    from services.models import Job
    from privatize.refs import MODELS_ENV

    det = api["make_job"]("acme", "adapt", "succeeded")
    r = _redact_job(api, "acme", f"detector:{det}")
    assert r.status_code == 201, r.text
    with session_scope(api["sessions"]) as s:
        job = s.get(Job, r.json()["id"])
        env = runtime_env_for(api["ctx"], job)["env_vars"]
    where = json.loads(env[MODELS_ENV])[f"detector:{det}"]
    assert where.endswith(f"tenants/{api['tenants']['acme']['id']}/jobs/{det}/output/detector")
    # the privatize job reads the detector: it is not deleted under it
    h = api["tenants"]["acme"]["headers"]
    assert api["client"].delete(f"/v1/jobs/{det}", headers=h).status_code == 409


def test_the_summary_is_the_held_out_evaluation(api):
    from privatize.adapt_job import summary_of
    from services.detectors import AdaptKind

    doc = {"score_threshold": 0.4, "labels": {"MRN": "MRN"},
           "evaluation": {"recall": 0.95, "miss_rate_upper_95": 0.2, "char_recall": 0.97, "char_precision": 0.8,
                          "span_precision": 0.9, "by_type": {"MRN": {"recall": 0.95}}},
           "base_evaluation": {"recall": 0.1, "miss_rate_upper_95": 0.9, "char_recall": 0.1, "char_precision": 0.5,
                               "span_precision": 0.5},
           "pi_c": {"threshold": 0.3, "delta_2": 0.1, "calibrated": True},
           "provenance": {"records": 60, "train_records": 48, "held_out_records": 12, "epochs": 2,
                          "source": "<input>"}}
    det = api["make_job"]("acme", "adapt", "running")
    ctx = api["ctx"]
    from services.storage import job_dir

    out = f"{job_dir(api['tenants']['acme']['id'], det)}/output"
    ctx.storage.write_bytes(f"{out}/summary.json", json.dumps(summary_of(doc)).encode())
    got = AdaptKind().read_results(ctx.storage, out)
    assert got["held_out"]["recall"] == 0.95 and got["base_held_out"]["recall"] == 0.1
    assert got["held_out_by_type"] == {"MRN": {"recall": 0.95}} and got["records"] == 60
    assert "<input>" not in json.dumps(got)


# ---- the real service ---------------------------------------------------------------------------

@pytest.mark.server
@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.presidio
def test_a_detector_trained_through_the_service_redacts_its_type(service, tmp_path):
    t = service.new_tenant("detectors")
    sample = tmp_path / "annotated.jsonl"
    sample.write_bytes(sample_bytes(80))
    r = t.upload(sample, format="jsonl")
    assert r.status_code == 201, r.text
    corpus = r.json()
    r = t.http.post("/v1/detectors", json={"corpus_id": corpus["id"], "config": {"epochs": 6, "seed": 1}})
    assert r.status_code == 201, r.text
    det = t.wait(r.json()["id"], timeout=600)
    logs = t.http.get(f"/v1/jobs/{det['id']}/logs").text
    assert det["status"] == "succeeded", (det["message"], logs[-3000:])
    got = t.http.get(f"/v1/detectors/{det['id']}").json()
    summary = got["summary"]
    assert summary["labels"] == {"MRN": "MRN"} and summary["records"] == 80
    assert summary["held_out"]["recall"] is not None and summary["held_out_records"] > 0
    doc = t.http.get(f"/v1/detectors/{det['id']}/detector.json").json()
    assert doc["provenance"]["source"] == "<input>" and str(service.data) not in json.dumps(doc)
    assert str(service.data) not in logs
    # another tenant sees none of it
    other = service.new_tenant("detectors-other")
    assert other.http.get(f"/v1/detectors/{det['id']}").status_code == 404

    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"id": f"u{i}", "text": text}) + "\n" for i, (text, _) in enumerate(UNSEEN)))
    r = t.upload(notes, format="jsonl")
    assert r.status_code == 201, r.text
    spec = {"version": 1, "stages": [{"kind": "redact", "model": got["reference"], "operator": "tag"}]}
    r = t.http.post("/v1/jobs", json={"corpus_id": r.json()["id"], "spec": spec})
    assert r.status_code == 201, r.text
    job = t.wait(r.json()["id"], timeout=600)
    assert job["status"] == "succeeded", (job["message"], t.http.get(f"/v1/jobs/{job['id']}/logs").text[-3000:])
    manifest = t.http.get(f"/v1/jobs/{job['id']}/results/manifest.json").json()
    import io

    import pyarrow.parquet as pq

    texts = []
    for s in manifest["shards"]:
        body = t.http.get(f"/v1/jobs/{job['id']}/results/{s['file']}").content
        texts += [row["text"] for row in pq.read_table(io.BytesIO(body)).to_pylist()]
    assert len(texts) == len(UNSEEN)
    found = sum(1 for _, mrn in UNSEEN if not any(mrn in x for x in texts))
    assert found >= 3, texts  # the made-up type is redacted on sentences it never saw
    assert sum("<MRN>" in x for x in texts) >= 3, texts
