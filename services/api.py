"""The REST API (``/v1``). Every route but ``/healthz`` needs ``Authorization: Bearer
<token>`` and sees only its tenant's resources: another tenant's id answers 404, the
same as an id that does not exist.

Adding an endpoint: a function in its resource's module under ``services/routes/`` (a new
resource: a module with its own ``router``, listed below) with ``tenant: TenantRef =
Depends(current_tenant)`` and ``ctx: ServiceContext = Depends(get_ctx)``
(``services.routes.common``), domain logic in its module (``corpora``,
``keys``, ``jobs``, ``trainings``, ``evaluations``), domain errors from ``services.errors``
(``services.app`` turns them into status codes), an audit action in
``services.audit.ACTIONS`` if it changes state, and a test in ``tests/services``.

Unauthenticated: ``/healthz`` (the process is up), ``/readyz`` (database, storage and Ray
reachable) and ``/metrics`` (Prometheus; no tenant data).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from services.errors import InvalidRequest
from services.routes import corpora, evaluations, health, jobs, keys, trainings


async def _clean_params(request: Request) -> None:
    """A NUL byte in a query or path parameter is refused with a 422 naming the
    parameter: no text column holds one (PostgreSQL refuses it with an error), so it must
    never reach a query. (Invalid UTF-8 in a URL is decoded to U+FFFD, which is harmless.)"""
    for where, items in (("query", request.query_params.multi_items()), ("path", request.path_params.items())):
        for name, value in items:
            if isinstance(value, str) and "\x00" in value:
                raise InvalidRequest(f"{where} parameter {name!r}: a NUL byte is not allowed",
                                     errors=[{"loc": [where, name], "message": "NUL byte"}])


router = APIRouter(dependencies=[Depends(_clean_params)])
"""Every route of the API, one module per resource under ``services/routes/`` (in this order)."""
for _module in (health, corpora, keys, jobs, trainings, evaluations):
    router.include_router(_module.router)
