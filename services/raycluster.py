"""The Ray cluster the service submits to.

With ``PRIVATIZE_RAY_ADDRESS`` set, that cluster's Jobs API (its dashboard URL), called
with the token in ``PRIVATIZE_RAY_AUTH_TOKEN_FILE`` when one is set. Without it, an
**embedded local head**: the service starts ``ray start --head --block`` as a daemon of
its own (a new session, so it outlives the service and keeps running jobs through a
service restart), from the service's own interpreter (so jobs run ``python`` from the
same venv). Its address and process id are recorded in ``<data_dir>/ray-head.json``; a
restarted service finds it there and reuses it. ``stop_head`` sends it SIGTERM
(``--block`` then stops every Ray process of that head, and nothing else).

The embedded head is closed to the network twice over:

* **Loopback only.** Every port is bound to 127.0.0.1: the GCS, the raylet's node and
  object managers, the client server, the dashboard and its agent, the runtime-env
  agent, the metrics export, and every worker's gRPC port. ``--node-ip-address=127.0.0.1``
  alone is not enough: ``ray start`` replaces a loopback address with the host's
  routable one, and Ray's servers bind to the node address (the GCS and raylets to all
  interfaces). ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is Ray's own switch for a
  single-machine cluster: the node address stays 127.0.0.1, so every server binds to
  loopback, and no other node can join.
* **Token authentication** (``RAY_AUTH_MODE=token``): every gRPC and HTTP endpoint of the
  head asks for the token in :func:`auth_token_path` (made once, 32 random bytes in hex,
  mode 0600, beside the master key file), which the head and its workers (the job
  drivers included) read through ``RAY_AUTH_TOKEN_PATH`` and the service's Jobs client
  sends as ``Authorization: Bearer``. A head recorded without it (one started by an
  older version) is stopped and replaced.

The master key reaches the head, and so its workers, as ``PRIVATIZE_MASTER_KEY_FILE``
in its environment: a deployment secret, never a job argument.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from services.errors import ClusterUnavailable, ConfigError
from services.settings import Settings

log = logging.getLogger(__name__)

STATE_FILE = "ray-head.json"
AUTH_TOKEN_FILE = "ray-auth-token"
AUTH_MODE = "token"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class HeadState:
    pid: int
    gcs_port: int
    dashboard_port: int
    temp_dir: str
    python: str
    started_at: float
    auth: str = "disabled"
    """Ray's authentication mode on this head (``token`` since the head is closed to the
    network; a state file without it is a head started before)."""

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:  # no /proc: fall back to a signal 0
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def _is_our_head(state: HeadState) -> bool:
    """The recorded pid is still the ``ray start --block`` we launched (not a reused pid)."""
    if not _alive(state.pid):
        return False
    try:
        cmd = Path(f"/proc/{state.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc to check against; trust the dashboard probe
    return b"--block" in cmd and f"--port={state.gcs_port}".encode() in cmd


UP, DOWN, REFUSED = "up", "down", "refused"


def _probe(url: str, path: str, headers: dict[str, str], timeout: float) -> str:
    """``up`` (200), ``refused`` (401 or 403: the head does not take our token) or ``down``."""
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}{path}", headers=headers), timeout=timeout) as r:
            return UP if r.status == 200 else DOWN
    except urllib.error.HTTPError as exc:
        return REFUSED if exc.code in (401, 403) else DOWN
    except (urllib.error.URLError, OSError, ValueError):
        return DOWN


def _dashboard_state(url: str, headers: dict[str, str], timeout: float = 2.0) -> str:
    return _probe(url, "/api/version", headers, timeout)


def _dashboard_up(url: str, headers: dict[str, str], timeout: float = 2.0) -> bool:
    return _dashboard_state(url, headers, timeout) == UP


def _ray_temp_dir(settings: Settings) -> Path:
    if settings.ray_temp_dir is not None:
        return settings.ray_temp_dir.expanduser().resolve()
    h = hashlib.sha256(str(settings.data_path).encode()).hexdigest()[:10]
    return Path("/tmp") / f"privatize-ray-{h}"


def _ray_cli() -> list[str]:
    exe = Path(sys.executable)
    script = exe.with_name("ray")
    if script.exists():
        return [str(exe), str(script)]
    return [str(exe), "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"]


# ---- the Ray token -------------------------------------------------------------------------

def auth_token_path(settings: Settings) -> Path:
    """Where the embedded head's Ray token is: ``PRIVATIZE_RAY_AUTH_TOKEN_FILE``, else
    ``ray-auth-token`` beside the master key file (in the data directory when there is no
    key file, or when the key's directory is not writable and holds no token yet)."""
    if settings.ray_auth_token_file is not None:
        return settings.ray_auth_token_file.expanduser().resolve()
    fallback = settings.data_path / AUTH_TOKEN_FILE
    mk = settings.effective_master_key_file
    if mk is None:
        return fallback
    beside = mk.parent / AUTH_TOKEN_FILE
    if beside.exists() or not fallback.exists() and os.access(mk.parent, os.W_OK):
        return beside
    return fallback


def _read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the Ray auth token "
                          f"({getattr(exc, 'strerror', None) or type(exc).__name__})") from None
    if len(token) < 32 or any(c.isspace() for c in token):
        raise ConfigError(f"{path}: not a Ray auth token (one line of at least 32 characters)")
    return token


def ensure_auth_token(settings: Settings) -> Path:
    """The embedded head's token file, made once (``secrets.token_hex(32)``, mode 0600,
    never overwritten); a file others can read is made private again."""
    path = auth_token_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            log.warning("%s was readable by others (mode %o): made private (0600)", path, mode)
            os.chmod(path, 0o600)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot create the Ray auth token ({exc.strerror}); set "
                          "PRIVATIZE_RAY_AUTH_TOKEN_FILE to a writable place") from None
    else:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(secrets.token_hex(32))  # no newline: Ray reads the file's bytes as the token
        log.info("made the embedded Ray head's auth token %s (mode 0600)", path)
    _read_token(path)
    return path


def auth_headers(settings: Settings) -> dict[str, str]:
    """The ``Authorization`` header for the Ray Jobs API: the embedded head's token, or
    for ``PRIVATIZE_RAY_ADDRESS`` the one in ``PRIVATIZE_RAY_AUTH_TOKEN_FILE`` (none when
    that is unset)."""
    if settings.ray_address:
        if settings.ray_auth_token_file is None:
            return {}
        path = settings.ray_auth_token_file.expanduser()
    else:
        path = auth_token_path(settings)
        if not path.exists():
            return {}
    return {"Authorization": f"Bearer {_read_token(path)}"}


def head_env(settings: Settings, token_file: Path | None = None) -> dict[str, str]:
    """The environment of the embedded head: the service's, with the venv's ``bin``
    first on PATH, the project importable, a loopback-only node with Ray's token
    authentication on, and the master key file for workers."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    pp = env.get("PYTHONPATH", "")
    if str(PROJECT_ROOT) not in pp.split(os.pathsep):
        env["PYTHONPATH"] = f"{PROJECT_ROOT}{os.pathsep}{pp}" if pp else str(PROJECT_ROOT)
    # the node address stays 127.0.0.1 (``ray start`` would take the host's routable one),
    # so the GCS, raylet, agents and workers bind to loopback; no other node can join
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    env["RAY_AUTH_MODE"] = AUTH_MODE
    env["RAY_AUTH_TOKEN_PATH"] = str(token_file or auth_token_path(settings))
    env.pop("RAY_AUTH_TOKEN", None)  # it would take precedence over the file
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    mk = settings.effective_master_key_file
    if mk is not None:
        env["PRIVATIZE_MASTER_KEY_FILE"] = str(mk)
        env.pop("PRIVATIZE_MASTER_KEY", None)
    # settings meant for the service, not for jobs
    for k in ("PRIVATIZE_DATABASE_URL", "PRIVATIZE_KEY_BUNDLE"):
        env.pop(k, None)
    return env


def read_state(data_dir: Path) -> HeadState | None:
    p = Path(data_dir) / STATE_FILE
    try:
        return HeadState(**json.loads(p.read_text()))
    except (OSError, ValueError, TypeError):
        return None


@contextlib.contextmanager
def _lock(data_dir: Path):
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "ray-head.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def find_head(settings: Settings) -> HeadState | None:
    st = read_state(settings.data_path)
    if st is not None and _is_our_head(st) and _dashboard_up(st.dashboard_url, auth_headers(settings)):
        return st
    return None


def ensure_head(settings: Settings) -> HeadState:
    """The running embedded head, started if there is none."""
    data = settings.data_path
    with _lock(data):
        token_file = ensure_auth_token(settings)
        st = read_state(data)
        if st is not None and _is_our_head(st):
            if st.auth != AUTH_MODE:
                log.warning("the embedded Ray head (pid %d) runs without token authentication and may listen "
                            "on every interface: stopping it and starting a closed one", st.pid)
            else:
                headers = auth_headers(settings)
                deadline = time.monotonic() + settings.ray_start_timeout_s
                while time.monotonic() < deadline:  # it may still be starting
                    state = _dashboard_state(st.dashboard_url, headers)
                    if state == UP:
                        log.info("reusing the embedded Ray head (pid %d, dashboard %s)", st.pid, st.dashboard_url)
                        return st
                    if state == REFUSED:
                        log.warning("the embedded Ray head (pid %d) refuses the token in %s (a new token?): "
                                    "restarting it", st.pid, token_file)
                        break
                    if not _is_our_head(st):
                        break
                    time.sleep(0.5)
            if _is_our_head(st):
                _terminate(st.pid)
        # a head this data folder ran before is gone (or was replaced): the new one is a restart
        return _start_head(settings, token_file, replacing=st is not None)


_restarts = 0


def restart_count() -> int:
    """Embedded heads this process launched in place of one that was gone or replaced
    (the service's ``privatize_ray_head_restarts_total`` follows it). Counted before the
    new head's state is written, so nobody sees the new head before the count."""
    return _restarts


def _start_head(settings: Settings, token_file: Path, *, replacing: bool = False) -> HeadState:
    data = settings.data_path
    temp = _ray_temp_dir(settings)
    if len(str(temp)) > 40:
        raise ConfigError(f"PRIVATIZE_RAY_TEMP_DIR {temp} is too long for Ray's socket paths (40 characters at most)")
    temp.mkdir(parents=True, exist_ok=True)
    (data / "logs").mkdir(parents=True, exist_ok=True)
    gcs, dash, client, agent_listen, agent_grpc, rt_env, metrics, node_mgr, obj_mgr = _free_ports(9)
    from privatize.ray import local_init_args

    num_cpus = settings.ray_num_cpus or os.cpu_count() or 1
    cmd = _ray_cli() + [
        "start", "--head", "--block", f"--port={gcs}", "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--ray-client-server-port={client}",
        f"--dashboard-agent-listen-port={agent_listen}", f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={rt_env}", f"--metrics-export-port={metrics}",
        f"--node-manager-port={node_mgr}", f"--object-manager-port={obj_mgr}",
        f"--num-cpus={num_cpus}", f"--temp-dir={temp}", "--disable-usage-stats",
        f"--system-config={json.dumps(local_init_args(num_cpus)['_system_config'])}",
    ]
    log_path = data / "logs" / "ray-head.log"
    # Detach twice over: a new session (signals to the service's group do not reach it)
    # through a short-lived launcher, so the head is not the service's child and never
    # lingers as its zombie.
    launcher = (
        "import subprocess, sys\n"
        "log = open(sys.argv[1], 'ab')\n"
        "p = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, "
        "start_new_session=True, close_fds=True)\n"
        "print(p.pid, flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", launcher, str(log_path), *cmd],
                         env=head_env(settings, token_file), capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout.strip())
    st = HeadState(pid=pid, gcs_port=gcs, dashboard_port=dash, temp_dir=str(temp), python=sys.executable,
                   started_at=time.time(), auth=AUTH_MODE)
    if replacing:
        global _restarts
        _restarts += 1
    tmp = data / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(st)))
    os.replace(tmp, data / STATE_FILE)
    headers = auth_headers(settings)
    deadline = time.monotonic() + settings.ray_start_timeout_s
    while time.monotonic() < deadline:
        if _dashboard_up(st.dashboard_url, headers) and _jobs_api_up(st.dashboard_url, headers):
            log.info("started the embedded Ray head (pid %d, %d CPUs, dashboard %s)", pid, num_cpus,
                     st.dashboard_url)
            return st
        if not _alive(pid):
            break
        time.sleep(0.5)
    tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    _terminate(pid)
    raise ClusterUnavailable(f"the embedded Ray head did not come up (log: {log_path}): "
                             f"{tail.strip().splitlines()[-1] if tail.strip() else 'no output'}")


def _jobs_api_up(url: str, headers: dict[str, str]) -> bool:
    return _probe(url, "/api/jobs/", headers, 5.0) == UP


def _terminate(pid: int, timeout: float = 45.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        log.warning("Ray head %d ignored SIGTERM; killing its process group", pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # its own session: the group is the head's alone


DRIVER_GRACE_S = 10.0
"""How long a lost head's job driver has to exit after SIGTERM before it is SIGKILLed."""


def processes_with_env(name: str, value: str) -> list[int]:
    """Pids of the processes on this host whose environment has ``name=value`` (read from
    ``/proc/<pid>/environ``: only this user's processes are readable, others are skipped;
    never this process). Empty where there is no ``/proc``."""
    want, me = f"{name}={value}".encode(), os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return sorted(int(d) for d in entries if d.isdigit() and int(d) != me and _has_env(int(d), want))


def _has_env(pid: int, want: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return want in fh.read().split(b"\0")
    except OSError:  # gone, or not ours
        return False


def terminate_processes(pids: list[int], grace_s: float = DRIVER_GRACE_S, *,
                        still: Callable[[int], bool] = lambda pid: True) -> list[int]:
    """SIGTERM each of ``pids``; those still alive after ``grace_s`` (and for which
    ``still(pid)`` holds: the pid was not reused meanwhile) are SIGKILLed. Returns the
    pids that were signalled."""
    sent = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            sent.append(pid)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in sent):
        time.sleep(0.1)
    for pid in sent:
        if _alive(pid) and still(pid):
            log.warning("process %d ignored SIGTERM for %.0f s: killing it", pid, grace_s)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    return sent


def reap_lost_head(settings: Settings, grace_s: float = DRIVER_GRACE_S) -> list[int]:
    """Terminate what the embedded head that is gone left running on this host: its jobs'
    drivers (``python -m services.jobrun ...``, started by Ray's job supervisor in their
    own session, so the head's process group took them not with it; init adopts them and
    each holds its memory) and anything else whose environment names that head's GCS
    address as its cluster (``services.jobrun.CLUSTER_ENV``, set in every job's
    ``runtime_env``). SIGTERM, then SIGKILL after ``grace_s``. Nothing when the service
    uses an external cluster (``PRIVATIZE_RAY_ADDRESS``: its processes are not this
    host's to end), no head is recorded, or the recorded head still runs. Returns the pids
    it signalled."""
    from services.jobrun import CLUSTER_ENV

    if settings.ray_address:
        return []
    st = read_state(settings.data_path)
    if st is None or _is_our_head(st):
        return []
    address = f"127.0.0.1:{st.gcs_port}"
    pids = processes_with_env(CLUSTER_ENV, address)
    if not pids:
        return []
    want = f"{CLUSTER_ENV}={address}".encode()
    sent = terminate_processes(pids, grace_s, still=lambda pid: _has_env(pid, want))
    log.warning("the embedded Ray head (pid %d) is gone: terminated %d process(es) of its jobs (%s)", st.pid,
                len(sent), ", ".join(map(str, sent)))
    return sent


def stop_head(settings: Settings) -> bool:
    """Stop the embedded head recorded under the data directory. True if one ran."""
    data = settings.data_path
    with _lock(data):
        st = read_state(data)
        if st is None:
            return False
        running = _is_our_head(st)
        if running:
            _terminate(st.pid)
            log.info("stopped the embedded Ray head (pid %d)", st.pid)
        (data / STATE_FILE).unlink(missing_ok=True)
        if settings.ray_temp_dir is None and Path(st.temp_dir) == _ray_temp_dir(settings):
            shutil.rmtree(st.temp_dir, ignore_errors=True)  # the session logs of a head that is gone
        return running


def gcs_address(settings: Settings) -> str | None:
    """The embedded head's GCS address (``127.0.0.1:PORT``): what every job the service
    submits to it names as its cluster (``RAY_ADDRESS``), so that nothing a job runs can
    join another Ray head on this host. None with ``PRIVATIZE_RAY_ADDRESS`` (that
    cluster's job supervisor sets its own) or when no head is recorded."""
    if settings.ray_address:
        return None
    st = read_state(settings.data_path)
    return f"127.0.0.1:{st.gcs_port}" if st is not None else None


def dashboard_url(settings: Settings, *, start: bool = True) -> str:
    if settings.ray_address:
        return settings.ray_address.rstrip("/")
    st = ensure_head(settings) if start else find_head(settings)
    if st is None:
        raise ClusterUnavailable("the embedded Ray head is not running")
    return st.dashboard_url
