"""A real service for the ``server`` tests: uvicorn on 127.0.0.1 on a free port, started
as a subprocess (``python -m services.cli serve``), and the embedded Ray head it starts
itself. ``Service.kill()`` / ``start()`` restart the service alone.

Two back ends:

* ``sqlite-local``: SQLite and local files in a temp directory;
* ``postgres-s3``: the PostgreSQL named by ``PRIVATIZE_TEST_DATABASE_URL`` and the
  S3-protocol server at ``PRIVATIZE_TEST_S3_ENDPOINT`` (a fresh bucket per session).
  ``.ci/run`` starts both on loopback.

The ``service`` fixture runs the end-to-end tests on one of them (:func:`service_backend`:
PostgreSQL + S3 where configured, as in CI, else SQLite + local files), one service and one
Ray head for the session. The other back end keeps what differs between them: one
upload-to-download flow on ``other_service`` (tests/services/test_backends.py, with the
storage contract, the same calls on local files and S3), and the migrations on both
databases (test_db). API semantics (tokens, 404s, 422 paths, limits) are tested in process on
SQLite. Without PostgreSQL + S3, their tests skip on a user's machine and fail under
``CI=true``.
"""

from __future__ import annotations

import json
import contextlib
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
import pyarrow.fs as pafs
import pytest

from tests.conftest import ROOT, need

PY = sys.executable


@pytest.fixture
def silent_port():
    """A loopback port that accepts connections (the kernel completes them) and never
    reads or answers: a hung server, for the client timeouts' tests."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JobsInProcess:
    """TEST DOUBLE for the Ray Jobs API (a boundary: Ray runs the entrypoint elsewhere):
    ``submit`` checks the entrypoint names ``kind`` and hands its three locations (spec,
    input, output) to :meth:`run`, here, in this process; every job then reports SUCCEEDED.
    A test module subclasses it with its ``kind`` and ``run``."""

    kind: str

    def __init__(self):
        self.submitted: dict[str, str] = {}

    def connect(self) -> str:
        return "in-process"

    def reset(self) -> None:  # the reconciler drops a lost connection with it: none here
        return None

    def run(self, spec: str, input: str, output: str) -> None:
        raise NotImplementedError

    def submit(self, *, submission_id, entrypoint, runtime_env, metadata):
        import shlex

        args = shlex.split(entrypoint)
        assert args[:4] == ["python", "-m", "services.jobrun", self.kind], args
        self.run(*args[4:7])
        self.submitted[submission_id] = entrypoint
        return True

    def info(self, submission_id):
        from types import SimpleNamespace

        if submission_id not in self.submitted:
            return None
        return SimpleNamespace(status="SUCCEEDED", start_time=1_000, end_time=2_000, message="")

    def stop(self, submission_id):
        return True

    def logs(self, submission_id):
        return ""


@contextlib.contextmanager
def in_process_service(tmp: Path, cluster, tenant: str = "toy"):
    """The service on a real port in this process (uvicorn in a thread; SQLite and local
    files under ``tmp``) with ``cluster`` in place of the Ray Jobs API (a test double the
    caller labels), and one tenant: yields (url, token, ctx). In the fast tier: no
    process, no Ray."""
    import threading

    import uvicorn

    from services.app import create_app
    from services.context import build_context
    from services.db import session_scope
    from services.settings import Settings
    from services.tenants import create_tenant

    settings = Settings(env="development", data_dir=tmp / "data", ray_address="http://127.0.0.1:9",
                        poll_interval_s=0.2, port=free_port())
    ctx = build_context(settings)
    ctx.cluster = cluster
    srv = uvicorn.Server(uvicorn.Config(create_app(settings, ctx), host="127.0.0.1", port=settings.port,
                                       log_config=None, access_log=False))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    with session_scope(ctx.sessions) as s:
        _, _, token = create_tenant(s, tenant, storage_limit_bytes=1 << 30, max_concurrent_jobs=10)
    try:
        yield f"http://127.0.0.1:{settings.port}", token, ctx
    finally:
        srv.should_exit = True
        thread.join(30)


BACKENDS = ("sqlite-local", "postgres-s3")


def pg_s3_configured() -> bool:
    return bool(os.environ.get("PRIVATIZE_TEST_DATABASE_URL") and os.environ.get("PRIVATIZE_TEST_S3_ENDPOINT"))


def service_backend() -> str:
    """The back end the end-to-end tests run on: PostgreSQL + S3 where configured (CI),
    else SQLite + local files."""
    return "postgres-s3" if pg_s3_configured() else "sqlite-local"


def need_pg_s3() -> None:
    need(pg_s3_configured(), "PostgreSQL + S3 back end: set PRIVATIZE_TEST_DATABASE_URL and "
                             "PRIVATIZE_TEST_S3_ENDPOINT (.ci/run starts both)")


class Files:
    """The service's storage as the tests see it: local files or an S3 bucket."""

    def __init__(self, fs: pafs.FileSystem, root: str):
        self.fs, self.root = fs, root.rstrip("/")

    def list(self, rel: str = "") -> list[str]:
        """Files under ``rel`` (recursive), relative to the storage root."""
        base = f"{self.root}/{rel}".rstrip("/")
        sel = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        return sorted(i.path[len(self.root) + 1:] for i in self.fs.get_file_info(sel) if i.type == pafs.FileType.File)

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(f"{self.root}/{rel}").type != pafs.FileType.NotFound

    def read(self, rel: str) -> bytes:
        with self.fs.open_input_stream(f"{self.root}/{rel}", compression=None) as f:  # the bytes stored
            return f.read()


class Service:
    def __init__(self, base: Path, backend: str = "sqlite-local", llm_url: str | None = None):
        self.base = base
        self.backend = backend
        self.data = base / "data"
        self.log_path = base / "service.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.master_key_file = base / "master.key"
        self.ray_temp = Path(tempfile.mkdtemp(prefix="pvr-", dir="/tmp"))
        self.proc: subprocess.Popen | None = None
        self.database_url = f"sqlite:///{self.data / 'privatize.db'}"
        self.storage_uri: str | None = None
        s3_env: dict[str, str] = {}
        if backend == "postgres-s3":
            self.database_url = os.environ["PRIVATIZE_TEST_DATABASE_URL"]
            endpoint = os.environ["PRIVATIZE_TEST_S3_ENDPOINT"]
            s3_env = {"AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION",
                                                                                          "us-east-1"),
                      "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
                      "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
                      "AWS_EC2_METADATA_DISABLED": "true"}
            self.bucket = f"privatize-test-{secrets.token_hex(4)}"
            self.storage_uri = f"s3://{self.bucket}/svc"
            scheme, _, host = endpoint.partition("://")
            s3 = pafs.S3FileSystem(access_key=s3_env["AWS_ACCESS_KEY_ID"], secret_key=s3_env["AWS_SECRET_ACCESS_KEY"],
                                   region=s3_env["AWS_DEFAULT_REGION"], scheme=scheme, endpoint_override=host,
                                   allow_bucket_creation=True)
            s3.create_dir(self.bucket)
            self.files = Files(s3, f"{self.bucket}/svc")
            self.spool = self.data / "spool"
        else:
            self.files = Files(pafs.LocalFileSystem(), str(self.data / "storage"))
            self.spool = self.data / "storage" / ".spool"
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
            **({"PRIVATIZE_LLM_BASE_URLS": llm_url} if llm_url else {}),
            **s3_env,
        }
        for k in ("PRIVATIZE_MASTER_KEY", "PRIVATIZE_STORAGE_URI", "PRIVATIZE_RAY_ADDRESS",
                  "PRIVATIZE_URL", "PRIVATIZE_TOKEN"):
            self.env.pop(k, None)
        if self.storage_uri:
            self.env["PRIVATIZE_STORAGE_URI"] = self.storage_uri

    def spooled(self) -> list[Path]:
        """Uploads in flight (or left behind) in the service's spool."""
        return [p for p in self.spool.rglob("*") if p.is_file()] if self.spool.exists() else []

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

    def ray_jobs(self):
        """A Ray Jobs client of the embedded head, with its token (the head has Ray's token
        authentication on; the token is made beside the master key file)."""
        from ray.job_submission import JobSubmissionClient

        token = (self.master_key_file.parent / "ray-auth-token").read_text().strip()
        return JobSubmissionClient(self.ray_dashboard(), headers={"Authorization": f"Bearer {token}"})

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


# The real services, their Ray heads and what they share live for this package's tests
# (scope "package"), not the session's: torn down when tests/services ends, so their idle
# heads (GCS, raylet, dashboard, log monitor, the reconciler's reconnects) do not take the
# two cores' share of the training tests that follow.


@pytest.fixture(scope="package")
def llm_double():
    """The scripted OpenAI-compatible server (a test double for the paid LLM API a tenant
    pays for: ``tests/llm_double.py``) on loopback: the one LLM endpoint the test
    services list in ``PRIVATIZE_LLM_BASE_URLS``."""
    from tests.llm_double import ScriptedLLM

    with ScriptedLLM() as llm:
        yield llm


@pytest.fixture(scope="package")
def service(llm_double):
    """The real service of the end-to-end tests, on :func:`service_backend`."""
    with running_service(service_backend(), llm_double.url, "pvs-") as svc:
        yield svc


@pytest.fixture(scope="package")
def other_service(llm_double):
    """A real service on the other back end (PostgreSQL + S3 on a user's machine: skipped
    there without them; SQLite + local files in CI)."""
    other = "sqlite-local" if service_backend() == "postgres-s3" else "postgres-s3"
    if other == "postgres-s3":
        need_pg_s3()
    with running_service(other, llm_double.url, "pvo-") as svc:
        yield svc


def kill_embedded_head(svc: Service, timeout: float = 15.0) -> None:
    """The test service's embedded Ray head gone at once: its process group SIGKILLed (the
    head runs in a session of its own), then any process left that names its temp folder
    (a Ray process re-parented), its data folder (a worker, in a session of its own) or its
    cluster (a job's driver, in a session of its own).
    ``privatize admin ray stop`` (SIGTERM) lets Ray wind down for about 30 s once a job has
    run on it, and nothing of a test head is kept; the graceful stop is tested on its own
    (tests/services/test_ray_head.py, ``raycluster.stop_head``)."""
    from services.jobrun import CLUSTER_ENV
    from services.raycluster import STATE_FILE, processes_with_env

    try:
        st = json.loads((svc.data / STATE_FILE).read_text())
    except (OSError, ValueError):
        return  # no head recorded (none started, or an external cluster)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(st["pid"], signal.SIGKILL)
    temp = str(svc.ray_temp).encode()
    deadline = time.monotonic() + timeout
    while True:
        left = set(processes_with_env(CLUSTER_ENV, f"127.0.0.1:{st['gcs_port']}"))
        left |= set(processes_with_env("PRIVATIZE_DATA_DIR", str(svc.data)))  # its workers (own sessions)
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) != os.getpid():
                with contextlib.suppress(OSError):
                    if temp in Path(f"/proc/{d}/cmdline").read_bytes():
                        left.add(int(d))
        with contextlib.suppress(OSError):
            if Path(f"/proc/{st['pid']}/stat").read_text().split(") ", 1)[1][0] != "Z":
                left.add(st["pid"])
        if not left or time.monotonic() > deadline:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


@contextlib.contextmanager
def running_service(backend: str, llm_url: str, prefix: str, env: dict | None = None, **start):
    """A real service (its own data folder, master key and embedded Ray head; ``env``: more
    settings) for the ``with`` block; stopped, its head stopped and its files removed after."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    svc = Service(base, backend, llm_url=llm_url)
    svc.env.update(env or {})
    svc.cli("admin", "master-key", "new", "--out", str(svc.master_key_file))
    try:
        svc.start(**start)
        yield svc
    finally:
        svc.stop()
        kill_embedded_head(svc)
        if os.environ.get("PRIVATIZE_KEEP_TEST_DATA") != "1":  # kept: the data folder and Ray's logs
            shutil.rmtree(svc.ray_temp, ignore_errors=True)
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="package")
def corpus_file(tmp_path_factory) -> Path:
    from privatize.corpus import make_corpus

    p = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    make_corpus(p, n_docs=120, seed=7)
    return p


def crt_spec(text_key: str, pseudonym_key: str | None = None, num_shards: int = 4) -> dict:
    out = {"num_shards": num_shards}
    if pseudonym_key:
        out["pseudonym_key"] = pseudonym_key
    return {"version": 1,
            "stages": [{"kind": "split", "unit": "sentence"},
                       {"kind": "dedup", "method": "sha1", "unit": "segment", "action": "mask", "min_length": 20},
                       {"kind": "split_private"},
                       {"kind": "encrypt_text", "key": text_key}],
            "output": out}


TINY = {"version": 1, "kind": "pretrain", "data": {"seq_len": 32}, "model": {"preset": "tiny"},
        "optim": {"batch_size": 4, "max_steps": 4}, "workers": {"num_workers": 1},
        "checkpoint_every": 4, "report_every": 4}
"""The tiny training config of the training and evaluation tests."""

CANARIES = {"digits": 3, "count": 2, "repeats": 5, "held_out": 2}


@pytest.fixture(scope="package")
def tiny_training(service, corpus_file, tmp_path_factory):
    """A tenant's privatization job (canaries inserted with its HMAC key) and a tiny
    training on its output run with ``privatize submit train --wait --download --extract``:
    shared by the training and the evaluation tests (a Ray Train run costs about 15 s
    before its first step, so they share one per back end)."""
    import yaml

    t = service.new_tenant("trainer")
    corpus = t.upload(corpus_file).json()
    key = t.http.post("/v1/keys", json={"kind": "hmac"}).json()
    spec = {"version": 1, "stages": [{"kind": "canaries", "key": key["ref"], **CANARIES}], "output": {"num_shards": 2}}
    r = t.http.post("/v1/jobs", json={"corpus_id": corpus["id"], "spec": spec})
    assert r.status_code == 201, r.text
    job = t.wait(r.json()["id"])
    assert job["status"] == "succeeded", job["message"]
    tmp = tmp_path_factory.mktemp("training")
    (tmp / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    env = {"PRIVATIZE_URL": service.url, "PRIVATIZE_TOKEN": t.token}
    from tests.listeners import Listeners

    t0 = time.monotonic()
    from services.raycluster import read_state

    head = read_state(service.data)  # the service's embedded head: its workers, not another cluster's
    with Listeners(f"127.0.0.1:{head.gcs_port}" if head else None) as listeners:  # issue 36: the
        # training's process group listened on every interface
        r = service.cli("submit", "train", str(tmp / "tiny.yaml"), "--job", job["id"], "--wait",
                        "--poll", "0.5", "--download", str(tmp / "dl"), "--extract", env=env, check=False,
                        timeout=480)
    seconds = time.monotonic() - t0
    out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
    logs = t.http.get(f"/v1/jobs/{out['id']}/logs").text if out.get("id") else ""
    assert r.returncode == 0, (r.stderr[-2000:], out.get("message"), logs[-6000:])
    return {"tenant": t, "job": job, "key": key, "cli": out, "stderr": r.stderr, "dir": tmp, "env": env,
            "seconds": seconds, "logs": logs, "training": t.wait(out["id"]), "listeners": listeners}


@pytest.fixture(scope="package")
def acme(service):
    return service.new_tenant("acme")


@pytest.fixture(scope="package")
def crt_run(service, acme, corpus_file, tmp_path_factory):
    """One CRT job run through the API, downloaded: shared by several tests."""
    r = acme.upload(corpus_file)
    assert r.status_code == 201, r.text
    corpus = r.json()
    text_key = acme.http.post("/v1/keys", json={"kind": "vigenere", "length": 3000}).json()
    hmac_key = acme.http.post("/v1/keys", json={"kind": "hmac"}).json()
    siv_key = acme.http.post("/v1/keys", json={"kind": "aes-siv", "label": "entities"}).json()
    r = acme.http.post("/v1/jobs", json={"corpus_id": corpus["id"],
                                         "spec": crt_spec(text_key["ref"], hmac_key["ref"])})
    assert r.status_code == 201, r.text
    job = acme.wait(r.json()["id"])
    assert job["status"] == "succeeded", (job["message"], acme.http.get(f"/v1/jobs/{job['id']}/logs").text[-3000:])
    dest = tmp_path_factory.mktemp("download")
    listing = acme.http.get(f"/v1/jobs/{job['id']}/results").json()
    for f in listing["files"]:
        r = acme.http.get(f"/v1/jobs/{job['id']}/results/{f['name']}")
        assert r.status_code == 200, (f, r.text)
        p = dest / f["name"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(r.content)
    return {"corpus": corpus, "job": job, "dest": dest, "listing": listing,
            "keys": {"text": text_key, "hmac": hmac_key, "siv": siv_key}}


# ---- in process ---------------------------------------------------------------------

@pytest.fixture
def api(tmp_path):
    """The app in process: FastAPI's TestClient on SQLite with a Ray address nothing answers
    on (no job could run even if one were admitted), one tenant and one small corpus.
    Yields (client, corpus id, settings, engine)."""
    from fastapi.testclient import TestClient

    from services.app import create_app
    from services.settings import Settings
    from services.db import make_engine, session_factory, session_scope
    from services.tenants import create_tenant

    settings = Settings(env="development", data_dir=tmp_path / "data", ray_address="http://127.0.0.1:9",
                        poll_interval_s=60)
    with TestClient(create_app(settings)) as client:
        engine = make_engine(settings.effective_database_url)
        factory = session_factory(engine)
        with session_scope(factory) as s:
            _, _, token = create_tenant(s, "quota", storage_limit_bytes=1 << 30, max_concurrent_jobs=4)
        client.headers["Authorization"] = f"Bearer {token}"
        r = client.post("/v1/corpora?format=jsonl&name=c", content=b'{"text": "Hello there. Hello there."}\n')
        assert r.status_code == 201, r.text
        yield client, r.json()["id"], settings, engine
        engine.dispose()
