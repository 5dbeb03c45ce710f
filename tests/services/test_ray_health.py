"""Issue 53 in process: health that tells the truth about Ray.

``/readyz``, ``/healthz`` and the metrics follow a real probe of the cluster
(``services.rayhealth``), cached for a moment; a lost embedded head fails the jobs that
ran on it (freeing their tenant's slots) and keeps the queued ones; a cancel of a job on
a lost head answers instead of 503.

Where a test replaces the probe it uses ``FakeProbe``: a **test double of the network
boundary** (the HTTP probe of the Ray dashboard and the ``/proc`` check of the head's
process), so the service's own logic runs unchanged. The probe itself is tested for real
against a dead recorded head and an address nothing answers on. The real head killed
under a real service: ``test_faults.py``'s head-kill scenario."""

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

    client, corpus_id, _settings, engine = api
    _limit(engine, 2)
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
    tenant = client.get("/v1/tenant").json()
    assert (tenant["active_jobs"], tenant["running_jobs"], tenant["queued_jobs"]) == (2, 0, 2), tenant
    assert client.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC}).status_code == 201
    assert fail_lost(ctx) == []  # nothing twice


def _limit(engine, n: int) -> None:
    from services.models import Tenant

    with engine.begin() as conn:
        conn.execute(update(Tenant).values(max_concurrent_jobs=n))


def test_queued_jobs_hold_no_slot_wait_in_a_bounded_queue_and_start_in_turn(api):
    """Issue 53: a job admitted while Ray is down stays queued without holding one of its
    tenant's slots; ``max_queued_jobs`` bounds how many wait; once the cluster answers they
    are given to Ray first come, first served, never more at once than the tenant's limit."""
    from tests.services.test_jobkinds import FakeCluster

    from services.jobs import reconcile_active

    client, corpus_id, _settings, engine = api
    ctx = client.app.state.ctx
    ctx.settings = ctx.settings.model_copy(update={"max_queued_jobs": 3})
    _limit(engine, 1)

    def post():
        return client.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC})

    # Ray is down (nothing answers): three jobs wait, none holds the tenant's one slot
    ids = [post().json()["id"] for _ in range(3)]
    assert [client.get(f"/v1/jobs/{i}").json()["status"] for i in ids] == ["queued"] * 3
    tenant = client.get("/v1/tenant").json()
    assert (tenant["running_jobs"], tenant["queued_jobs"], tenant["max_queued_jobs"]) == (0, 3, 3), tenant
    r = post()  # but the queue is bounded
    assert r.status_code == 429 and "3 queued job(s)" in r.json()["detail"] and "at most 3" in r.json()["detail"], \
        r.text
    assert client.post(f"/v1/jobs/{ids[2]}/cancel").json()["status"] == "cancelled"

    # the cluster answers: the oldest queued job takes the slot; the next waits its turn
    ctx.cluster = FakeCluster()
    reconcile_active(ctx)
    jobs = [client.get(f"/v1/jobs/{i}").json() for i in ids[:2]]
    assert [j["status"] for j in jobs] == ["pending", "queued"], jobs
    assert list(ctx.cluster.submitted) == [ids[0]]
    assert jobs[1]["message"].startswith("waiting for a free slot: 1 job(s) running"), jobs[1]
    # a job admitted now is refused: the slot is held by a job given to Ray
    r = post()
    assert r.status_code == 429 and "1 running job(s), its limit is 1" in r.json()["detail"], r.text

    # the first ends: the second is given to Ray on the next pass, and the one admitted
    # after it waits behind it
    _set(engine, ids[0], "succeeded")
    late = post()
    assert late.status_code == 201 and late.json()["status"] == "queued", late.text
    assert "0 job(s) running, 1 queued before it" in late.json()["message"], late.json()
    reconcile_active(ctx)
    assert client.get(f"/v1/jobs/{ids[1]}").json()["status"] == "pending"
    assert client.get(f"/v1/jobs/{late.json()['id']}").json()["status"] == "queued"
    assert list(ctx.cluster.submitted) == [ids[0], ids[1]]


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


def _sleeper(env: dict, *argv: str, ignore_term: bool = False) -> subprocess.Popen:
    code = ("import signal, sys, time\n"
            + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
            + "print('ready', flush=True)\ntime.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", code, *argv], env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_a_lost_heads_job_drivers_are_terminated_and_nothing_else(tmp_path):
    """Issue 53: the drivers of jobs that ran on a lost embedded head survive it (init adopts
    them); every process whose environment names that head's address as its cluster
    (``PRIVATIZE_RAY_CLUSTER``, as a job's ``runtime_env`` sets) is terminated, one that
    ignores SIGTERM killed after the grace period; a process naming another cluster, the
    processes of a head that still runs and those of an external cluster are left alone.
    The processes here are real (``sleep`` stand-ins for ``python -m services.jobrun``)."""
    import os
    import signal

    from services.jobrun import CLUSTER_ENV
    from services.raycluster import processes_with_env, reap_lost_head

    data = tmp_path / "data"
    data.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)

    def record(pid: int, port: int) -> None:
        (data / "ray-head.json").write_text(json.dumps(
            {"pid": pid, "gcs_port": port, "dashboard_port": 9, "temp_dir": "/tmp/x", "python": sys.executable,
             "started_at": 0.0, "auth": "token"}))

    port = 40000 + os.getpid() % 20000
    mine = {**os.environ, CLUSTER_ENV: f"127.0.0.1:{port}", "RAY_ADDRESS": f"127.0.0.1:{port}"}
    other = {**os.environ, CLUSTER_ENV: f"127.0.0.1:{port + 1}"}
    procs = [_sleeper(mine), _sleeper(mine, ignore_term=True), _sleeper(other)]
    live_head = _sleeper(dict(os.environ), "--block", f"--port={port}")  # what _is_our_head recognises
    try:
        drivers = sorted(p.pid for p in procs[:2])
        assert processes_with_env(CLUSTER_ENV, f"127.0.0.1:{port}") == drivers
        # the recorded head still runs: its jobs are left alone; so are an external cluster's
        record(live_head.pid, port)
        assert reap_lost_head(Settings(data_dir=data), grace_s=0.5) == []
        record(int(dead.stdout), port)
        assert reap_lost_head(Settings(data_dir=data, ray_address="http://127.0.0.1:9"), grace_s=0.5) == []
        assert all(p.poll() is None for p in procs)
        # the head is gone: both of its drivers end, the stubborn one by SIGKILL
        assert sorted(reap_lost_head(Settings(data_dir=data), grace_s=1.0)) == drivers
        assert procs[0].wait(timeout=10) == -signal.SIGTERM
        assert procs[1].wait(timeout=10) == -signal.SIGKILL
        assert processes_with_env(CLUSTER_ENV, f"127.0.0.1:{port}") == []
        assert procs[2].poll() is None and live_head.poll() is None  # another cluster's, and the head
    finally:
        for p in (*procs, live_head):
            p.kill()
            p.wait()
