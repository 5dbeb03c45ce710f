"""Issue 53, item 4: every job the service starts names its cluster. The service puts its
embedded head's GCS address in the job's ``runtime_env`` (``RAY_ADDRESS`` for the job's
tasks and actors, ``PRIVATIZE_RAY_CLUSTER`` for the driver); ``services.jobrun``
connects the driver there, refuses a supervisor that named another cluster, and says in
the job's log where it ran. Job logs show locations as the tenant knows them: no Ray
session folder, no site-packages, no source tree.

The end-to-end case runs a job through a real service while a second Ray head (another
user's, say) runs on the same host, and reads in the job's log the GCS address its
driver was connected to, as Ray reported it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from services import raycluster
from services.context import Cluster, cluster_env
from services.jobrun import CLUSTER_ENV, join_cluster
from services.settings import Settings
from tests.services.conftest import free_port


def test_join_cluster_names_the_service_cluster_or_refuses():
    assert join_cluster({}) is None  # an external cluster: the supervisor's RAY_ADDRESS stands
    env = {CLUSTER_ENV: "127.0.0.1:6001", "RAY_ADDRESS": "127.0.0.1:6999"}
    with pytest.raises(RuntimeError, match="supervisor named the cluster 127.0.0.1:6999, the service 127.0.0.1:6001"):
        join_cluster(env)
    assert env["RAY_ADDRESS"] == "127.0.0.1:6999"  # nothing was changed, nothing connected


def test_submit_names_the_cluster_in_the_runtime_env(tmp_path):
    settings = Settings(env="development", data_dir=tmp_path / "data")
    cluster = Cluster(settings)
    got = {}
    cluster._client = SimpleNamespace(submit_job=lambda **kw: got.update(kw))
    runtime_env = {"env_vars": {"PRIVATIZE_JOB_ID": "J1"}, "worker_process_setup_hook": "x.y"}
    cluster.gcs_address = "127.0.0.1:6001"
    assert cluster.submit(submission_id="J1", entrypoint="python -m services.jobrun privatize a b c",
                          runtime_env=runtime_env, metadata={})
    assert got["runtime_env"]["env_vars"] == {"PRIVATIZE_JOB_ID": "J1", "RAY_ADDRESS": "127.0.0.1:6001",
                                              CLUSTER_ENV: "127.0.0.1:6001"}
    assert got["runtime_env"]["worker_process_setup_hook"] == "x.y"
    assert runtime_env["env_vars"] == {"PRIVATIZE_JOB_ID": "J1"}  # the caller's dict is not changed
    # an external cluster: its own supervisor's address (the service knows only its dashboard)
    cluster.gcs_address = None
    cluster.submit(submission_id="J2", entrypoint="e", runtime_env=runtime_env, metadata={})
    assert got["runtime_env"] == runtime_env and cluster_env(None) == {}


def test_gcs_address_is_the_recorded_head(tmp_path):
    settings = Settings(env="development", data_dir=tmp_path / "data")
    assert raycluster.gcs_address(settings) is None
    settings.data_path.mkdir(parents=True)
    (settings.data_path / raycluster.STATE_FILE).write_text(
        '{"pid": 1, "gcs_port": 6123, "dashboard_port": 8265, "temp_dir": "/tmp/pr-x", "python": "p", '
        '"started_at": 0, "auth": "token"}')
    assert raycluster.gcs_address(settings) == "127.0.0.1:6123"
    assert raycluster.gcs_address(Settings(env="development", data_dir=tmp_path / "data",
                                           ray_address="http://10.0.0.1:8265")) is None


def test_logs_hide_the_ray_session_folder_python_and_source_tree(tmp_path):
    from services.jobs import storage_relative

    settings = Settings(env="development", data_dir=tmp_path / "data")
    settings.data_path.mkdir(parents=True)
    (settings.data_path / raycluster.STATE_FILE).write_text(
        '{"pid": 1, "gcs_port": 6123, "dashboard_port": 8265, "temp_dir": "/tmp/pr-abc", "python": "p", '
        '"started_at": 0, "auth": "token"}')
    st = SimpleNamespace(root=str(tmp_path / "data" / "storage"),
                         location=lambda rel: f"{tmp_path}/data/storage/{rel}")
    ctx = SimpleNamespace(storage=st, settings=settings)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    log = (f"(raylet) logs in /tmp/pr-abc/session_2026/logs/worker.err\n"
           f'  File "{site}/ray/_private/worker.py", line 1, in get\n'
           f'  File "{raycluster.PROJECT_ROOT}/privatize/job.py", line 2, in run_job\n'
           f"model in {tmp_path}/data/storage/tenants/T1/jobs/J/output/model")
    out = storage_relative(ctx, "T1", log)
    for server in ("/tmp/pr-abc", site, str(raycluster.PROJECT_ROOT), str(tmp_path)):
        assert server not in out, (server, out)
    assert "<ray>/session_2026/logs/worker.err" in out and "<service>/privatize/job.py" in out
    assert "<python>/" in out and "model in jobs/J/output/model" in out


@pytest.fixture
def foreign_head():
    """A second Ray head on this host (no dashboard, no CPUs: someone else's), in its own
    session and temp folder; killed with its process group afterwards."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="pvx-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    proc = subprocess.Popen([sys.executable, str(Path(sys.executable).with_name("ray")), "start", "--head",
                             "--block", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=0",
                             "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        from ray._private.services import find_gcs_addresses

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            find_gcs_addresses.cache_clear()
            if any(a.endswith(f":{port}") for a in find_gcs_addresses()):
                break
            assert proc.poll() is None, "the second Ray head exited"
            time.sleep(0.5)
        else:
            raise AssertionError("the second Ray head did not start in 60 s")
        yield f"127.0.0.1:{port}"
    finally:
        # SIGKILL at once: nothing of it is kept, and its SIGTERM took the whole 30 s it was given
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        import shutil

        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.server
@pytest.mark.ray
@pytest.mark.slow
def test_a_job_runs_on_the_service_cluster_beside_another_head(service, corpus_file, foreign_head):
    import json

    t = service.new_tenant("address")
    corpus = t.upload(corpus_file).json()
    spec = {"version": 1, "stages": [{"kind": "split", "unit": "sentence"}], "output": {"num_shards": 1}}
    r = t.http.post("/v1/jobs", json={"corpus_id": corpus["id"], "spec": spec})
    assert r.status_code == 201, r.text
    job = t.wait(r.json()["id"], timeout=300)
    logs = t.http.get(f"/v1/jobs/{job['id']}/logs").text
    assert job["status"] == "succeeded", (job["message"], logs[-3000:])
    head = json.loads((service.data / raycluster.STATE_FILE).read_text())
    ours = f"127.0.0.1:{head['gcs_port']}"
    assert f"services.jobrun: on the Ray cluster at {ours}" in logs, logs[-3000:]
    assert foreign_head not in logs
    # and the log names no server location
    site = next(p for p in sys.path if p.endswith("site-packages"))
    for server in (str(service.data), f"tenants/{t.id}", head["temp_dir"], site, str(raycluster.PROJECT_ROOT)):
        assert server not in logs, (server, logs[-3000:])
