"""The FastAPI app factory.

``create_app(settings=None)`` builds the app; at startup it checks secrets, migrates the
database (unless ``PRIVATIZE_AUTO_MIGRATE=false``), clears abandoned uploads and
orphaned storage, and starts the reconciler: a background task that connects to Ray
(starting the embedded head if there is no cluster address) and, every
``poll_interval_s``, probes the cluster (``services.rayhealth``) and reads the status of
every active job from Ray into the database; a lost embedded head is restarted (its jobs
marked failed), an external cluster waited for (see ``_reconciler``).

Domain errors (``services.errors``) become HTTP responses here, in one place::

    {"detail": "<one line>", "code": "<error code>", ...extra}
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from services import errors as E
from services import raycluster
from services.api import build_router
from services.context import ServiceContext, build_context
from services.corpora import sweep_orphans
from services.jobs import fail_lost, reconcile_active
from services.jsonguard import BodyLimitMiddleware
from services.metrics import Metrics
from services.observability import RequestMiddleware
from services.settings import Settings, get_settings

log = logging.getLogger(__name__)

STATUS: dict[type[E.ServiceError], int] = {
    E.Unauthorized: 401,
    E.BudgetExceeded: 403,
    E.NotFound: 404,
    E.Conflict: 409,
    E.StorageLimitExceeded: 413,
    E.UnsupportedFormat: 415,
    E.InvalidRequest: 422,
    E.LimitExceeded: 429,
    E.ClusterUnavailable: 503,
    E.ConfigError: 500,
}


def status_of(exc: E.ServiceError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


async def _service_error(request: Request, exc: E.ServiceError) -> JSONResponse:
    status = status_of(exc)
    body = {"detail": exc.message, "code": exc.code}
    headers = {}
    for k, v in exc.extra.items():
        if k == "retry_after":
            headers["Retry-After"] = str(v)
        else:
            body[k] = v
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, exc.message)
    return JSONResponse(body, status_code=status, headers=headers)


RESTART_BACKOFF_S = (1.0, 60.0)
"""The first and the longest wait between two failed attempts to (re)start the embedded
head or reconnect to an external cluster (doubling in between)."""


async def _reconciler(app: FastAPI, ctx: ServiceContext) -> None:
    """Every ``poll_interval_s``: probe the cluster (really: ``ctx.ray_health``); while it
    is reachable, reconcile every active job with Ray. When it is not:

    * the embedded head's process is gone (``lost``): the jobs that ran on it are marked
      failed (``services.jobs.fail_lost``) and a new head is started, with backoff;
    * an external cluster (``PRIVATIZE_RAY_ADDRESS``) does not answer: wait and reconnect
      (with backoff, cut short as soon as its probe answers again); its jobs may still run,
      so they are left as they are and read again once it answers (a cluster restarted
      meanwhile no longer knows them: failed then).

    Queued jobs stay queued and are submitted on the first pass after it is back."""
    settings = ctx.settings
    interval = settings.poll_interval_s
    health = ctx.ray_health
    embedded = not settings.ray_address
    first, longest = RESTART_BACKOFF_S
    wait, retry_at = first, 0.0
    head_lost = False  # the embedded head was seen gone (for the log line when one is back)
    while True:
        try:
            if app.state.ray_state != "connected":
                now = time.monotonic()
                # an external cluster that answers again is reconnected at once, not when the
                # backoff (up to a minute) runs out: the probe is one cheap HTTP GET
                back = not embedded and now < retry_at and (await anyio.to_thread.run_sync(health.check)).up
                if now >= retry_at or back:
                    if embedded and health.check(fresh=True).lost:
                        head_lost = True
                        await anyio.to_thread.run_sync(fail_lost, ctx)
                    before = raycluster.read_state(settings.data_path) if embedded else None
                    app.state.ray_state = "restarting the embedded Ray head" if embedded and before is not None \
                        and app.state.ray_state != "starting" else "connecting"
                    ctx.cluster.reset()
                    try:
                        url = await anyio.to_thread.run_sync(ctx.cluster.connect)
                    except Exception:
                        retry_at, wait = time.monotonic() + wait, min(wait * 2, longest)
                        raise
                    after = raycluster.read_state(settings.data_path) if embedded else None
                    if after is not None and (head_lost or (before is not None and after.pid != before.pid)):
                        log.warning("a new embedded Ray head is up (pid %d; the last one was gone)", after.pid)
                    head_lost = False
                    wait, retry_at = first, 0.0
                    health.invalidate()
                    app.state.ray_state = "connected"
                    log.info("connected to the Ray Jobs API at %s", url)
            if app.state.ray_state == "connected":
                probe = await anyio.to_thread.run_sync(health.check)
                if not probe.up:
                    app.state.ray_state = probe.detail
                    ctx.cluster.reset()
                    log.warning("reconciler: Ray %s", probe.detail)
                    if probe.lost:
                        head_lost = True
                        await anyio.to_thread.run_sync(fail_lost, ctx)
                        continue  # start a new head now, not a poll later
                else:
                    await anyio.to_thread.run_sync(reconcile_active, ctx)
        except asyncio.CancelledError:
            raise
        except E.ServiceError as exc:
            app.state.ray_state = f"unavailable: {exc.message}"
            ctx.cluster.reset()
            health.invalidate()
            log.warning("reconciler: %s", exc.message)
        except Exception:  # noqa: BLE001 - the loop must survive anything one pass does
            log.exception("reconciler pass failed")
        await asyncio.sleep(interval)


def worker_app() -> FastAPI:
    """The app of one uvicorn worker process (``privatize serve --workers N``): settings
    from the environment, logging set up in this process."""
    from services.observability import configure_logging

    settings = get_settings()
    configure_logging(settings.log_level, settings.log_format)
    return create_app(settings)


def create_app(settings: Settings | None = None, ctx: ServiceContext | None = None) -> FastAPI:
    settings = settings or (ctx.settings if ctx is not None else get_settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        c = ctx or await anyio.to_thread.run_sync(build_context, settings)
        app.state.ctx = c
        metrics.ctx = c
        app.state.ray_state = "starting"
        left = await anyio.to_thread.run_sync(c.storage.clear_spool, settings.data_path / "spool", c.spool)
        if left:
            log.info("removed %d interrupted upload(s) from the spool", left)
        await anyio.to_thread.run_sync(sweep_orphans, c)
        task = asyncio.create_task(_reconciler(app, c))
        # Everything imported and built so far lives as long as the process: move it out of
        # the collector's view, so a full collection walks request garbage only (tens of
        # milliseconds less at the tail of request latency)
        gc.collect()
        gc.freeze()
        log.info("privatize service up (data %s, database %s, storage %s)", settings.data_path,
                 c.engine.url.get_backend_name(), c.storage.scheme)
        try:
            yield
        finally:
            task.cancel()
            with anyio.CancelScope(shield=True):
                try:
                    await task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
            c.engine.dispose()

    app = FastAPI(title="privatize control plane", version="1", lifespan=lifespan)

    def ray_now() -> str:
        """``connected``, or why not: the cached probe once the service runs."""
        c = getattr(app.state, "ctx", None)
        if c is None:
            return getattr(app.state, "ray_state", "unknown")
        return c.ray_health.check().detail

    restarts_before = raycluster.restart_count()  # heads this process restarted before this app
    metrics = Metrics(ray_state=ray_now, ray_outages=lambda: (lambda c: c.ray_health.outages if c else 0)(
        getattr(app.state, "ctx", None)), ray_restarts=lambda: raycluster.restart_count() - restarts_before)
    app.state.metrics = metrics
    # inside the request middleware (added first): a body over its limit is refused before
    # any route reads it, and the refusal has its request id and access-log line
    app.add_middleware(BodyLimitMiddleware, settings=settings)
    app.add_middleware(RequestMiddleware, metrics=metrics)
    app.add_exception_handler(E.ServiceError, _service_error)
    app.include_router(build_router())
    return app
