"""Issue 52: the privacy ledger through the service, in process (FastAPI's TestClient on
SQLite, a Ray address nothing answers on: an admitted training stays queued, its planned
spend reserved). What must hold: a DP training is planned before it is admitted, with the
run's own planning, and its plan becomes the config's ``admitted_plan``; against a
tenant's ``max_epsilon_per_corpus``, two concurrent trainings for one remaining budget:
exactly one is admitted, the other answers 403 naming the budget; deleting the corpus
and uploading the same file again keeps what was spent; a cancelled training keeps the
DP steps it may have run and releases the rest; ``dp.delta`` above 1/N answers 422 at
the field; a tenant cannot set ``admitted_plan`` itself."""

from __future__ import annotations

import json
import threading

import pytest

from train.dp.ledger import Spend, compose

CORPUS = "".join(json.dumps({"text": f"Record {i}: the quick brown fox jumps over the lazy dog, "
                                     f"again and again, {i % 7} times."}) + "\n" for i in range(120)).encode()


def dp_config(target: float, **dp) -> dict:
    return {"version": 1, "kind": "dp", "data": {"seq_len": 32}, "model": {"preset": "tiny"},
            "optim": {"batch_size": 8, "epochs": 1}, "workers": {"num_workers": 1},
            "dp": {"target_epsilon": target, "accountant": "rdp", **dp}}


@pytest.fixture
def ledger_api(tmp_path):
    """The app in process with a tenant whose limit is ``epsilon 5`` per corpus, a corpus,
    and a succeeded privatization job of it (its output written to storage as a job
    writes it: ``manifest.json`` and ``shards/*.parquet``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from fastapi.testclient import TestClient

    from services.app import create_app
    from services.db import make_engine, session_factory, session_scope
    from services.models import Job
    from services.settings import Settings
    from services.storage import job_dir
    from services.tenants import create_tenant

    settings = Settings(env="development", data_dir=tmp_path / "data", ray_address="http://127.0.0.1:9",
                        poll_interval_s=60)
    with TestClient(create_app(settings)) as client:
        engine = make_engine(settings.effective_database_url)
        factory = session_factory(engine)
        with session_scope(factory) as s:
            tenant, _, token = create_tenant(s, "ledger", storage_limit_bytes=1 << 30, max_concurrent_jobs=8,
                                             max_epsilon_per_corpus=5.0)
            tenant_id = tenant.id
        client.headers["Authorization"] = f"Bearer {token}"
        r = client.post("/v1/corpora?format=jsonl&name=c", content=CORPUS)
        assert r.status_code == 201, r.text
        corpus = r.json()
        ctx = client.app.state.ctx
        out = f"{job_dir(tenant_id, 'p' * 16)}/output"
        table = pa.table({"text": [json.loads(x)["text"] for x in CORPUS.decode().splitlines()]})
        path = tmp_path / "part-0.parquet"
        pq.write_table(table, path)
        ctx.storage.put_file(path, f"{out}/shards/part-0.parquet")
        ctx.storage.write_bytes(f"{out}/manifest.json", b'{"records": 120}')
        with session_scope(factory) as s:
            s.add(Job(id="p" * 16, tenant_id=tenant_id, corpus_id=corpus["id"], kind="privatize", status="succeeded",
                      spec={}, spec_sha256="0" * 64, key_ids=[], output_path=out))
        yield {"client": client, "corpus": corpus, "job": "p" * 16, "ctx": ctx, "sessions": factory,
               "tenant": tenant_id}
        engine.dispose()


def _post(client, job: str, config: dict):
    return client.post("/v1/trainings", json={"job_id": job, "config": config})


def test_two_concurrent_trainings_for_one_remaining_budget_exactly_one_is_admitted(ledger_api):
    c, job = ledger_api["client"], ledger_api["job"]
    first = _post(c, job, dp_config(4.0))
    assert first.status_code == 201, first.text
    plan = first.json()["config"]["admitted_plan"]
    assert plan["target_epsilon"] == 4.0 and plan["planned_epsilon"] <= 4.0 and plan["noise_multiplier"] > 0
    # epsilon 4 and 3 compose to 4.57 (RDP, the accountant they planned with), a third of 3
    # to 5.09: the remaining budget fits one of them, not two
    answers: list = [None, None]

    def go(i):
        answers[i] = _post(c, job, dp_config(3.0))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in answers)
    assert codes == [201, 403], [r.text for r in answers]
    refused = next(r for r in answers if r.status_code == 403).json()
    assert refused["code"] == "privacy_budget_exceeded" and refused["path"] == "dp.target_epsilon"
    assert "privacy budget" in refused["detail"] and "epsilon 5" in refused["detail"]
    b = refused["budget"]
    assert b["limit"] == 5.0 and b["trainings"] == 2 and b["after"] > 5.0 and b["spent"] <= 5.0
    # the ledger: both admitted trainings reserved, composed as Opacus' RDP on the joint history
    led = c.get(f"/v1/corpora/{ledger_api['corpus']['id']}/privacy").json()
    admitted = [first.json(), next(r for r in answers if r.status_code == 201).json()]
    assert [t["id"] for t in led["trainings"]] == [a["id"] for a in admitted]
    assert all(t["state"] == "reserved" for t in led["trainings"])
    spends = [Spend.from_plan(a["config"]["admitted_plan"]) for a in admitted]
    assert led["accountant"] == "rdp" and led["epsilon"] == pytest.approx(compose(spends, "rdp").epsilon, abs=1e-9)
    assert max(t["epsilon"] for t in led["trainings"]) < led["epsilon"] <= 5.0 and led["limit"] == 5.0


def test_a_cancelled_training_keeps_what_it_ran_and_a_reupload_keeps_the_spend(ledger_api):
    from services import jobs
    from services.db import session_scope
    from services.models import Job
    from train.dp.accountant import epsilon

    c, job, ctx = ledger_api["client"], ledger_api["job"], ledger_api["ctx"]
    r = _post(c, job, dp_config(5.0))
    assert r.status_code == 201, r.text
    tid, plan = r.json()["id"], r.json()["config"]["admitted_plan"]
    assert plan["steps"] > 8
    # it ran: the last report said 4 DP steps (report_every 2: at most 5 were taken)
    with session_scope(ledger_api["sessions"]) as s:
        row = s.get(Job, tid)
        row.status, row.spec = "running", dict(row.spec, report_every=2)
        import datetime as dt
        row.started_at = dt.datetime.now(dt.UTC)
        out = row.output_path
    ctx.storage.write_bytes(f"{out}/metrics.jsonl", b'{"step": 4, "loss": 5.0, "dp_steps": 4, "epsilon": 1.0}\n')
    with session_scope(ledger_api["sessions"]) as s:
        jobs._finish(ctx, s.get(Job, tid), "cancelled", "cancelled by the test")
    led = c.get(f"/v1/corpora/{ledger_api['corpus']['id']}/privacy").json()
    (t,) = led["trainings"]
    assert (t["state"], t["steps"], t["planned_steps"]) == ("spent", 5, plan["steps"])
    assert t["epsilon"] == pytest.approx(epsilon(plan["noise_multiplier"], plan["sample_rate"], 5, plan["delta"],
                                                 "rdp"), rel=1e-6)
    assert led["epsilon"] < plan["planned_epsilon"]
    # delete the corpus and its jobs, upload the same file again: the ledger is the content's
    for j in (tid, job):
        assert c.delete(f"/v1/jobs/{j}").status_code == 204
    assert c.delete(f"/v1/corpora/{ledger_api['corpus']['id']}").status_code == 204
    again = c.post("/v1/corpora?format=jsonl&name=again", content=CORPUS).json()
    assert again["id"] != ledger_api["corpus"]["id"]
    led2 = c.get(f"/v1/corpora/{again['id']}/privacy").json()
    assert [x["id"] for x in led2["trainings"]] == [tid] and led2["epsilon"] == pytest.approx(led["epsilon"])
    other = c.post("/v1/corpora?format=jsonl&name=other", content=CORPUS + b'{"text": "one more"}\n').json()
    assert c.get(f"/v1/corpora/{other['id']}/privacy").json()["trainings"] == []


def test_refusals_at_admission_name_the_field(ledger_api):
    c, job = ledger_api["client"], ledger_api["job"]
    r = _post(c, job, dp_config(2.0, delta=0.05))
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "dp.delta" and "1/N" in r.text, r.text
    r = _post(c, job, dict(dp_config(2.0), admitted_plan={"noise_multiplier": 0.5}))
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "admitted_plan", r.text
    plain = {"version": 1, "kind": "pretrain", "data": {"seq_len": 32}, "model": {"preset": "tiny"},
             "optim": {"batch_size": 8, "max_steps": 2}, "workers": {"num_workers": 1}}
    r = _post(c, job, plain)
    assert r.status_code == 403 and r.json()["path"] == "kind" and "without DP" in r.json()["detail"], r.text
    r = _post(c, job, dp_config(7.0))
    assert r.status_code == 403 and r.json()["budget"]["asked"] <= 7.0, r.text
    assert c.get(f"/v1/corpora/{ledger_api['corpus']['id']}/privacy").json()["trainings"] == []
    other = c.get("/v1/corpora/" + "0" * 16 + "/privacy")
    assert other.status_code == 404


# ---- through a real service ------------------------------------------------------------

LEDGER_DP = {"version": 1, "kind": "dp", "data": {"seq_len": 32}, "model": {"preset": "tiny"},
             "optim": {"batch_size": 16, "epochs": 1}, "workers": {"num_workers": 1},
             "dp": {"target_epsilon": 2.0}, "report_every": 5, "checkpoint_every": 25}


@pytest.mark.server
@pytest.mark.ray
@pytest.mark.slow
def test_a_tenant_limit_of_3_5_admits_two_trainings_of_2_and_refuses_a_third_of_3(service, corpus_file, tmp_path):
    """The issue's case, through a real service and Ray: two DP trainings of epsilon 2 on
    one corpus (the second fine-tunes the first's model) compose to less than 3.5 (PRV on
    the joint history), a third of epsilon 3 would take the ledger past it and answers 403
    naming the budget. ``privatize submit train`` prints both figures."""
    import yaml
    from opacus.accountants import PRVAccountant

    t = service.new_tenant("budget", "--max-epsilon-per-corpus", "3.5")
    corpus = t.upload(corpus_file).json()
    r = t.http.post("/v1/jobs", json={"corpus_id": corpus["id"], "spec": {"version": 1, "stages": [{"kind": "dedup", "unit": "document"}],
                                                                           "output": {"num_shards": 2}}})
    assert r.status_code == 201, r.text
    job = t.wait(r.json()["id"])
    assert job["status"] == "succeeded", job["message"]
    first = t.http.post("/v1/trainings", json={"job_id": job["id"], "config": LEDGER_DP})
    assert first.status_code == 201, first.text
    done = t.wait(first.json()["id"], timeout=480)
    assert done["status"] == "succeeded", (done["message"], t.http.get(f"/v1/jobs/{done['id']}/logs").text[-3000:])
    # the second, from the first's model, through the CLI: it prints this model's spend and the data's
    second_cfg = dict(LEDGER_DP, model={"preset": None, "checkpoint": f"training:{done['id']}"})
    (tmp_path / "second.yaml").write_text(yaml.safe_dump(second_cfg))
    env = {"PRIVATIZE_URL": service.url, "PRIVATIZE_TOKEN": t.token}
    cli = service.cli("submit", "train", str(tmp_path / "second.yaml"), "--job", job["id"], "--wait", "--poll", "0.5",
                      env=env, check=False, timeout=480)
    assert cli.returncode == 0, cli.stderr[-3000:]
    second = json.loads(cli.stdout.strip().splitlines()[-1])
    import re

    said = re.search(r"privacy: this model epsilon ([\d.]+) planned; its data in total epsilon ([\d.]+) at delta "
                     r"\S+ over 2 training\(s\), limit 3.5", cli.stderr)
    assert said and 1.9 < float(said.group(1)) <= 2.0, cli.stderr
    led = t.http.get(f"/v1/corpora/{corpus['id']}/privacy").json()
    assert [x["id"] for x in led["trainings"]] == [done["id"], second["id"]]
    assert all(x["state"] == "spent" and x["epsilon"] <= 2.0 + 1e-6 for x in led["trainings"])
    plans = [t.http.get(f"/v1/trainings/{i}").json()["config"]["admitted_plan"] for i in (done["id"], second["id"])]
    acc = PRVAccountant()
    acc.history = [(p["noise_multiplier"], p["sample_rate"], p["steps"]) for p in plans]
    assert led["epsilon"] == pytest.approx(acc.get_epsilon(delta=min(p["delta"] for p in plans)), abs=1e-3)
    assert 2.0 < led["epsilon"] < 3.5 and led["limit"] == 3.5 and led["accountant"] == "prv"
    assert f"its data in total epsilon {led['epsilon']:.3f}" in cli.stderr
    got = t.http.get(f"/v1/trainings/{second['id']}").json()["summary"]
    assert got["ledger"]["epsilon"] == pytest.approx(led["epsilon"]) and got["ledger"]["trainings"] == 2
    assert got["lineage"] == {"corpus_sha256": corpus["sha256"], "descends_from": [done["id"]]}
    third = t.http.post("/v1/trainings", json={"job_id": job["id"], "config": dict(LEDGER_DP, dp={"target_epsilon": 3.0})})
    assert third.status_code == 403, third.text
    body = third.json()
    assert body["code"] == "privacy_budget_exceeded" and body["path"] == "dp.target_epsilon"
    assert body["budget"]["limit"] == 3.5 and body["budget"]["after"] > 3.5
    assert body["budget"]["spent"] == pytest.approx(led["epsilon"])
    assert f"corpus {corpus['id']}'s privacy budget" in body["detail"]
    assert len(t.http.get("/v1/trainings").json()) == 2
