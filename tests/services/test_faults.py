"""Issue 53, item 5: fault injection against a real service (its own data folder, database
and embedded Ray head, started here: the shared ``service`` fixture's head is not killed).

At chosen points of privatization jobs and trainings (tiny corpus, ``TINY`` trainings of
4 steps), one fault at a time:

1. **API process** SIGKILLed while a privatization job runs; the service started again.
2. **Ray worker process** (the training's Ray Train worker) SIGKILLed while it runs, and
   at once **the database made unavailable**: SQLite held under an exclusive lock past
   the service's 30 s busy timeout (every write fails: the reconciler cannot record what
   Ray finished meanwhile), PostgreSQL the service's connections terminated, while a
   privatization job finishes on Ray.
3. **Ray head** (its whole process group) SIGKILLed while a training runs, the tenant's
   one slot (its limit lowered to 1 job) taken by it (a second job answers 429). Within
   30 s ``/readyz`` turns 503 naming Ray (``"ray": "failing: unavailable ..."``, the
   database ``ok``) while ``/healthz`` stays 200, and ``privatize_ray_unavailable_total``
   counts it; the training is marked failed, "the Ray cluster was lost", and no process
   of the dead head's jobs (its driver) outlives it; the reconciler starts a new head by
   itself (``/healthz`` says Ray ``connected`` again, ``privatize_ray_head_restarts_total``
   counts it) and the tenant's slot is free (``active_jobs`` 0). (This scenario is also
   what ``test_ray_recovery.py`` tested on a service of its own: one head kill serves
   both.)

After each, :func:`check` asserts: every job id the service accepted (a 201) is in
``GET /v1/jobs`` exactly once, and no other; Ray ran each at most once (its submission
ids are the job ids, each once); every status agrees with Ray's (a job the live head does
not know ran on the dead one and is ``failed`` saying the cluster was lost); the
tenant's active-job count is the number of jobs still active; every training that ended
has its ``privacy_spends`` row settled (``spent``); ``/readyz`` answers 200. At the end a
new job is admitted and succeeds on the new head (no slot is held). :func:`run_faults`
returns the figures; ``benchmarks/faults.py`` runs it and records them.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from services.jobrun import CLUSTER_ENV
from services.raycluster import processes_with_env
from tests.services.conftest import TINY, running_service

pytestmark = [pytest.mark.server, pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

SPEC = {"version": 1, "stages": [{"kind": "split", "unit": "sentence"},
                                 {"kind": "dedup", "method": "sha1", "unit": "segment", "action": "mask",
                                  "min_length": 20}],
        "output": {"num_shards": 1}}
TERMINAL = ("succeeded", "failed", "cancelled")
RAY_STATUS = {"SUCCEEDED": "succeeded", "FAILED": "failed", "STOPPED": "cancelled", "RUNNING": "running",
              "PENDING": "pending"}
LOST = "the Ray cluster was lost"
BUSY_TIMEOUT_S = 6
"""The faults service's SQLite busy timeout (``PRIVATIZE_SQLITE_BUSY_TIMEOUT_S``; 30 s by
default): the database fault holds the lock 3 s past it, so writes fail, not just wait."""


def until(what: str, timeout: float, fn, every: float = 0.5):
    """``fn()``'s first truthy answer within ``timeout`` s; AssertionError with the last one."""
    t0, last = time.monotonic(), None
    while time.monotonic() - t0 < timeout:
        try:
            last = fn()
        except (httpx.HTTPError, OSError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


class Faults:
    """One service, one tenant, the ids it accepted and the figures of the run."""

    def __init__(self, svc, work: Path, say=print):
        self.svc, self.work, self.say = svc, work, say
        self.accepted: list[str] = []
        self.trainings: set[str] = set()
        self.faults: list[dict] = []
        self.seen: dict[str, str] = {}
        """Ray's last status of each job (a head that is killed takes its memory with it)."""
        self.errors: list[dict] = []
        """Error answers to a status poll (a request caught in a fault)."""
        self.lock_s = float(svc.env.get("PRIVATIZE_SQLITE_BUSY_TIMEOUT_S", 30)) + 3
        """How long the database fault holds SQLite's lock: past the service's busy timeout."""
        self.t = svc.new_tenant("faults", "--max-jobs", "2")

    # ---- requests ----------------------------------------------------------------------

    def post(self, path: str, body: dict) -> str:
        r = self.t.http.post(path, json=body)
        assert r.status_code == 201, (path, r.status_code, r.text[:2000])
        jid = r.json()["id"]
        self.accepted.append(jid)
        return jid

    def job(self, corpus_id: str) -> str:
        return self.post("/v1/jobs", {"corpus_id": corpus_id, "spec": SPEC})

    def training(self, job_id: str) -> str:
        tid = self.post("/v1/trainings", {"job_id": job_id, "config": TINY})
        self.trainings.add(tid)
        return tid

    def get(self, jid: str) -> dict:
        """The job as the service shows it; an error answer (kept in ``errors``: a request
        caught in a fault) reads as a status of its own, so a wait goes on."""
        r = self.t.http.get(f"/v1/jobs/{jid}")
        if r.status_code != 200:
            self.errors.append({"path": f"/v1/jobs/{jid}", "status": r.status_code, "body": r.text[:300]})
            return {"id": jid, "status": f"HTTP {r.status_code}", "message": r.text[:300]}
        return r.json()

    def wait(self, jid: str, timeout: float = 240) -> dict:
        return until(f"job {jid} finished", timeout, lambda: (j := self.get(jid))["status"] in TERMINAL and j)

    def running(self, jid: str, timeout: float = 120) -> dict:
        j = until(f"job {jid} running", timeout,
                  lambda: (j := self.get(jid))["status"] in ("running", *TERMINAL) and j, every=0.25)
        assert j["status"] == "running", (j, self.logs(jid))
        return j

    def logs(self, jid: str) -> str:
        with contextlib.suppress(httpx.HTTPError):
            return self.t.http.get(f"/v1/jobs/{jid}/logs").text[-3000:]
        return ""

    def ready(self) -> bool:
        return httpx.get(f"{self.svc.url}/readyz", timeout=5).status_code == 200

    # ---- the invariants ------------------------------------------------------------------

    def ray_view(self) -> dict[str, str]:
        """Ray's status of every job the live head knows, by submission id (each once)."""
        jobs = self.svc.ray_jobs().list_jobs()
        ids = [j.submission_id for j in jobs if j.submission_id]
        dup = [i for i, n in collections.Counter(ids).items() if n > 1]
        assert not dup, f"Ray ran job(s) twice: {dup}"
        return {j.submission_id: RAY_STATUS.get(str(getattr(j.status, "value", j.status)), "?") for j in jobs
                if j.submission_id}

    def check(self, after: str) -> dict:
        """The invariants after a fault (see the module's docstring); the job rows."""
        until(f"/readyz 200 after {after}", 180, self.ready, every=1.0)
        listed = self.t.http.get("/v1/jobs").json()
        ids = [j["id"] for j in listed]
        counts = collections.Counter(ids)
        lost = [i for i in self.accepted if counts[i] == 0]
        dup = [i for i, n in counts.items() if n > 1]
        extra = [i for i in counts if i not in self.accepted]
        assert not lost and not dup and not extra, (after, {"lost": lost, "duplicated": dup, "not accepted": extra})
        ray = self.ray_view()
        assert set(ray) <= set(self.accepted), (after, "Ray runs jobs the service never accepted",
                                                set(ray) - set(self.accepted))
        for j in listed:
            jid, st, theirs = j["id"], j["status"], ray.get(j["id"])
            if theirs is None:
                theirs = self.seen.get(jid)  # it ran on a head that is gone: what Ray said then
                if theirs is None or theirs not in TERMINAL:  # never submitted, or lost with the head
                    assert st == "failed" and LOST in (j["message"] or "") or st in ("queued", "cancelled"), \
                        (after, j, theirs)
                    continue
            if theirs in ("running", "pending"):
                assert st in ("running", "pending"), (after, j, theirs)
            elif st != theirs:  # Ray has just ended it: the service's next read records it
                j = until(f"job {jid} {theirs} as Ray says ({after})", 15,
                          lambda: (x := self.get(jid))["status"] == theirs and x)
                st = j["status"]
            self.seen[jid] = theirs
        listed = self.t.http.get("/v1/jobs").json()
        active = sum(j["status"] not in TERMINAL for j in listed)
        assert self.t.http.get("/v1/tenant").json()["active_jobs"] == active, after
        spends = dict(self.svc.query("SELECT job_id, state FROM privacy_spends"))
        for j in listed:
            if j["id"] in self.trainings and j["status"] in TERMINAL:
                assert spends.get(j["id"]) == "spent", (after, j["id"], spends.get(j["id"]))
        return {j["id"]: j for j in listed}

    def fault(self, name: str, at: str, t0: float, recovered: float, **more) -> None:
        self.faults.append({"fault": name, "at": at, "recover_s": round(recovered - t0, 1), **more})
        self.say(f"[faults] {name} at {at}: recovered in {recovered - t0:.1f} s {more or ''}")

    # ---- the faults ------------------------------------------------------------------------

    def kill_api(self, corpus_id: str) -> str:
        """The API killed while a privatization job runs; that job (succeeded) is returned:
        the trainings' input."""
        jid = self.job(corpus_id)
        self.running(jid)
        t0 = time.monotonic()
        self.svc.kill()
        self.svc.start(timeout=180)
        done = self.wait(jid)
        assert done["status"] == "succeeded", (done, self.logs(jid))
        self.check("the API kill")
        self.fault("API process SIGKILL", "a privatization job running", t0, time.monotonic(), job=done["status"])
        return jid

    def train_worker(self, tid: str) -> int | None:
        """The pid of the training's Ray Train worker (its environment names the job)."""
        want = f"PRIVATIZE_JOB_ID={tid}".encode()
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                cmd = (p / "cmdline").read_bytes()
                if not cmd.startswith(b"ray::RayTrainWorker"):
                    continue
                if want in (p / "environ").read_bytes().split(b"\0"):
                    return int(p.name)
            except OSError:
                continue
        return None

    def kill_worker_and_database(self, corpus_id: str, source_job: str) -> None:
        tid = self.training(source_job)
        jid = self.job(corpus_id)
        pid = until(f"training {tid}'s Ray Train worker", 150,
                    lambda: self.train_worker(tid) or (self.get(tid)["status"] in TERMINAL and -1), every=0.25)
        assert pid > 0, ("the training ended before its worker was seen", self.get(tid), self.logs(tid))
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        self.say(f"[faults] killed the Ray Train worker {pid} of training {tid}")
        t_db = time.monotonic()
        self.break_database()
        got = {i: self.wait(i) for i in (tid, jid)}
        assert got[jid]["status"] == "succeeded", (got[jid], self.logs(jid))
        self.check("the worker kill and the database fault")
        self.fault("Ray worker SIGKILL", "a training's Ray Train worker", t0, time.monotonic(),
                   training=got[tid]["status"])
        self.fault("database unavailable", "a privatization job finishing (SQLite locked "
                   f"{self.lock_s:.0f} s)" if self.svc.sqlite else "a privatization job finishing (connections "
                   "terminated)", t_db, time.monotonic(), job=got[jid]["status"])

    def break_database(self) -> None:
        """SQLite: an exclusive lock past the busy timeout; PostgreSQL: the service's
        connections terminated (the pool reconnects)."""
        if self.svc.sqlite:
            db = self.svc.database_url.removeprefix("sqlite:///")
            conn = sqlite3.connect(db, timeout=30, isolation_level=None)
            try:
                conn.execute("BEGIN EXCLUSIVE")
                time.sleep(self.lock_s)
                conn.execute("ROLLBACK")
            finally:
                conn.close()
        else:
            self.svc.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")

    def metric(self, name: str) -> float:
        """A counter of the service's ``/metrics`` (0 when it has not counted yet)."""
        for line in httpx.get(f"{self.svc.url}/metrics", timeout=10).text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    def kill_head(self, source_job: str, corpus_id: str) -> None:
        url = self.svc.url
        self.svc.cli("admin", "tenant", "limits", self.t.name, "--max-jobs", "1")
        tid = self.training(source_job)
        self.running(tid)
        # the tenant's one slot is taken by the training
        r = self.t.http.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC})
        assert r.status_code == 429, (r.status_code, r.text[:2000])
        unavailable = self.metric("privatize_ray_unavailable_total")
        restarts = self.metric("privatize_ray_head_restarts_total")
        head = json.loads((self.svc.data / "ray-head.json").read_text())
        cluster = f"127.0.0.1:{head['gcs_port']}"
        drivers = processes_with_env(CLUSTER_ENV, cluster)
        assert drivers, f"no process names {CLUSTER_ENV}={cluster} while the training runs"
        t0 = time.monotonic()
        os.killpg(head["pid"], signal.SIGKILL)  # the head runs in its own session: all of it

        ready = until("/readyz 503 naming Ray", 30,
                      lambda: (r := httpx.get(f"{url}/readyz", timeout=5)).status_code == 503 and r.json(),
                      every=0.25)
        to_503 = time.monotonic() - t0
        assert ready["checks"]["ray"].startswith("failing: unavailable"), ready
        assert ready["checks"]["database"] == "ok", ready
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        assert self.metric("privatize_ray_unavailable_total") >= unavailable + 1

        # the training that ran on it: failed, saying why
        lost = self.wait(tid, timeout=60)
        assert lost["status"] == "failed" and LOST in (lost["message"] or ""), lost
        # no driver of the dead head's jobs is left (the service ends them before marking them)
        left = processes_with_env(CLUSTER_ENV, cluster)
        assert not left, f"process(es) {left} of the dead head's jobs still run (were {drivers})"

        # a head is back, started by the service itself; the slot is free again
        def back():
            st = json.loads((self.svc.data / "ray-head.json").read_text())
            return st["pid"] != head["pid"] and self.ready() and st
        new_head = until("a new embedded head and /readyz 200", 180, back, every=1.0)
        head_back = time.monotonic() - t0
        assert httpx.get(f"{url}/healthz", timeout=5).json()["ray"] == "connected"
        assert self.metric("privatize_ray_head_restarts_total") >= restarts + 1
        assert self.t.http.get("/v1/tenant").json()["active_jobs"] == 0
        self.check("the head kill")
        self.fault("Ray head SIGKILL (process group)", "a training running", t0, time.monotonic(),
                   training=lost["status"], readyz_503_s=round(to_503, 1), new_head_ready_s=round(head_back, 1),
                   new_head_pid=new_head["pid"])


def run_faults(svc, work: Path, say=print) -> dict:
    """Every fault, in order, against ``svc``; the figures."""
    from privatize.corpus import make_corpus

    t_start = time.monotonic()
    f = Faults(svc, work, say)
    corpus_path = work / "corpus.jsonl"
    make_corpus(corpus_path, n_docs=40, seed=5)
    r = f.t.upload(corpus_path)
    assert r.status_code == 201, r.text
    corpus_id = r.json()["id"]
    source = f.kill_api(corpus_id)  # its job, succeeded: the trainings' input
    f.kill_worker_and_database(corpus_id, source)
    f.kill_head(source, corpus_id)

    last = f.job(corpus_id)  # admitted on the new head: no slot is held
    done = f.wait(last)
    assert done["status"] == "succeeded", (done, f.logs(last))
    rows = f.check("the last job")
    for e in f.errors:
        say(f"[faults] a status poll answered {e['status']}: {e['body'][:200]}")
    assert f.t.http.get("/v1/tenant").json()["active_jobs"] == 0
    statuses = collections.Counter(j["status"] for j in rows.values())
    return {"faults_injected": len(f.faults), "jobs_accepted": len(f.accepted),
            "trainings_accepted": len(f.trainings), "jobs_listed": len(rows), "jobs_lost": 0,
            "jobs_duplicated": 0, "statuses": dict(statuses),
            "ledger_settled": sum(1 for i in f.trainings if rows[i]["status"] in TERMINAL),
            "poll_errors": len(f.errors), "poll_error_statuses": sorted({e["status"] for e in f.errors}),
            "db_errors_logged": svc.log_text().count("database is locked") if svc.sqlite else None,
            "faults": f.faults, "max_recover_s": max(x["recover_s"] for x in f.faults),
            "seconds": round(time.monotonic() - t_start, 1), "backend": svc.backend}


def test_faults_lose_nothing_and_the_service_recovers(llm_double, tmp_path, capsys):
    with running_service("sqlite-local", llm_double.url, "pvf-", env={"PRIVATIZE_SQLITE_BUSY_TIMEOUT_S": str(BUSY_TIMEOUT_S)},
                         timeout=180) as svc:
        with capsys.disabled():
            out = run_faults(svc, tmp_path, say=lambda s: print(f"\n{s}", end=""))
            print(f"\n[faults] {json.dumps({k: v for k, v in out.items() if k != 'faults'})}")
    assert out["jobs_lost"] == 0 and out["faults_injected"] == 4
