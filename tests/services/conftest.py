"""A real service for the ``server`` tests: uvicorn on 127.0.0.1 on a free port, started
as a subprocess (``python -m services.cli serve``), SQLite and local storage in a temp
directory, and the embedded Ray head it starts itself. One service and one Ray head
serve the whole session; ``Service.kill()`` / ``start()`` restart the service alone."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT

PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    def __init__(self, base: Path):
        self.base = base
        self.data = base / "data"
        self.log_path = base / "service.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.master_key_file = base / "master.key"
        self.ray_temp = Path(tempfile.mkdtemp(prefix="pvr-", dir="/tmp"))
        self.proc: subprocess.Popen | None = None
        # PostgreSQL (or any URL) instead of SQLite when CI provides one
        self.database_url = os.environ.get("PRIVATIZE_TEST_DATABASE_URL") or f"sqlite:///{self.data / 'privatize.db'}"
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
            "PRIVATIZE_ENV": "production",
            "PRIVATIZE_DATA_DIR": str(self.data),
            "PRIVATIZE_MASTER_KEY_FILE": str(self.master_key_file),
            "PRIVATIZE_RAY_TEMP_DIR": str(self.ray_temp),
            "PRIVATIZE_RAY_NUM_CPUS": "2",
            "PRIVATIZE_POLL_INTERVAL_S": "0.5",
            "PRIVATIZE_LOG_LEVEL": "INFO",
            "RAY_USAGE_STATS_ENABLED": "0",
            "PRIVATIZE_DATABASE_URL": self.database_url,
        }
        for k in ("PRIVATIZE_MASTER_KEY", "PRIVATIZE_STORAGE_URI", "PRIVATIZE_RAY_ADDRESS",
                  "PRIVATIZE_URL", "PRIVATIZE_TOKEN"):
            self.env.pop(k, None)

    def cli(self, *args: str, check: bool = True, env: dict | None = None, timeout: float = 120
            ) -> subprocess.CompletedProcess:
        r = subprocess.run([PY, "-m", "services.cli", *args], cwd=ROOT, env={**self.env, **(env or {})},
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"privatize {' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}")
        return r

    def start(self, timeout: float = 120) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([PY, "-m", "services.cli", "serve", "--port", str(self.port)], cwd=ROOT,
                                     env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited {self.proc.returncode}: {self.log_text()[-3000:]}")
            try:
                h = httpx.get(f"{self.url}/healthz", timeout=2).json()
                if h.get("ray") == "connected":
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"service not ready in {timeout}s: {self.log_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks run."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    @property
    def sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    def query(self, sql: str, **params) -> list[tuple]:
        from sqlalchemy import create_engine, text
        from sqlalchemy.pool import NullPool

        engine = create_engine(self.database_url, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                return [tuple(r) for r in conn.execute(text(sql), params)]
        finally:
            engine.dispose()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def ray_dashboard(self) -> str:
        st = json.loads((self.data / "ray-head.json").read_text())
        return f"http://127.0.0.1:{st['dashboard_port']}"

    def new_tenant(self, name: str, *extra: str) -> "Tenant":
        name = f"{name}-{secrets.token_hex(3)}"  # unique even on a database that outlives the session
        out = json.loads(self.cli("admin", "tenant", "create", name, *extra).stdout.strip().splitlines()[-1])
        return Tenant(self, out["tenant_id"], out["name"], out["token"])


class Tenant:
    def __init__(self, service: Service, tenant_id: str, name: str, token: str):
        self.service = service
        self.id = tenant_id
        self.name = name
        self.token = token
        self.http = httpx.Client(base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=120)
        self.responses: list[bytes] = []
        """Bodies of every response this client got (for the key-material scan)."""
        self.http.event_hooks["response"] = [self._keep]

    def _keep(self, r: httpx.Response) -> None:
        if "/export" in r.request.url.path:
            return
        r.read()
        self.responses.append(r.content)

    def upload(self, path: Path, **params) -> httpx.Response:
        params.setdefault("filename", path.name)
        return self.http.post("/v1/corpora", params=params, content=path.read_bytes(),
                              headers={"Content-Type": "application/octet-stream"})

    def wait(self, job_id: str, timeout: float = 180) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            j = self.http.get(f"/v1/jobs/{job_id}").json()
            if j["status"] in ("succeeded", "failed", "cancelled"):
                return j
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} not finished in {timeout}s: {j}")


@pytest.fixture(scope="session")
def service():
    base = Path(tempfile.mkdtemp(prefix="pvs-"))
    svc = Service(base)
    svc.cli("admin", "master-key", "new", "--out", str(svc.master_key_file))
    try:
        svc.start()
        yield svc
    finally:
        svc.stop()
        subprocess.run([PY, "-m", "services.cli", "admin", "ray", "stop"], cwd=ROOT, env=svc.env,
                       capture_output=True, timeout=120)
        shutil.rmtree(svc.ray_temp, ignore_errors=True)
        if os.environ.get("PRIVATIZE_KEEP_TEST_DATA") != "1":
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    from privatize.corpus import make_corpus

    p = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    make_corpus(p, n_docs=120, seed=7)
    return p
