"""Request ids, structured logs, request metrics and the audit hook, in one ASGI
middleware.

Every request gets an id: the client's ``X-Request-ID`` when it is a plain token of at
most 64 characters, else a fresh one. It is answered in ``X-Request-ID``, attached to
every log line written while the request runs, and stored in its audit entry.

Logs are one JSON object per line (``PRIVATIZE_LOG_FORMAT=json``, the default) or plain
text (``text``)::

    {"ts": "...", "level": "INFO", "logger": "services.access", "message": "POST /v1/jobs 201",
     "request_id": "...", "method": "POST", "route": "/v1/jobs", "status": 201,
     "duration_ms": 12.3, "tenant_id": "..."}

The access line names the route template, never the query string (which may hold a
file name) or a token.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
import uuid

import anyio

from services.audit import api_event
from services.db import session_scope

log = logging.getLogger(__name__)
access_log = logging.getLogger("services.access")

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("privatize_request_id", default=None)
_VALID_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_EXTRA_FIELDS = ("method", "route", "status", "duration_ms", "tenant_id", "job_id")


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        rid = getattr(record, "request_id", None)
        if rid:
            out["request_id"] = rid
        for k in _EXTRA_FIELDS:
            v = getattr(record, k, None)
            if v is not None:
                out[k] = v
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = getattr(record, "request_id", None)
        return f"{line} [request {rid}]" if rid else line


JsonFormatter.converter = time.gmtime


def configure_logging(level: str, fmt: str) -> None:
    """Root logging for the service process: one handler on stderr, JSON or text, with
    the request id; uvicorn's loggers go through it and its access log is replaced by
    ``services.access``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_RequestIdFilter())
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler], force=True)
    for name in ("uvicorn", "uvicorn.error"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
    logging.getLogger("uvicorn.access").disabled = True
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # a library's warnings.warn (Opacus' accountants during a DP training's admission plan)
    # is a log record too, not a bare line on stderr among the JSON ones
    logging.captureWarnings(True)


def _request_id(scope: dict) -> str:
    for k, v in scope.get("headers") or ():
        if k == b"x-request-id":
            s = v.decode("latin-1")
            if _VALID_ID.fullmatch(s):
                return s
            break
    return uuid.uuid4().hex


_INTERNAL_ERROR = json.dumps({"detail": "internal error; the request id names it in the service's log",
                              "code": "internal"}).encode()


class RequestMiddleware:
    """Pure ASGI (streamed uploads and downloads pass through untouched)."""

    def __init__(self, app, metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _request_id(scope)
        token = request_id_var.set(rid)
        t0 = time.perf_counter()
        status = 500
        started = False

        async def send_wrapper(message):
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
                await self._audit(scope, status, rid)
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception:
            if started:
                raise  # mid-response: nothing to answer with; the server closes the connection
            # a bug, not an input: answer 500 here (logged with the request id) rather than
            # let the server answer it, which also drops the client's keep-alive connection
            log.exception("%s %s: unhandled error", scope.get("method", ""),
                          getattr(scope.get("route"), "path", None) or "unmatched")
            status = 500
            await send_wrapper({"type": "http.response.start", "status": 500,
                                "headers": [(b"content-type", b"application/json"),
                                            (b"content-length", str(len(_INTERNAL_ERROR)).encode())]})
            await send({"type": "http.response.body", "body": _INTERNAL_ERROR})
        finally:
            self._done(scope, status, time.perf_counter() - t0)
            request_id_var.reset(token)

    async def _audit(self, scope: dict, status: int, rid: str) -> None:
        ev = api_event(scope, status, rid)
        if ev is None:
            return
        ctx = getattr(scope["app"].state, "ctx", None)
        if ctx is None:
            return

        def write():
            with session_scope(ctx.sessions) as s:
                s.add(ev)

        try:
            await anyio.to_thread.run_sync(write)
        except Exception:  # noqa: BLE001 - the call happened; say loudly that its entry is missing
            log.exception("audit: could not record %s %s (status %d)", ev.action, ev.resource_id or "", status)

    def _done(self, scope: dict, status: int, seconds: float) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or "unmatched"
        method = scope.get("method", "")
        self.metrics.observe(method, template, status, seconds)
        who = (scope.get("state") or {}).get("privatize_tenant")
        access_log.info("%s %s %d", method, template, status,
                        extra={"method": method, "route": template, "status": status,
                               "duration_ms": round(seconds * 1000, 2), "tenant_id": who.id if who else None})
