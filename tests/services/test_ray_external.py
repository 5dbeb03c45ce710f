"""Issue 53, item 1 on an external cluster: a real service on ``PRIVATIZE_RAY_ADDRESS`` (a
Ray head this test starts with ``ray start --head``, token authentication on, its own
temp folder and process group: never the service's embedded head, never another Ray on
the host) runs a job; the head is stopped. ``/readyz`` turns 503 naming Ray, the service
starts no head of its own (no Ray process with its data folder, no ``ray-head.json``, no
token made, nothing in its Ray temp folder), and a job created meanwhile is accepted and
stays ``queued`` ("waiting for the Ray cluster"), holding no slot. The head is started
again on the same ports: ``/readyz`` is 200 again (the service reconnected by itself), the
queued job runs to success and so does a new one. Every wait has a deadline and says what
it saw when it runs out; every process started here is ended in ``finally``."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from services import raycluster
from services.settings import Settings
from tests.services.conftest import Service, free_port

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


MARK = "PRIVATIZE_TEST_EXTERNAL_HEAD"
"""Set in the external head's environment (so in every process of it, its job drivers
included): what the clean-up finds them by."""


class ExternalHead:
    """``ray start --head --block`` on fixed ports, in its own session (so its process
    group is its alone) and temp folder, with Ray's token authentication on."""

    def __init__(self, base: Path, master_key_file: Path):
        # every port fixed (the same after a restart) and free: Ray's defaults (the dashboard
        # agent's 52365, ...) may be taken by another Ray on the host
        ports: set[int] = set()
        while len(ports) < 9:
            ports.add(free_port())
        (self.port, self.dashboard_port, *self.other_ports) = sorted(ports, key=lambda _: secrets.randbits(16))
        self.temp = Path(tempfile.mkdtemp(prefix="pve-", dir="/tmp"))
        self.token_file = base / "external-ray-token"
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
        self.mark = secrets.token_hex(8)
        # the environment the service gives its embedded head (venv first on PATH, the
        # project importable, loopback only, token auth, the master key file for workers),
        # but with this test's token and none of the service's own settings
        settings = Settings(data_dir=base / "external", master_key_file=master_key_file)
        env = raycluster.head_env(settings, self.token_file)
        for k in [k for k in env if k.startswith("PRIVATIZE_") and k != "PRIVATIZE_MASTER_KEY_FILE"]:
            env.pop(k)
        env.pop("RAY_ADDRESS", None)
        env[MARK] = self.mark
        self.env = env
        self.url = f"http://127.0.0.1:{self.dashboard_port}"
        self.log = base / "external-head.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> float:
        cmd = raycluster._ray_cli() + [
            "start", "--head", "--block", f"--port={self.port}", "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}", "--num-cpus=2",
            *(f"--{flag}={port}" for flag, port in zip(
                ("ray-client-server-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                 "runtime-env-agent-port", "metrics-export-port", "node-manager-port", "object-manager-port"),
                self.other_ports, strict=True)),
            f"--temp-dir={self.temp}", "--disable-usage-stats"]
        t0 = time.monotonic()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        headers = {"Authorization": f"Bearer {self.token_file.read_text()}"}
        last = None
        while time.monotonic() - t0 < timeout:
            assert self.proc.poll() is None, f"the external head exited {self.proc.returncode}: {self.tail()}"
            try:
                if httpx.get(f"{self.url}/api/gcs_healthz", headers=headers, timeout=2).status_code == 200 and \
                        (last := httpx.get(f"{self.url}/api/jobs/", headers=headers, timeout=5)).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError as exc:
                last = exc
            time.sleep(0.5)
        raise AssertionError(f"the external head did not come up in {timeout:.0f} s ({last!r}): {self.tail()}")

    def terminate(self) -> None:
        """SIGTERM to its process group (``--block`` stops every Ray process of this head),
        without waiting: Ray's SIGTERM winds down for about 30 s once a job has run, which
        the scenario spends on what the service does meanwhile; :meth:`stop` waits."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)

    def stop(self, kill: bool = False) -> None:
        """SIGTERM to its process group (again, if :meth:`terminate` sent it), SIGKILL after
        45 s; then whatever still carries its mark. ``kill``: SIGKILL at once (the clean-up at
        the end, where nothing of the head is kept)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            self.proc = None
        left = raycluster.processes_with_env(MARK, self.mark)
        if left:
            raycluster.terminate_processes(left, 0.0 if kill else 5.0)
            # gone before a restart binds the same ports
            deadline = time.monotonic() + 10
            while raycluster.processes_with_env(MARK, self.mark) and time.monotonic() < deadline:
                time.sleep(0.2)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""


def _ray_processes_of(data: Path) -> list[str]:
    """Command lines of Ray processes whose environment names ``data`` as the service's
    data folder (what an embedded head the service started would carry)."""
    out = []
    for pid in raycluster.processes_with_env("PRIVATIZE_DATA_DIR", str(data)):
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(w in cmd for w in ("gcs_server", "raylet", "bin/ray ", "ray start", "dashboard")):
                out.append(f"{pid}: {cmd[:200]}")
    return out


@pytest.fixture
def external(llm_double):
    """(service, external head): the head up first, then the service on its Jobs API."""
    base = Path(tempfile.mkdtemp(prefix="pvq-"))
    svc = Service(base, "sqlite-local", llm_url=llm_double.url)
    svc.cli("admin", "master-key", "new", "--out", str(svc.master_key_file))
    head = ExternalHead(base, svc.master_key_file)
    try:
        head.start()
        svc.env["PRIVATIZE_RAY_ADDRESS"] = head.url
        svc.env["PRIVATIZE_RAY_AUTH_TOKEN_FILE"] = str(head.token_file)
        svc.start(timeout=180)
        yield svc, head
    finally:
        svc.stop()
        head.stop(kill=True)
        for p in (svc.ray_temp, head.temp):
            shutil.rmtree(p, ignore_errors=True)
        if os.environ.get("PRIVATIZE_KEEP_TEST_DATA") != "1":
            shutil.rmtree(base, ignore_errors=True)


def test_an_external_cluster_that_goes_away_is_waited_for_and_reconnected(external, tmp_path, capsys):
    from privatize.corpus import make_corpus

    svc, head = external
    url = svc.url
    ready = httpx.get(f"{url}/readyz", timeout=10)
    assert ready.status_code == 200, ready.text
    _until("the reconciler connected", 60, lambda: _connects(svc, head) >= 1)
    t = svc.new_tenant("external", "--max-jobs", "1")
    corpus_path = tmp_path / "corpus.jsonl"
    make_corpus(corpus_path, n_docs=120, seed=5)
    r = t.upload(corpus_path)
    assert r.status_code == 201, r.text
    corpus_id = r.json()["id"]

    def run_job(what: str) -> dict:
        r = t.http.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC})
        assert r.status_code == 201, (what, r.text)
        done = t.wait(r.json()["id"], timeout=300)
        assert done["status"] == "succeeded", (what, done, t.http.get(f"/v1/jobs/{done['id']}/logs").text[-3000:])
        return done

    first = run_job("the first job")
    # it ran on the external head, and the service made nothing of its own
    assert first["id"] in {j.submission_id for j in _jobs(head)}
    assert not (svc.data / raycluster.STATE_FILE).exists()

    head.terminate()
    stopped_at = time.monotonic()
    down, to_503 = _until("/readyz 503 naming Ray", 30,
                          lambda: (r := httpx.get(f"{url}/readyz", timeout=5)).status_code == 503 and r.json(),
                          every=0.25)
    assert down["checks"]["ray"] == \
        "failing: unavailable: the Ray cluster (PRIVATIZE_RAY_ADDRESS) does not answer", down
    assert down["checks"]["database"] == "ok", down
    h = httpx.get(f"{url}/healthz", timeout=5)
    assert h.status_code == 200 and h.json()["ray"].startswith("unavailable"), h.text

    # a job created while the cluster is away: accepted, queued, waiting for it, holding no slot
    r = t.http.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": SPEC})
    assert r.status_code == 201, r.text
    waiting = r.json()
    assert waiting["status"] == "queued", waiting
    assert "waiting for the Ray cluster" in (waiting["message"] or ""), waiting
    tenant = t.http.get("/v1/tenant").json()
    assert (tenant["running_jobs"], tenant["queued_jobs"]) == (0, 1), tenant

    # the service waits: for 15 s (several reconnect attempts), no head of its own, no job lost
    seen_states = set()
    while time.monotonic() - stopped_at < 15:
        assert not _ray_processes_of(svc.data), _ray_processes_of(svc.data)
        hz = httpx.get(f"{url}/healthz", timeout=5).json()
        seen_states.add(hz.get("ray_reconciler"))
        assert t.http.get(f"/v1/jobs/{waiting['id']}").json()["status"] == "queued"
        time.sleep(1.0)
    assert not (svc.data / raycluster.STATE_FILE).exists(), "the service recorded an embedded head"
    assert not (svc.base / raycluster.AUTH_TOKEN_FILE).exists() and \
        not (svc.data / raycluster.AUTH_TOKEN_FILE).exists(), "the service made an embedded head's token"
    assert not any(svc.ray_temp.iterdir()), list(svc.ray_temp.iterdir())
    assert httpx.get(f"{url}/readyz", timeout=5).status_code == 503

    # the head is back on the same ports (once the old one has wound down): the service
    # reconnects by itself
    head.stop()
    head_up = head.start()
    restarted_at = time.monotonic()
    _, to_ready = _until("/readyz 200 after the head is back", 120,
                         lambda: httpx.get(f"{url}/readyz", timeout=5).status_code == 200, every=0.5)
    assert httpx.get(f"{url}/healthz", timeout=5).json()["ray"] == "connected"
    # the reconciler reconnects within a few polls of the head's return, not when its backoff
    # (doubling to a minute while the head was away) runs out
    _until("the reconciler reconnected", 10, lambda: _connects(svc, head) >= 2)
    # the job queued meanwhile is submitted there and runs to the end
    queued_done = t.wait(waiting["id"], timeout=300)
    queued_secs = time.monotonic() - restarted_at
    assert queued_done["status"] == "succeeded", (queued_done,
                                                  t.http.get(f"/v1/jobs/{waiting['id']}/logs").text[-3000:])
    assert waiting["id"] in {j.submission_id for j in _jobs(head)}
    run_job("a new job after the reconnect")
    assert not (svc.data / raycluster.STATE_FILE).exists()
    assert not _ray_processes_of(svc.data)
    with capsys.disabled():
        print(f"\n[issue 53, external] /readyz 503 {to_503:.1f} s after the head stopped (reconciler: "
              f"{sorted(s for s in seen_states if s)}); head back in {head_up:.1f} s, /readyz 200 "
              f"{to_ready:.1f} s after that; the job queued while it was away succeeded {queued_secs:.1f} s "
              "after the head was back")


def _connects(svc: Service, head: ExternalHead) -> int:
    """How many times the service's log says its reconciler connected to the head."""
    return sum("connected to the Ray Jobs API at" in line and head.url in line for line in svc.log_text().splitlines())


def _jobs(head: ExternalHead):
    from ray.job_submission import JobSubmissionClient

    c = JobSubmissionClient(head.url, headers={"Authorization": f"Bearer {head.token_file.read_text()}"})
    return c.list_jobs()
