"""``/v1/<resource>`` for every job kind that has one, generated from the registry
(``services.jobkinds``): create, list and get, with the kind's ``Out`` model and the audit
action ``<noun>.create``, then the kind's own routes; and ``GET /v1/kinds``, which the
client and ``privatize submit KIND`` read to find a kind's resource and what it reads.

No ``from __future__ import annotations`` here: the routes' annotations are the generated
models themselves, which FastAPI must see as objects."""

import anyio
from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ConfigDict, Field, create_model

from services import audit
from services import jobs as jobs_mod
from services.context import ServiceContext
from services.db import session_scope
from services.errors import NotFound
from services.jobkinds import JobKind, job_kind, job_kinds
from services.models import ACTIVE_JOB_STATES
from services.routes.common import TenantRef, bearer, clean_request, current_tenant, get_ctx, polled_row

INPUT_FIELDS = {"corpus": ("corpus_id", "corpus_id"), "job": ("job_id", "input_job_id")}
"""What a kind reads -> (the request's field naming it, the audit detail's name)."""


def create_body(kind: JobKind) -> type[BaseModel]:
    """The request body of ``POST /v1/<resource>``: what the kind reads (a corpus, a job) by
    id, and its config."""
    fields: dict = {}
    if kind.reads == "corpus":
        fields["corpus_id"] = (str, Field(description="one of the tenant's corpora: what it reads"))
    elif kind.reads == "job":
        fields["job_id"] = (str, Field(description=f"a succeeded {kind.input_kind} job of the tenant: its output "
                                                   "is what it reads"))
    fields["config"] = (dict, Field(description=kind.config_help))
    return create_model(f"{kind.noun.title().replace('_', '').replace('-', '')}Create",
                        __config__=ConfigDict(extra="forbid"), **fields)


def kind_router(kind: JobKind) -> APIRouter:
    """The routes of one kind's resource."""
    router = APIRouter(dependencies=[Depends(clean_request)])
    Body, Out, base, noun = create_body(kind), kind.Out, f"/v1/{kind.resource}", kind.noun
    field, noted = INPUT_FIELDS.get(kind.reads, (None, None))

    def create(body: Body, request: Request, tenant: TenantRef = Depends(current_tenant),
               ctx: ServiceContext = Depends(get_ctx)):
        reads = getattr(body, field) if field else None
        if field:
            audit.note(request, **{noted: reads[:64]})
        job = jobs_mod.create_job(ctx, tenant.id, reads if kind.reads == "corpus" else None, body.config,
                                  kind=kind.name, input_job_id=reads if kind.reads == "job" else None)
        audit.note(request, job.id, config_sha256=job.spec_sha256, **kind.audit_detail(job))
        return kind.out(ctx, job)

    def list_(tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
        with session_scope(ctx.sessions) as s:
            jobs = jobs_mod.list_jobs(s, tenant.id, None, kind.name)
        return [kind.out(ctx, j, live=False) for j in jobs]

    async def get(job_id: str, request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
                  ctx: ServiceContext = Depends(get_ctx)):
        """Polled as ``GET /v1/jobs/{id}`` is, and as cheaply: the token and the row in one
        read, Ray (and whatever the kind reads for its answer) only while it is active, the
        response serialised once."""
        try:
            ref, row = await polled_row(ctx, request, credentials, job_id)
        except NotFound:
            row = None
        if row is None or row.kind != kind.name:
            raise NotFound(f"no {noun} {job_id!r}")
        if row.status not in ACTIVE_JOB_STATES:
            out = kind.out(ctx, row)
        else:
            out = await anyio.to_thread.run_sync(lambda: kind.out(ctx, jobs_mod.fresh_job(ctx, ref.id, job_id)))
        return Response(out.model_dump_json(), media_type="application/json")

    audit.register_action(f"create_{noun}", f"{noun}.create", "job")
    router.add_api_route(base, create, methods=["POST"], status_code=201, response_model=Out,
                         name=f"create_{noun}", summary=f"Create a {noun}",
                         description=f"{(type(kind).__doc__ or '').strip()}\n\n422 with field paths for a config "
                                     "it refuses; 404 for an input that is not the tenant's; 409 for one that has "
                                     "not succeeded.")
    router.add_api_route(base, list_, methods=["GET"], response_model=list[Out], name=f"list_{kind.resource}",
                         summary=f"The tenant's {kind.resource}")
    router.add_api_route(f"{base}/{{job_id}}", get, methods=["GET"], response_model=Out, name=f"get_{noun}",
                         summary=f"One {noun}: status, progress, summary")
    kind.routes(router)
    return router


class KindInfo(BaseModel):
    name: str
    noun: str
    resource: str | None = Field(description="/v1/<resource>; None: its jobs are created with POST /v1/jobs")
    reads: str = Field(description="corpus, job (another job's output) or spec (what its config names)")
    input_kind: str | None = Field(description="the kind of job whose output it reads")
    downloads: list[dict] = Field(description="{path, file}: GET /v1/<resource>/{id}/<path> once it succeeded")
    body: dict = Field(description="the JSON schema of its create request")


router = APIRouter(dependencies=[Depends(clean_request)])


@router.get("/v1/kinds", response_model=list[KindInfo])
def list_kinds(tenant: TenantRef = Depends(current_tenant)):
    """The kinds of job this service runs: the client's ``submit``/``get``/``list`` and
    ``privatize submit KIND`` find a kind's resource and its request body here."""
    return [KindInfo(name=k.name, noun=k.noun, resource=k.resource, reads=k.reads, input_kind=k.input_kind,
                     downloads=[{"path": p, "file": f} for p, f in k.downloads],
                     body=create_body(k).model_json_schema() if k.resource else {})
            for k in map(job_kind, job_kinds())]


def kind_routes() -> list:
    """Every generated route of every registered kind, and ``/v1/kinds``."""
    routes = list(router.routes)
    for k in map(job_kind, job_kinds()):
        if k.resource is not None:
            routes.extend(kind_router(k).routes)
    return routes
