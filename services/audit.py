"""The audit log: who did what to which resource, and how it ended.

Every state-changing API call (any method but GET/HEAD/OPTIONS that reached a route) is
recorded by ``services.observability.RequestMiddleware`` *before* its response starts,
refused calls included (401, 404, 422...), so a client that saw an answer can find its
entry. Admin commands and job outcomes are recorded by the code that does them. An
entry holds ids, an action name, the status and the request id; never document text,
tokens or key material. A tenant reads its own entries with ``GET /v1/audit``.

Adding an endpoint that changes state: give it an action in ``ACTIONS`` (route function
name -> action, resource type; a job kind's routes call :func:`register_action`); handlers may add the id of what they created and a few
non-secret details with ``note(request, resource_id=..., **detail)``. A read worth an
entry of its own (an evaluation's privacy report: what a model gives away) is a route in
``AUDITED_READS`` as well: it is recorded like a state change.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.models import AuditEvent

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

ACTIONS: dict[str, tuple[str, str | None]] = {
    "upload_corpus": ("corpus.upload", "corpus"),
    "delete_corpus": ("corpus.delete", "corpus"),
    "create_key": ("key.create", "key"),
    "disable_key": ("key.disable", "key"),
    "enable_key": ("key.enable", "key"),
    "destroy_key": ("key.destroy", "key"),
    "export_key": ("key.export", "key"),
    "decrypt": ("key.decrypt", "key"),
    "create_job": ("job.create", "job"),
    "cancel_job": ("job.cancel", "job"),
    "delete_job": ("job.delete", "job"),
    "upload_model": ("model.upload", "model"),
    "delete_model": ("model.delete", "model"),
}
"""Route function name -> (action, resource type). A job kind's routes add theirs
(:func:`register_action`): ``create_training`` -> ``training.create``..."""

AUDITED_READS: set[str] = set()
"""Routes answering GET that are recorded all the same (an evaluation's report)."""


def register_action(route_name: str, action: str, resource_type: str | None, *, read: bool = False) -> None:
    """Name the audit action of a route (by its function's name); ``read``: a GET recorded
    like a state change."""
    if ACTIONS.get(route_name, (action, resource_type)) != (action, resource_type):
        raise ValueError(f"route {route_name!r} already has the audit action {ACTIONS[route_name][0]!r}")
    ACTIONS[route_name] = (action, resource_type)
    if read:
        AUDITED_READS.add(route_name)

_PATH_RESOURCE = ("corpus_id", "key_id", "job_id")
NOTE = "privatize_audit"
"""Key in the request's state where handlers leave ``note`` details."""


def note(request, resource_id: str | None = None, **detail) -> None:
    """Add to the audit entry of this request (the id of what it created, small facts)."""
    n = request.scope.setdefault("state", {}).setdefault(NOTE, {})
    if resource_id is not None:
        n["resource_id"] = resource_id
    n.setdefault("detail", {}).update(detail)


def api_event(scope: dict, status: int, request_id: str) -> AuditEvent | None:
    """The entry for one API call, or None when it changes nothing (safe methods but
    ``AUDITED_READS``, no route matched)."""
    method = scope.get("method", "")
    route = scope.get("route")
    name = getattr(route, "name", "")
    if route is None or (method in SAFE_METHODS and name not in AUDITED_READS):
        return None
    state = scope.get("state") or {}
    who = state.get("privatize_tenant")
    action, rtype = ACTIONS.get(name, (f"{method.lower()} {getattr(route, 'path', '?')}", None))
    n = state.get(NOTE, {})
    params = scope.get("path_params") or {}
    rid = n.get("resource_id") or next((str(params[p]) for p in _PATH_RESOURCE if p in params), None)
    client = scope.get("client")
    return AuditEvent(tenant_id=who.id if who else None, actor=f"token:{who.token_id}" if who else "anonymous",
                      action=action, resource_type=rtype, resource_id=rid[:64] if rid else None, status=status,
                      request_id=request_id, client=str(client[0])[:64] if client else None,
                      detail=n.get("detail") or None)


def record(s: Session, *, actor: str, action: str, tenant_id: str | None = None, resource_type: str | None = None,
           resource_id: str | None = None, status: int | None = None, detail: dict | None = None) -> None:
    """An entry for something done outside an API call (admin command, job outcome)."""
    s.add(AuditEvent(tenant_id=tenant_id, actor=actor, action=action, resource_type=resource_type,
                     resource_id=resource_id, status=status, detail=detail or None))


def list_events(s: Session, tenant_id: str, *, limit: int, before: int | None = None, action: str | None = None,
                resource_id: str | None = None) -> list[AuditEvent]:
    q = select(AuditEvent).where(AuditEvent.tenant_id == tenant_id)
    if before is not None:
        q = q.where(AuditEvent.id < before)
    if action:
        q = q.where(AuditEvent.action == action)
    if resource_id:
        q = q.where(AuditEvent.resource_id == resource_id)
    return list(s.scalars(q.order_by(AuditEvent.id.desc()).limit(limit)))
