"""``/v1/jobs``: every job of the tenant, whatever its kind (list, get, cancel, logs, delete),
and ``POST /v1/jobs``, the privatization's create route it was first answered by (the
``privatize`` kind also has its generated ``/v1/privatizations``)."""

from __future__ import annotations

from typing import Annotated

import anyio

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from services import audit as audit_mod
from services import jobs as jobs_mod
from services import specs as specs_mod
from services.context import ServiceContext
from services.db import session_scope
from services.jobkinds import PRIVATIZE, KindOut, job_kind
from services.models import ACTIVE_JOB_STATES, Job
from services.dependencies import TenantRef, bearer, clean_request, current_tenant, get_ctx, polled_row
from services.routes.kinds import ConfigSchema


router = APIRouter(dependencies=[Depends(clean_request)])


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus_id: str
    spec: Annotated[dict, ConfigSchema(lambda: job_kind(PRIVATIZE))]
    """A pipeline spec (``privatize.spec.PipelineSpec``) as JSON: its schema in the API's
    documents is that model's, its validation the privatize kind's (422 with field paths)."""


class JobOut(KindOut):
    """What every kind's resource answers (:class:`KindOut`), and ``progress``; ``spec`` and
    ``spec_sha256`` are ``config`` and ``config_sha256`` under the names ``/v1/jobs`` first
    answered with (kept for the clients that read them)."""

    spec: dict = Field(description="the job's config (the same as config)")
    spec_sha256: str = Field(description="the same as config_sha256")
    progress: dict = Field(description="the corpus's records; while it runs what it reports (records read, "
                                       "percent, ETA); once it ended its counts")

    @classmethod
    def of(cls, j: Job, corpus_records: int | None, live: dict | None = None) -> "JobOut":
        """``live``: what the running job reports (``JobKind.live_progress``)."""
        return cls(**cls.fields_of(j), spec=j.spec, spec_sha256=j.spec_sha256,
                   progress=jobs_mod.job_progress(j, corpus_records, live))


# ---- jobs -----------------------------------------------------------------------------

@router.post("/v1/jobs", status_code=201, response_model=JobOut)
def create_job(body: JobCreate, request: Request, tenant: TenantRef = Depends(current_tenant),
               ctx: ServiceContext = Depends(get_ctx)):
    audit_mod.note(request, corpus_id=body.corpus_id[:64])
    job = jobs_mod.create_job(ctx, tenant.id, body.corpus_id, body.spec)
    audit_mod.note(request, job.id, spec_sha256=job.spec_sha256)
    return JobOut.of(job, jobs_mod.corpus_records(ctx, job))


@router.get("/v1/jobs", response_model=list[JobOut])
def list_jobs(corpus_id: str | None = None, kind: str | None = Query(None, max_length=32),
              tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """Every job of the tenant, whatever its kind, or those of one ``kind``."""
    with session_scope(ctx.sessions) as s:
        jobs = jobs_mod.list_jobs(s, tenant.id, corpus_id, kind, with_corpus_records=True)
    return [JobOut.of(j, j.corpus_records) for j in jobs]


@router.get("/v1/jobs/{job_id}", response_model=JobOut)
async def get_job(job_id: str, request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
                  ctx: ServiceContext = Depends(get_ctx)):
    """What clients poll: the token check and the job's row in one read (:func:`polled_row`)."""
    ref, row = await polled_row(ctx, request, credentials, job_id)
    if row.status not in ACTIVE_JOB_STATES:
        out = JobOut.of(row, row.corpus_records)
    else:  # reconciled with Ray first (at most once a second per job), with what it reports
        out = JobOut.of(*await anyio.to_thread.run_sync(_status_and_progress, ctx, ref.id, job_id))
    # already a validated JobOut: serialised once here, not validated again by FastAPI
    return Response(out.model_dump_json(), media_type="application/json")


def _status_and_progress(ctx: ServiceContext, tenant_id: str, job_id: str) -> tuple[Job, int | None, dict | None]:
    job, records = jobs_mod.job_status(ctx, tenant_id, job_id)
    live = None
    if job.status == "running":
        try:
            live = job_kind(job.kind).live_progress(ctx, job)
        except LookupError:  # a kind this service does not know
            live = None
    return job, records, live


@router.post("/v1/jobs/{job_id}/cancel", response_model=JobOut)
def cancel_job(job_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    job = jobs_mod.cancel(ctx, tenant.id, job_id)
    return JobOut.of(job, jobs_mod.corpus_records(ctx, job))


@router.delete("/v1/jobs/{job_id}", status_code=204)
def delete_job(job_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    jobs_mod.delete_job(ctx, tenant.id, job_id)
    return Response(status_code=204)


@router.get("/v1/jobs/{job_id}/logs", response_class=PlainTextResponse)
def job_logs(job_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    return PlainTextResponse(jobs_mod.logs(ctx, tenant.id, job_id))


@router.get("/v1/jobs/{job_id}/results")
def job_results(job_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """A privatization's manifest and shards (``/v1/privatizations/{id}/results`` too)."""
    return specs_mod.results_listing(ctx, tenant.id, job_id)


@router.get("/v1/jobs/{job_id}/results/{name:path}")
def download_result(job_id: str, name: str, tenant: TenantRef = Depends(current_tenant),
                    ctx: ServiceContext = Depends(get_ctx)):
    """The manifest or one shard it lists, streamed. The quarantine is never served."""
    return specs_mod.result_response(ctx, tenant.id, job_id, name)
