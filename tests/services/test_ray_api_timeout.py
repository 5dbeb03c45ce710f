"""The service's Ray Jobs API client bounds every request (``ray_api_timeout_s``): Ray's
``JobSubmissionClient`` passes no timeout to ``requests``, and a dashboard that accepts a
connection and never answers held the request, and every other request behind the
client's lock, for good. Against real sockets on loopback: one that never answers at all
(``silent_port``),
and an HTTP server that answers Ray's version check, then hangs on a job's status."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import ray
import ray.job_submission  # noqa: F401 - imported before any timing below, not inside it

from services.context import Cluster, ClusterUnavailable
from services.settings import Settings


def _settings(tmp_path, port: int, timeout_s: float = 1.0) -> Settings:
    return Settings(env="development", data_dir=tmp_path / "data", ray_address=f"http://127.0.0.1:{port}",
                    ray_api_timeout_s=timeout_s)


def test_a_dashboard_that_never_answers_is_unavailable_within_the_timeout(tmp_path, silent_port):
    cluster = Cluster(_settings(tmp_path, silent_port))
    t0 = time.monotonic()
    with pytest.raises(ClusterUnavailable, match="cannot reach the Ray Jobs API at http://127.0.0.1:"):
        cluster.info("J1")
    assert time.monotonic() - t0 < 5  # 1 s, not Ray's unbounded wait


class _VersionThenHang(BaseHTTPRequestHandler):
    release: threading.Event  # set per test

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/api/version":
            body = json.dumps({"version": "4", "ray_version": ray.__version__, "ray_commit": ray.__commit__,
                               "session_name": "s"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.release.wait(30)  # a job's status: never answered while the test runs

    def log_message(self, *args):
        pass


def test_a_status_request_that_hangs_is_unavailable_and_the_next_call_reconnects(tmp_path):
    _VersionThenHang.release = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VersionThenHang)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = Cluster(_settings(tmp_path, server.server_address[1]))
        t0 = time.monotonic()
        with pytest.raises(ClusterUnavailable, match="the Ray Jobs API did not answer"):
            cluster.info("J1")
        assert time.monotonic() - t0 < 5
        assert cluster._client is None  # dropped: the next call connects again
        # the next call (a new client: its version check, then the hung request) ends within it too
        t0 = time.monotonic()
        with pytest.raises(ClusterUnavailable):
            cluster.logs("J1")
        assert time.monotonic() - t0 < 5
    finally:
        _VersionThenHang.release.set()
        server.shutdown()
        server.server_close()


def test_the_version_check_gives_up_sooner_than_a_request(tmp_path, monkeypatch, silent_port):
    """Building the client (its version check, under the cluster's lock) waits at most
    ``VERSION_CHECK_S``, not the whole request timeout."""
    from services import context

    monkeypatch.setattr(context, "VERSION_CHECK_S", 0.5)
    cluster = Cluster(_settings(tmp_path, silent_port, timeout_s=30.0))
    t0 = time.monotonic()
    with pytest.raises(ClusterUnavailable, match="cannot reach the Ray Jobs API"):
        cluster.info("J1")
    assert time.monotonic() - t0 < 5  # 0.5 s, not the 30 s a status request may take
