"""Issue 53, end to end: the embedded Ray head of a real service (started by this test,
not the shared ``service`` fixture, whose head the other tests need) is killed while a
job runs. ``/readyz`` turns 503 naming Ray, the job is marked failed (the cluster was
lost) and frees its tenant's slot, the reconciler starts a new head by itself, and a new
job then succeeds. No process of the dead head's jobs (its driver) outlives it. Every wait has a deadline and says what it saw when it runs out."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pytest

from services.jobrun import CLUSTER_ENV
from services.raycluster import processes_with_env
from tests.services.conftest import running_service

pytestmark = [pytest.mark.server, pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

SPEC = {"version": 1, "stages": [{"kind": "split", "unit": "sentence"},
                                 {"kind": "dedup", "method": "sha1", "unit": "segment", "action": "mask",
                                  "min_length": 20}],
        "output": {"num_shards": 2}}


def _until(what: str, timeout: float, fn, every: float = 0.5):
    """``fn()``'s first truthy answer within ``timeout`` seconds, and the seconds it took;
    AssertionError naming ``what`` and the last answer otherwise."""
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        try:
            last = fn()
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if last:
                return last, time.monotonic() - t0
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


@pytest.fixture
def own_service(llm_double):
    with running_service("sqlite-local", llm_double.url, "pvk-", timeout=180) as svc:
        yield svc


def _metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def test_a_killed_embedded_head_is_reported_failed_over_and_restarted(own_service, tmp_path, capsys):
    from privatize.corpus import make_corpus

    svc = own_service
    url = svc.url
    assert httpx.get(f"{url}/readyz", timeout=10).status_code == 200
    t = svc.new_tenant("recovery", "--max-jobs", "1")
    corpus_path = tmp_path / "corpus.jsonl"
    make_corpus(corpus_path, n_docs=2000, seed=3)
    corpus = t.upload(corpus_path)
    assert corpus.status_code == 201, corpus.text
    corpus_id = corpus.json()["id"]

    r = t.http.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC})
    assert r.status_code == 201, r.text
    doomed = r.json()["id"]
    job, _ = _until("the first job running", 180,
                    lambda: (j := t.http.get(f"/v1/jobs/{doomed}").json())["status"] in
                    ("running", "succeeded", "failed", "cancelled") and j)
    assert job["status"] == "running", (job, t.http.get(f"/v1/jobs/{doomed}/logs").text[-3000:])
    # the tenant's one slot is taken
    assert t.http.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC}).status_code == 429

    head = json.loads((svc.data / "ray-head.json").read_text())
    cluster = f"127.0.0.1:{head['gcs_port']}"
    drivers = processes_with_env(CLUSTER_ENV, cluster)  # the job's driver (and its shell)
    assert drivers, f"no process names {CLUSTER_ENV}={cluster} while the job runs"
    os.killpg(head["pid"], signal.SIGKILL)  # the head runs in its own session: all of it
    killed_at = time.monotonic()

    ready, to_503 = _until("/readyz 503 naming Ray", 30,
                           lambda: (r := httpx.get(f"{url}/readyz", timeout=5)).status_code == 503 and r.json(),
                           every=0.25)
    assert ready["checks"]["ray"].startswith("failing: unavailable"), ready
    assert ready["checks"]["database"] == "ok", ready
    assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    assert _metric(url, "privatize_ray_unavailable_total") >= 1

    # the job that ran on it: failed, saying why; the slot is free again
    lost, _ = _until("the running job marked failed", 30,
                     lambda: (j := t.http.get(f"/v1/jobs/{doomed}").json())["status"] != "running" and j)
    assert lost["status"] == "failed" and "Ray cluster was lost" in (lost["message"] or ""), lost
    # its driver did not outlive the head (the service ended it before marking the job)
    left = processes_with_env(CLUSTER_ENV, cluster)
    assert not left, f"process(es) {left} of the dead head's jobs still run (were {drivers})"

    # a head is back, started by the service itself
    def back():
        st = json.loads((svc.data / "ray-head.json").read_text())
        return st["pid"] != head["pid"] and httpx.get(f"{url}/readyz", timeout=5).status_code == 200 and st
    new_head, _ = _until("a new embedded head and /readyz 200", 180, back, every=1.0)
    head_back = time.monotonic() - killed_at
    assert httpx.get(f"{url}/healthz", timeout=5).json()["ray"] == "connected"
    assert _metric(url, "privatize_ray_head_restarts_total") >= 1
    assert t.http.get("/v1/tenant").json()["active_jobs"] == 0

    # and a new job runs to the end on it
    r = t.http.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC})
    assert r.status_code == 201, r.text
    done = t.wait(r.json()["id"], timeout=300)
    assert done["status"] == "succeeded", (done, t.http.get(f"/v1/jobs/{done['id']}/logs").text[-3000:])
    with capsys.disabled():
        print(f"\n[issue 53] /readyz 503 {to_503:.1f} s after the kill; new head (pid {new_head['pid']}) "
              f"ready {head_back:.1f} s after it")
