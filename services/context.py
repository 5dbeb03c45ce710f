"""What every request handler and the reconciler share: settings, database, storage,
the master key and the Ray Jobs client. Built once by ``build_context`` (at startup, or
by an admin command)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import anyio
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from services import raycluster
from services.db import make_engine, migrate, session_factory
from services.errors import ClusterUnavailable
from services.jobrun import CLUSTER_ENV
from services.rayhealth import RayHealth
from services.settings import Settings, check_secrets
from services.storage import Storage

log = logging.getLogger(__name__)


VERSION_CHECK_S = 10.0
"""At most how long the Jobs API's version check (and any connection) may take."""


def jobs_client(url: str, headers: dict, timeout_s: float):
    """Ray's ``JobSubmissionClient`` for ``url``, every request of it bounded by
    ``timeout_s`` (connecting, and the version check at construction: at most
    :data:`VERSION_CHECK_S`): Ray's client passes no timeout to ``requests``. A request that runs out raises
    ``requests.Timeout``, which :meth:`Cluster._call` answers as the cluster unavailable (a
    submission that timed out is submitted again under the same id: Ray refuses a second
    start)."""
    from ray.job_submission import JobSubmissionClient

    class BoundedJobSubmissionClient(JobSubmissionClient):
        def _do_request(self, method, endpoint, **kwargs):
            # the version check (twice at construction, under the cluster's lock) is trivial:
            # a dashboard that does not answer it soon is not waited on for the full timeout
            short = min(VERSION_CHECK_S, timeout_s)
            kwargs.setdefault("timeout", (short, short if endpoint == "/api/version" else timeout_s))
            return super()._do_request(method, endpoint, **kwargs)

    return BoundedJobSubmissionClient(url, headers=headers)


class Cluster:
    """The Ray Jobs API, through ``ray.job_submission.JobSubmissionClient``. Every call
    maps connection failures to ``ClusterUnavailable`` and drops the cached client so
    the next call reconnects. Only :meth:`connect` (the background reconciler) starts or
    restarts the embedded head: a request never waits the minute that takes (a status poll
    once hung 60 s behind one), it answers that Ray is unavailable."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._client = None
        self._lock = threading.Lock()
        self.gcs_address: str | None = None
        """The GCS address of the cluster the cached client talks to (the embedded head's,
        read with its dashboard URL); None for an external cluster."""

    def _get(self, start: bool = False):
        with self._lock:
            if self._client is None:
                url = raycluster.dashboard_url(self.settings, start=start)
                self.gcs_address = raycluster.gcs_address(self.settings)
                try:
                    self._client = jobs_client(url, raycluster.auth_headers(self.settings),
                                               self.settings.ray_api_timeout_s)
                except (ConnectionError, RuntimeError, OSError) as exc:
                    raise ClusterUnavailable(f"cannot reach the Ray Jobs API at {url}: "
                                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") \
                        from None
            return self._client

    def reset(self) -> None:
        with self._lock:
            self._client = None

    def _call(self, fn, *a, **kw):
        import requests

        client = self._get()
        try:
            return fn(client, *a, **kw)
        except (requests.RequestException, ConnectionError) as exc:
            self.reset()
            raise ClusterUnavailable(f"the Ray Jobs API did not answer ({type(exc).__name__})") from None

    def connect(self) -> str:
        """Connect, starting (or restarting) the embedded head when there is none."""
        self._get(start=True)
        return raycluster.dashboard_url(self.settings, start=False)

    def submit(self, *, submission_id: str, entrypoint: str, runtime_env: dict, metadata: dict) -> bool:
        """True when submitted now; False when Ray already has this submission id (a
        re-submission after a crash: the job is not started twice). The job names the
        cluster it is submitted to (:func:`cluster_env`): its driver and every worker it
        starts join that one, never another head on the host."""

        def go(c):
            env = cluster_env(self.gcs_address)
            rt = {**runtime_env, "env_vars": {**runtime_env.get("env_vars", {}), **env}} if env else runtime_env
            try:
                c.submit_job(entrypoint=entrypoint, submission_id=submission_id, runtime_env=rt,
                             metadata=metadata, entrypoint_num_cpus=0)
                return True
            except RuntimeError as exc:
                if "already exists" in str(exc):
                    return False
                raise ClusterUnavailable(f"Ray refused the job: {_first_line(exc)}") from None

        return self._call(go)

    def info(self, submission_id: str):
        """The job's ``JobDetails``, or None when Ray does not know it."""

        def go(c):
            try:
                return c.get_job_info(submission_id)
            except RuntimeError as exc:
                if "404" in str(exc) or "does not exist" in str(exc):
                    return None
                raise ClusterUnavailable(f"Ray Jobs API error: {_first_line(exc)}") from None

        return self._call(go)

    def stop(self, submission_id: str) -> bool:
        def go(c):
            try:
                return c.stop_job(submission_id)
            except RuntimeError as exc:
                if "404" in str(exc) or "does not exist" in str(exc):
                    return False
                raise ClusterUnavailable(f"Ray Jobs API error: {_first_line(exc)}") from None

        return self._call(go)

    def logs(self, submission_id: str) -> str:
        def go(c):
            try:
                return c.get_job_logs(submission_id)
            except RuntimeError as exc:
                if "404" in str(exc) or "does not exist" in str(exc):
                    return ""
                raise ClusterUnavailable(f"Ray Jobs API error: {_first_line(exc)}") from None

        return self._call(go)


def cluster_env(gcs_address: str | None) -> dict[str, str]:
    """The environment that names a job's cluster: ``RAY_ADDRESS`` (what Ray reads in the
    job's tasks and actors, and in anything they start) and :data:`CLUSTER_ENV` (what the
    driver connects to; Ray's job supervisor rewrites the driver's ``RAY_ADDRESS``)."""
    return {"RAY_ADDRESS": gcs_address, CLUSTER_ENV: gcs_address} if gcs_address else {}


def _first_line(exc: BaseException) -> str:
    s = str(exc).strip()
    for line in reversed(s.splitlines()):
        if line.strip(" .") and ("Error" in line or "error" in line):
            return line.strip()[:300]
    return (s.splitlines()[0] if s else type(exc).__name__)[:300]


class ServiceContext:
    def __init__(self, settings: Settings, *, engine: Engine, storage: Storage, master: bytes):
        self.settings = settings
        self.engine = engine
        self.sessions: sessionmaker[Session] = session_factory(engine)
        self.storage = storage
        self._master = master
        self.cluster = Cluster(settings)
        self.ray_health = RayHealth(settings)
        """Whether the cluster is reachable now (a real probe, cached for a moment)."""
        self.spool: Path = storage.spool_dir(settings.data_path / "spool")
        self.admission = threading.Lock()
        """Serialises limit checks with the inserts they admit (one service process)."""
        self.reserved: dict[str, int] = {}
        """Bytes of uploads in flight, per tenant."""
        self.submitting: set[str] = set()
        """Jobs being submitted to Ray right now (by a request or the reconciler)."""
        self.asked_ray_at: dict[str, float] = {}
        """When a status request last asked Ray about an active job (monotonic seconds)."""
        self.job_progress: dict[str, tuple[float, dict | None]] = {}
        """A running job's progress as last read from storage (a training's last metrics, a
        privatization's figures), and when (monotonic seconds)."""
        self.inline_reads = engine.url.get_backend_name() == "sqlite"
        """Short reads run on the event loop (see :meth:`read`)."""

    def cached_progress(self, job_id: str, read) -> dict | None:
        """``read()`` (a job's progress from storage), at most once a second per job."""
        import time

        now = time.monotonic()
        hit = self.job_progress.get(job_id)
        if hit is not None and now - hit[0] < 1.0:
            return hit[1]
        got = read()
        with self.admission:
            self.job_progress[job_id] = (now, got)
            if len(self.job_progress) > 10000:
                for k in [k for k, (t, _) in self.job_progress.items() if now - t > 1.0]:
                    self.job_progress.pop(k, None)
        return got

    async def read(self, fn, *args):
        """``fn(*args)``, a short database read, from async code. On SQLite (the embedded
        default) it runs inline: a WAL-mode read of a few indexed rows takes tens of
        microseconds, never waits for a writer, and the hop to a worker thread costs more
        than the read (0.3 ms of the ~1 ms a job poll costs). On a database across a
        network it runs on a worker thread, so a slow round trip never stalls the loop.
        An inline read never waits for a pooled connection: the pool (40 + 10 overflow by
        default) outnumbers anyio's 40 worker threads."""
        if self.inline_reads:
            return fn(*args)
        return await anyio.to_thread.run_sync(fn, *args)

    def should_ask_ray(self, job_id: str, every_s: float = 1.0) -> bool:
        """At most one Ray Jobs API call per active job per ``every_s`` from status
        requests: a hundred clients polling one job cost one call a second, not a hundred."""
        import time

        now = time.monotonic()
        with self.admission:
            if now - self.asked_ray_at.get(job_id, float("-inf")) < every_s:
                return False
            self.asked_ray_at[job_id] = now
            if len(self.asked_ray_at) > 10000:  # forget finished jobs
                self.asked_ray_at = {k: v for k, v in self.asked_ray_at.items() if now - v < every_s}
            return True

    @property
    def master(self) -> bytes:
        return self._master

    def __repr__(self) -> str:  # never the master key
        return f"ServiceContext(db={self.engine.url!r}, storage={self.storage.uri!r})"


def build_context(settings: Settings, *, run_migrations: bool | None = None) -> ServiceContext:
    master = check_secrets(settings)
    settings.data_path.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.effective_database_url, settings.database_pool_size,
                         settings.sqlite_busy_timeout_s)
    if settings.auto_migrate if run_migrations is None else run_migrations:
        migrate(engine)
    storage = Storage(settings.effective_storage_uri)
    return ServiceContext(settings, engine=engine, storage=storage, master=master)
