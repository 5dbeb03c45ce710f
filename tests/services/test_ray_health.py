"""Issue 53 in process: health that tells the truth about Ray.

``/readyz``, ``/healthz`` and the metrics follow a real probe of the cluster
(``services.rayhealth``), cached for a moment; a lost embedded head fails the jobs that
ran on it (freeing their tenant's slots) and keeps the queued ones; a cancel of a job on
a lost head answers instead of 503.

Where a test replaces the probe it uses ``FakeProbe``: a **test double of the network
boundary** (the HTTP probe of the Ray dashboard and the ``/proc`` check of the head's
process), so the service's own logic runs unchanged. The probe itself is tested for real
against a dead recorded head and an address nothing answers on. The real head killed
under a real service: ``test_ray_recovery.py``."""

from __future__ import annotations

import json
import subprocess
import sys

from sqlalchemy import update

from services.models import Job
from services.rayhealth import Probe, RayHealth, probe_cluster
from services.settings import Settings

SPEC = {"version": 1, "stages": [{"kind": "split", "unit": "sentence"}], "output": {"num_shards": 1}}
UP = Probe(True, "connected")
LOST = Probe(False, "unavailable: the embedded Ray head (pid 4242) is gone", lost=True)


class FakeProbe:
    """Boundary double: answers what the test sets, counts the calls."""

    def __init__(self, answer: Probe = UP):
        self.answer = answer
        self.calls = 0

    def __call__(self) -> Probe:
        self.calls += 1
        return self.answer


def test_the_probe_is_cached_and_counts_outages(tmp_path):
    now = [100.0]
    fake = FakeProbe()
    h = RayHealth(Settings(data_dir=tmp_path), fake, cache_s=1.5, clock=lambda: now[0])
    assert h.check().up and fake.calls == 1
    fake.answer = LOST
    assert h.check().up and fake.calls == 1  # cached
    now[0] += 1.6
    assert h.check() == LOST and h.outages == 1
    now[0] += 2
    assert not h.check().up and h.outages == 1  # still the same outage
    assert h.check(fresh=True) == LOST and fake.calls == 4
    fake.answer = UP
    now[0] += 2
    assert h.check().up and h.outages == 1
    fake.answer = Probe(False, "unavailable: x")
    h.invalidate()
    assert not h.check().up and h.outages == 2

    def broken():
        raise OSError("boom")

    b = RayHealth(Settings(data_dir=tmp_path), broken)
    assert b.check() == Probe(False, "unavailable: probe failed (OSError)") and b.outages == 1


def test_the_real_probe_of_a_dead_head_and_of_an_address_nothing_answers_on(tmp_path):
    s = Settings(data_dir=tmp_path / "data")
    assert probe_cluster(s) == Probe(False, "unavailable: no embedded Ray head is running")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "ray-head.json").write_text(json.dumps(
        {"pid": pid, "gcs_port": 1, "dashboard_port": 9, "temp_dir": "/tmp/x", "python": sys.executable,
         "started_at": 0.0, "auth": "token"}))
    p = probe_cluster(s)
    assert not p.up and p.lost and f"pid {pid}" in p.detail
    ext = probe_cluster(Settings(data_dir=tmp_path / "data", ray_address="http://127.0.0.1:9"), timeout_s=0.5)
    assert not ext.up and not ext.lost and "127.0.0.1" not in ext.detail  # no address on an open route


def _use(client, answer: Probe) -> FakeProbe:
    health = client.app.state.ctx.ray_health
    fake = FakeProbe(answer)
    health._probe = fake
    health.invalidate()
    return fake


def test_readyz_healthz_and_metrics_follow_the_probe(api):
    client, _corpus, _settings, _engine = api
    _use(client, UP)
    r = client.get("/readyz")
    assert r.status_code == 200, r.text
    assert client.get("/healthz").json() == {"status": "ok", "ray": "connected"}
    assert "privatize_ray_connected 1.0" in client.get("/metrics").text

    _use(client, LOST)
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["checks"]["ray"] == f"failing: {LOST.detail}"
    assert r.json()["checks"]["database"] == "ok"
    h = client.get("/healthz")
    assert h.status_code == 200 and h.json()["ray"] == LOST.detail and "ray_reconciler" in h.json()
    text = client.get("/metrics").text
    assert "privatize_ray_connected 0.0" in text
    outages = [ln for ln in text.splitlines() if ln.startswith("privatize_ray_unavailable_total ")]
    assert outages and float(outages[0].split()[1]) >= 1
    assert "privatize_ray_head_restarts_total 0.0" in text

    fake = _use(client, UP)
    assert client.get("/readyz").status_code == 200
    for _ in range(5):  # cached: five probes of readiness cost one probe of Ray
        client.get("/readyz")
    assert fake.calls == 1


def _set(engine, job_id: str, status: str) -> None:
    with engine.begin() as conn:
        conn.execute(update(Job).where(Job.id == job_id).values(status=status))


def test_a_lost_head_fails_what_ran_keeps_what_is_queued_and_frees_the_slots(api):
    from services.jobs import LOST as MESSAGE, fail_lost

    client, corpus_id, _settings, engine = api  # the tenant's limit: 4 concurrent jobs
    ids = [client.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC}).json()["id"] for _ in range(4)]
    assert [client.get(f"/v1/jobs/{i}").json()["status"] for i in ids] == ["queued"] * 4  # no Ray here
    _set(engine, ids[0], "running")
    _set(engine, ids[1], "pending")
    assert client.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC}).status_code == 429

    ctx = client.app.state.ctx
    assert sorted(fail_lost(ctx)) == sorted(ids[:2])
    jobs = {i: client.get(f"/v1/jobs/{i}").json() for i in ids}
    for i in ids[:2]:
        assert jobs[i]["status"] == "failed" and jobs[i]["message"] == MESSAGE, jobs[i]
    assert [jobs[i]["status"] for i in ids[2:]] == ["queued", "queued"]  # submitted once Ray is back
    assert client.get("/v1/tenant").json()["active_jobs"] == 2
    assert client.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC}).status_code == 201
    assert fail_lost(ctx) == []  # nothing twice


def test_cancel_on_a_lost_head_answers_with_the_job_failed(api):
    client, corpus_id, _settings, engine = api
    job_id = client.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC}).json()["id"]
    _set(engine, job_id, "running")
    # the cluster only cannot be reached (it may still run the job): 503, as before
    _use(client, Probe(False, "unavailable: the Ray cluster (PRIVATIZE_RAY_ADDRESS) does not answer"))
    r = client.post(f"/v1/jobs/{job_id}/cancel")
    assert r.status_code == 503, r.text
    # the head is gone, and the job with it: the cancel answers, the job is failed
    _use(client, LOST)
    r = client.post(f"/v1/jobs/{job_id}/cancel")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "failed" and "Ray cluster was lost" in r.json()["message"]
