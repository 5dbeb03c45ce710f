"""Readiness when Ray cannot be reached, metrics without a cluster, and the log formats
(in-process: FastAPI's TestClient runs the app's real lifespan on SQLite)."""

from __future__ import annotations

import json
import logging

from fastapi.testclient import TestClient

from services.app import create_app
from services.observability import JsonFormatter, TextFormatter, _RequestIdFilter, request_id_var
from services.settings import Settings


def test_readyz_fails_while_ray_is_unreachable(tmp_path):
    # port 9 (discard) on loopback: nothing answers there
    settings = Settings(env="development", data_dir=tmp_path, ray_address="http://127.0.0.1:9",
                        poll_interval_s=60)
    with TestClient(create_app(settings)) as client:
        r = client.get("/readyz")
        assert r.status_code == 503
        body = r.json()
        assert body["status"] == "not ready"
        assert body["checks"]["database"] == "ok" and body["checks"]["storage"] == "ok"
        assert body["checks"]["ray"].startswith("failing")
        assert client.get("/healthz").status_code == 200  # alive, just not ready
        text = client.get("/metrics").text
        assert "privatize_ray_connected 0.0" in text
        assert 'privatize_jobs{state="running"} 0.0' in text
        assert r.headers["x-request-id"]


def _record(msg: str, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("services.access", logging.INFO, __file__, 1, msg, (), None)
    for k, v in extra.items():
        setattr(rec, k, v)
    _RequestIdFilter().filter(rec)
    return rec


def test_log_lines_carry_the_request_id():
    token = request_id_var.set("req-42")
    try:
        rec = _record("GET /v1/jobs 200", method="GET", route="/v1/jobs", status=200, duration_ms=1.5)
    finally:
        request_id_var.reset(token)
    out = json.loads(JsonFormatter().format(rec))
    assert out["request_id"] == "req-42" and out["route"] == "/v1/jobs" and out["status"] == 200
    assert out["message"] == "GET /v1/jobs 200" and out["level"] == "INFO" and out["ts"].endswith("Z")
    assert TextFormatter().format(rec).endswith("GET /v1/jobs 200 [request req-42]")
    outside = json.loads(JsonFormatter().format(_record("no request")))
    assert "request_id" not in outside


def test_an_unhandled_error_is_answered_500_by_the_middleware(caplog):
    """A bug (an exception no handler maps) is answered here, logged with its request id,
    instead of reaching the server, which would answer 500 and drop the client's
    keep-alive connection (issue 23)."""
    from fastapi import FastAPI

    from services.metrics import Metrics
    from services.observability import RequestMiddleware

    app = FastAPI()
    app.add_middleware(RequestMiddleware, metrics=Metrics(ray_state=lambda: "none"))

    @app.get("/boom")
    def boom():
        raise RuntimeError("a bug")

    @app.get("/ok")
    def ok():
        return {"ok": True}

    with TestClient(app) as client, caplog.at_level(logging.ERROR, logger="services.observability"):
        r = client.get("/boom", headers={"X-Request-ID": "req-boom"})  # the exception would re-raise here
        assert r.status_code == 500 and r.json()["code"] == "internal" and r.headers["x-request-id"] == "req-boom"
        assert "a bug" not in r.text
        assert client.get("/ok").json() == {"ok": True}
    assert any(rec.exc_info and "unhandled error" in rec.getMessage() for rec in caplog.records)
