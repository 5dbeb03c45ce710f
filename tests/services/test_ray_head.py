"""The embedded Ray head is closed to the network: every socket of every one of its
processes (GCS, raylet, dashboard and its agent, runtime-env agent, client server, the
job supervisor, the job's driver, its task and actor workers) is bound to loopback,
and its endpoints refuse a client without the token (the Jobs API over HTTP, the GCS
over gRPC). The token file: made once, 0600, beside the master key.

The listening sockets are read from ``/proc/net/{tcp,tcp6,udp,udp6}`` and matched by
inode to the sockets the head's processes hold (``/proc/<pid>/fd``): no psutil."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import stat
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from services import raycluster
from services.errors import ConfigError
from services.settings import Settings, write_master_key_file

LINUX = sys.platform.startswith("linux") and Path("/proc/net/tcp").exists()


# ---- the token file and the head's environment (no Ray) ----------------------------------

def _settings(tmp_path: Path, **kw) -> Settings:
    key = tmp_path / "secrets" / "master.key"
    if not key.exists():
        write_master_key_file(key)
    return Settings(data_dir=tmp_path / "data", master_key_file=key, ray_temp_dir=Path("/tmp/pvh-unused"), **kw)


def test_token_file_is_made_once_beside_the_master_key_and_private(tmp_path):
    s = _settings(tmp_path)
    path = raycluster.ensure_auth_token(s)
    assert path == tmp_path / "secrets" / "ray-auth-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0 and "\n" not in token
    assert raycluster.ensure_auth_token(s) == path and path.read_text() == token  # never overwritten
    os.chmod(path, 0o644)
    raycluster.ensure_auth_token(s)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # made private again
    assert raycluster.auth_headers(s) == {"Authorization": f"Bearer {token}"}


def test_token_file_setting_and_a_bad_token(tmp_path):
    s = _settings(tmp_path, ray_auth_token_file=tmp_path / "elsewhere" / "tok")
    assert raycluster.ensure_auth_token(s) == tmp_path / "elsewhere" / "tok"
    (tmp_path / "elsewhere" / "tok").write_text("short")
    with pytest.raises(ConfigError, match="not a Ray auth token"):
        raycluster.auth_headers(s)


def test_an_external_cluster_gets_the_token_only_when_one_is_configured(tmp_path):
    assert raycluster.auth_headers(Settings(ray_address="http://ray-head:8265", data_dir=tmp_path)) == {}
    tok = tmp_path / "ray-token"
    tok.write_text("a" * 64 + "\n")
    s = Settings(ray_address="http://ray-head:8265", data_dir=tmp_path, ray_auth_token_file=tok)
    assert raycluster.auth_headers(s) == {"Authorization": "Bearer " + "a" * 64}


def test_head_environment_confines_ray_to_loopback_with_token_auth(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-the-environment")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    s = _settings(tmp_path)
    env = raycluster.head_env(s, tmp_path / "tok")
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == str(tmp_path / "tok")
    assert "RAY_AUTH_TOKEN" not in env
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"


def test_a_head_recorded_without_token_auth_is_replaced(tmp_path, monkeypatch):
    s = _settings(tmp_path)
    s.data_path.mkdir(parents=True)
    old = {"pid": 4242, "gcs_port": 1, "dashboard_port": 2, "temp_dir": "/tmp/x", "python": sys.executable,
           "started_at": 0.0}  # a state file of a head started before token authentication
    (s.data_path / raycluster.STATE_FILE).write_text(json.dumps(old))
    calls = []
    monkeypatch.setattr(raycluster, "_is_our_head", lambda st: st.pid == 4242 and not calls)
    monkeypatch.setattr(raycluster, "_dashboard_state", lambda *a, **k: raycluster.UP)
    monkeypatch.setattr(raycluster, "_terminate", lambda pid, *a, **k: calls.append(("terminate", pid)))
    monkeypatch.setattr(raycluster, "_start_head", lambda st, tok, **kw: calls.append(("start", tok)) or "new")
    assert raycluster.ensure_head(s) == "new"
    assert calls == [("terminate", 4242), ("start", raycluster.auth_token_path(s))]


# ---- a real head, started the way the service starts it -----------------------------------

def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids


def head_processes(pid: int, session_root: str) -> set[int]:
    """The head's process tree, and any process that names its temp dir (a Ray process
    re-parented after its parent exited)."""
    kids, out, todo = _children(), set(), [pid]
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(kids.get(p, []))
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if session_root.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                    out.add(int(d))
            except OSError:
                pass
    return out


def _socket_inodes(pid: int) -> set[int]:
    found = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                found.add(int(target[8:-1]))
    except OSError:
        pass
    return found


def _address(hexaddr: str, v6: bool) -> str:
    raw = bytes.fromhex(hexaddr)
    if v6:  # four host-order 32-bit words
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
        return socket.inet_ntop(socket.AF_INET6, raw)
    return socket.inet_ntop(socket.AF_INET, raw[::-1])


def bound_sockets(pids: set[int]) -> list[tuple[int, str, str, int]]:
    """(pid, protocol, address, port) of every listening TCP socket and bound UDP socket
    the processes hold."""
    owner = {ino: p for p in pids for ino in _socket_inodes(p)}
    out = []
    for table, v6 in (("tcp", False), ("tcp6", True), ("udp", False), ("udp6", True)):
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local, state, inode = f[1], f[3], int(f[9])
            if inode not in owner or (table.startswith("tcp") and state != "0A"):  # 0A: LISTEN
                continue
            host, port = local.split(":")
            out.append((owner[inode], table.rstrip("6"), _address(host, v6), int(port, 16)))
    return out


def is_loopback(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def test_loopback_helpers():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("::ffff:10.0.0.2")
    assert _address("0100007F", False) == "127.0.0.1"
    assert _address("0000000000000000FFFF00000100007F", True) == "::ffff:127.0.0.1"


JOB = """
import os, time, ray
ray.init()
@ray.remote
class Actor:
    def pid(self):
        return os.getpid()
@ray.remote
def task(marker):
    open(marker, "w").close()
    deadline = time.time() + 120
    while not os.path.exists(marker + ".done") and time.time() < deadline:
        time.sleep(0.2)
    return os.environ.get("RAY_AUTH_MODE")
a = Actor.remote()
ray.get(a.pid.remote())
print("auth mode in the job:", ray.get(task.remote({marker!r})))
"""


def _http_status(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_embedded_head_listens_on_loopback_only_and_refuses_clients_without_the_token(tmp_path):
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    from ray.job_submission import JobStatus, JobSubmissionClient

    temp = Path(f"/tmp/pvh-{os.getpid()}")  # Ray's socket paths: keep it short
    s = Settings(data_dir=tmp_path / "data", master_key_file=write_master_key_file(tmp_path / "master.key"),
                 ray_temp_dir=temp, ray_num_cpus=1)
    st = raycluster.ensure_head(s)  # as the service does (services.context.Cluster)
    try:
        token = (tmp_path / "ray-auth-token").read_text()
        auth = {"Authorization": f"Bearer {token}"}
        assert raycluster.auth_headers(s) == auth and st.auth == "token"

        # a job with a driver, an actor and a task: their worker ports too
        marker = str(tmp_path / "running")
        script = tmp_path / "job.py"
        script.write_text(JOB.format(marker=marker))
        jobs = JobSubmissionClient(st.dashboard_url, headers=auth)
        job_id = jobs.submit_job(entrypoint=f"python {script}", entrypoint_num_cpus=0)
        deadline = time.monotonic() + 180
        while not os.path.exists(marker):
            assert time.monotonic() < deadline, jobs.get_job_logs(job_id)[-2000:]
            assert jobs.get_job_status(job_id) in (JobStatus.PENDING, JobStatus.RUNNING), \
                jobs.get_job_logs(job_id)[-2000:]
            time.sleep(0.3)

        pids = head_processes(st.pid, str(temp))
        sockets = bound_sockets(pids)
        Path(marker + ".done").touch()
        names = {p: Path(f"/proc/{p}/comm").read_text().strip() for p, *_ in sockets
                 if Path(f"/proc/{p}/comm").exists()}
        outside = [(names.get(p), proto, addr, port) for p, proto, addr, port in sockets if not is_loopback(addr)]
        assert not outside, f"bound outside loopback: {outside}"
        ports = {port for *_, port in sockets}
        assert st.gcs_port in ports and st.dashboard_port in ports
        assert {"gcs_server", "raylet"} <= set(names.values())
        assert sum(n.startswith("ray::") for n in names.values()) >= 3, names  # agents, actor, task, supervisor

        deadline = time.monotonic() + 120
        while jobs.get_job_status(job_id) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            assert time.monotonic() < deadline
            time.sleep(0.3)
        logs = jobs.get_job_logs(job_id)
        assert jobs.get_job_status(job_id) == JobStatus.SUCCEEDED, logs[-2000:]
        assert "auth mode in the job: token" in logs  # the driver and its workers used the token

        # without the token: the Jobs API and the GCS refuse
        assert _http_status(f"{st.dashboard_url}/api/jobs/", {}) == 401
        assert _http_status(f"{st.dashboard_url}/api/jobs/", {"Authorization": "Bearer " + "0" * 64}) == 403
        assert _http_status(f"{st.dashboard_url}/api/jobs/", auth) == 200
        with grpc.insecure_channel(f"127.0.0.1:{st.gcs_port}") as ch:
            gcs = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(ch)
            for md in (None, [("authorization", "Bearer " + "0" * 64)]):
                with pytest.raises(grpc.RpcError) as err:
                    gcs.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(), timeout=10, metadata=md)
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            nodes = gcs.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(), timeout=10,
                                       metadata=[("authorization", f"Bearer {token}")])
            assert [n.node_manager_address for n in nodes.node_info_list] == ["127.0.0.1"]
    finally:
        raycluster.stop_head(s)
    deadline = time.monotonic() + 30
    while (left := head_processes(st.pid, str(temp)) - {st.pid}) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left
    shutil.rmtree(temp, ignore_errors=True)


def test_a_request_never_starts_the_embedded_head(tmp_path):
    """Issue 36: a status poll hung 60 s while its request thread restarted a stopped
    embedded head. Only the reconciler's connect() starts it; a request's call answers at
    once that Ray is unavailable, and no head was started."""
    import time

    from services.context import Cluster
    from services.errors import ClusterUnavailable

    s = Settings(env="development", data_dir=tmp_path / "data")
    cluster = Cluster(s)
    t0 = time.monotonic()
    with pytest.raises(ClusterUnavailable, match="the embedded Ray head is not running"):
        cluster.info("0" * 16)
    assert time.monotonic() - t0 < 5 and raycluster.find_head(s) is None
