"""The Ray cluster the service submits to.

With ``PRIVATIZE_RAY_ADDRESS`` set, that cluster's Jobs API (its dashboard URL). Without
it, an **embedded local head**: the service starts ``ray start --head --block`` as a
daemon of its own (a new session, so it outlives the service and keeps running jobs
through a service restart), on loopback ports it picks, with ``RAY_AUTH_MODE=disabled``,
from the service's own interpreter (so jobs run ``python`` from the same venv). Its
address and process id are recorded in ``<data_dir>/ray-head.json``; a restarted
service finds it there and reuses it. ``stop_head`` sends it SIGTERM (``--block``
then stops every Ray process of that head, and nothing else).

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
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from services.errors import ClusterUnavailable, ConfigError
from services.settings import Settings

log = logging.getLogger(__name__)

STATE_FILE = "ray-head.json"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class HeadState:
    pid: int
    gcs_port: int
    dashboard_port: int
    temp_dir: str
    python: str
    started_at: float

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


def _dashboard_up(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/version", timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


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


def head_env(settings: Settings) -> dict[str, str]:
    """The environment of the embedded head: the service's, with the venv's ``bin``
    first on PATH, the project importable, auth off on loopback, and the master key
    file for workers."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    pp = env.get("PYTHONPATH", "")
    if str(PROJECT_ROOT) not in pp.split(os.pathsep):
        env["PYTHONPATH"] = f"{PROJECT_ROOT}{os.pathsep}{pp}" if pp else str(PROJECT_ROOT)
    env["RAY_AUTH_MODE"] = "disabled"
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
    if st is not None and _is_our_head(st) and _dashboard_up(st.dashboard_url):
        return st
    return None


def ensure_head(settings: Settings) -> HeadState:
    """The running embedded head, started if there is none."""
    data = settings.data_path
    with _lock(data):
        st = read_state(data)
        if st is not None and _is_our_head(st):
            deadline = time.monotonic() + settings.ray_start_timeout_s
            while time.monotonic() < deadline:  # it may still be starting
                if _dashboard_up(st.dashboard_url):
                    log.info("reusing the embedded Ray head (pid %d, dashboard %s)", st.pid, st.dashboard_url)
                    return st
                if not _is_our_head(st):
                    break
                time.sleep(0.5)
            if _is_our_head(st):
                _terminate(st.pid)
        return _start_head(settings)


def _start_head(settings: Settings) -> HeadState:
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
    out = subprocess.run([sys.executable, "-c", launcher, str(log_path), *cmd], env=head_env(settings),
                         capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout.strip())
    st = HeadState(pid=pid, gcs_port=gcs, dashboard_port=dash, temp_dir=str(temp), python=sys.executable,
                   started_at=time.time())
    tmp = data / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(st)))
    os.replace(tmp, data / STATE_FILE)
    deadline = time.monotonic() + settings.ray_start_timeout_s
    while time.monotonic() < deadline:
        if _dashboard_up(st.dashboard_url) and _jobs_api_up(st.dashboard_url):
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


def _jobs_api_up(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/jobs/", timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


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


def dashboard_url(settings: Settings, *, start: bool = True) -> str:
    if settings.ray_address:
        return settings.ray_address.rstrip("/")
    st = ensure_head(settings) if start else find_head(settings)
    if st is None:
        raise ClusterUnavailable("the embedded Ray head is not running")
    return st.dashboard_url
