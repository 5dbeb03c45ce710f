"""Unauthenticated probes (``/healthz``, ``/readyz``, ``/metrics``), the tenant's own record
(``/v1/tenant``) and its audit log (``/v1/audit``)."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import func, select

from services import audit as audit_mod
from services.context import ServiceContext
from services.db import session_scope
from services.jobs import slots_held
from services.metrics import CONTENT_TYPE
from services.models import ACTIVE_JOB_STATES, Job
from services.tenants import storage_used
from services.dependencies import Out, TenantRef, clean_request, current_tenant, get_ctx


router = APIRouter(dependencies=[Depends(clean_request)])


# ---- health and tenant ----------------------------------------------------------------

def ray_status(request: Request) -> tuple[bool, str, str]:
    """(reachable, ``connected`` or why not, what the reconciler is doing about it): the
    cluster probed for real (``ServiceContext.ray_health``, cached for a moment), not what
    the reconciler last managed to do."""
    state = getattr(request.app.state, "ray_state", "unknown")
    ctx = getattr(request.app.state, "ctx", None)
    if ctx is None:
        return False, state, state
    probe = ctx.ray_health.check()
    return probe.up, probe.detail, state


@router.get("/healthz")
def healthz(request: Request):
    """The process is up (liveness; 200 even while Ray is not: restarting the service
    would not bring it back, the reconciler does). ``ray`` says whether the cluster
    answers now; while it does not, ``ray_reconciler`` says what is being done."""
    up, detail, state = ray_status(request)
    out = {"status": "ok", "ray": detail}
    if not up:
        out["ray_reconciler"] = state
    return out


def _check(fn) -> str:
    try:
        fn()
        return "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means not ready; say which kind
        return f"failing: {type(exc).__name__}"


@router.get("/readyz")
def readyz(request: Request, ctx: ServiceContext = Depends(get_ctx)):
    """Ready for traffic (readiness): the database answers, the storage root is readable
    and the Ray cluster answers a real probe (within a second; the answer is cached for
    1.5 s). 503 with the failing checks otherwise (``"ray": "failing: unavailable: ..."``
    names what is wrong with Ray)."""
    from sqlalchemy import text

    def db():
        with ctx.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    up, detail, _state = ray_status(request)
    checks = {"database": _check(db), "storage": _check(lambda: ctx.storage.exists(".ready-probe")),
              "ray": "ok" if up else f"failing: {detail}"}
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse({"status": "ready" if ready else "not ready", "checks": checks},
                        status_code=200 if ready else 503)


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request):
    """Prometheus text exposition."""
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE)


@router.get("/v1/tenant")
def tenant_info(tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    from services.models import Tenant

    with session_scope(ctx.sessions) as s:
        t = s.get(Tenant, tenant.id)
        active = s.scalar(select(func.count()).select_from(Job).where(Job.tenant_id == t.id,
                                                                      Job.status.in_(ACTIVE_JOB_STATES)))
        running, queued = slots_held(s, t.id)
        return {"id": t.id, "name": t.name, "storage_used_bytes": storage_used(s, t.id),
                "storage_limit_bytes": t.storage_limit_bytes, "active_jobs": active,
                "running_jobs": running, "queued_jobs": queued,
                "max_concurrent_jobs": t.max_concurrent_jobs, "max_queued_jobs": ctx.settings.max_queued_jobs}



# ---- audit ----------------------------------------------------------------------------

class AuditOut(Out):
    id: int
    at: dt.datetime
    actor: str
    action: str
    resource_type: str | None
    resource_id: str | None
    status: int | None
    request_id: str | None
    detail: dict | None


MAX_AUDIT_ID = 2**63 - 1
"""The largest id an audit entry can have (a signed 64-bit column in SQLite and
PostgreSQL): a larger ``before`` cursor is refused (422) instead of reaching the database."""


@router.get("/v1/audit")
def list_audit(limit: int = Query(100, ge=1, le=1000), before: int | None = Query(None, ge=1, le=MAX_AUDIT_ID),
               action: str | None = Query(None, max_length=64), resource_id: str | None = Query(None, max_length=64),
               tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """The tenant's own audit entries, newest first; page with ``before=<next_before>``."""
    with session_scope(ctx.sessions) as s:
        rows = audit_mod.list_events(s, tenant.id, limit=limit, before=before, action=action,
                                     resource_id=resource_id)
        events = [AuditOut.model_validate(r).model_dump(mode="json") for r in rows]
    return {"events": events, "next_before": events[-1]["id"] if len(events) == limit else None}
