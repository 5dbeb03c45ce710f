"""The FastAPI dependencies every route module and job kind shares: the service context, the
tenant of a request, the base of the Out models, and reading a job of one kind reconciled
with Ray. Below the routes and the job kinds (the services layers contract), so a job kind
that declares its own routes imports it downward."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict

from services import jobs as jobs_mod
from services.context import ServiceContext
from services.db import session_scope
from services.errors import InvalidRequest
from services.jsonguard import LONG_TEXT_FIELDS, body_limit, check_json_body
from services.models import Job
from services.tenants import authenticate


async def clean_request(request: Request) -> None:
    """A NUL byte in a query or path parameter is refused with a 422 naming the
    parameter: no text column holds one (PostgreSQL refuses it with an error), so it must
    never reach a query. (Invalid UTF-8 in a URL is decoded to U+FFFD, which is harmless.)
    A JSON body is checked by :func:`services.jsonguard.check_json_body`: no lone
    surrogate, no NUL character, no non-finite number, no configuration string over the
    service's bound, no nesting deeper than its ``max_json_depth``."""
    key = (request.url.path, request.method)
    if body_limit(request.app.state.ctx.settings, *key) is not None:
        settings = request.app.state.ctx.settings
        check_json_body(await request.body(), max_chars=settings.max_json_string_chars,
                        long_fields=LONG_TEXT_FIELDS.get(key, frozenset()), max_depth=settings.max_json_depth)
    for where, items in (("query", request.query_params.multi_items()), ("path", request.path_params.items())):
        for name, value in items:
            if isinstance(value, str) and "\x00" in value:
                raise InvalidRequest(f"{where} parameter {name!r}: a NUL byte is not allowed",
                                     errors=[{"loc": [where, name], "message": "NUL byte"}])


async def get_ctx(request: Request) -> ServiceContext:
    # async: FastAPI runs a sync dependency on the thread pool, a hop per request for nothing
    return request.app.state.ctx


@dataclass(frozen=True)
class TenantRef:
    id: str
    name: str
    token_id: str


bearer = HTTPBearer(auto_error=False, description="An API token (`pvt_...`) from `privatize admin tenant create`")


def tenant_of(conn, credentials: HTTPAuthorizationCredentials | None) -> TenantRef:
    return TenantRef(*authenticate(conn, credentials.credentials.strip() if credentials is not None else None))


def current_tenant(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
                   ctx: ServiceContext = Depends(get_ctx)) -> TenantRef:
    with ctx.engine.connect() as conn:
        ref = tenant_of(conn, credentials)
    request.state.privatize_tenant = ref  # for the access log and the audit entry
    return ref



class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)



async def polled_row(ctx: ServiceContext, request: Request, credentials: HTTPAuthorizationCredentials | None,
                     job_id: str):
    """What a status poll reads: the tenant of the bearer token and the job's stored row
    (:func:`services.jobs.job_row`), on one connection and in one call of
    :meth:`ServiceContext.read` (a dependency of its own would cost a thread hop and a
    session, which at hundreds of polls a second is most of the cost)."""
    def load():
        with ctx.engine.connect() as conn:
            ref = tenant_of(conn, credentials)
            request.state.privatize_tenant = ref
            return ref, jobs_mod.job_row(conn, ref.id, job_id)

    return await ctx.read(load)


def fresh_job_of(kind, ctx: ServiceContext, tenant_id: str, job_id: str) -> Job:
    """:func:`services.jobs.job_of_kind`, reconciled with Ray while active."""
    with session_scope(ctx.sessions) as s:
        jobs_mod.job_of_kind(s, kind, tenant_id, job_id)
    return jobs_mod.fresh_job(ctx, tenant_id, job_id)
