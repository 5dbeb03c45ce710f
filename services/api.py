"""The REST API (``/v1``). Every route but ``/healthz`` needs ``Authorization: Bearer
<token>`` and sees only its tenant's resources: another tenant's id answers 404, the
same as an id that does not exist.

Adding an endpoint: a function in its resource's module under ``services/routes/`` (a new
resource: a module with its own ``router``, listed below) with ``tenant: TenantRef =
Depends(current_tenant)`` and ``ctx: ServiceContext = Depends(get_ctx)``
(``services.dependencies``), domain logic in its module (``corpora``, ``keys``, ``jobs``),
domain errors from ``services.errors`` (``services.app`` turns them into status codes), an
audit action in ``services.audit.ACTIONS`` if it changes state, and a test in
``tests/services``. A job kind's resource (``/v1/trainings``...) is generated from its
registration (``services.routes.kinds``); its own extra routes are its ``routes()``.

Unauthenticated: ``/healthz`` (the process is up), ``/readyz`` (database, storage and Ray
reachable) and ``/metrics`` (Prometheus; no tenant data).
"""

from __future__ import annotations

from fastapi import APIRouter

from services.routes import corpora, health, jobs, keys, models
from services.routes.kinds import kind_routes


def build_router() -> APIRouter:
    """Every route of the API, one module per resource under ``services/routes/`` (in this
    order; the routes themselves, not the modules' routers, so that ``router.routes`` lists
    each route), then every registered job kind's (built when the app is: a kind registered
    before that has its routes)."""
    router = APIRouter()
    for module in (health, corpora, keys, jobs, models):
        router.routes.extend(module.router.routes)
    router.routes.extend(kind_routes())
    return router
