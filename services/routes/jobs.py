"""``/v1/jobs``: privatization jobs (and every job kind's cancel, logs, delete and results)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import anyio

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict

from services import audit as audit_mod
from services import corpora as corpora_mod
from services import jobs as jobs_mod
from services import specs as specs_mod
from services.context import ServiceContext
from services.db import session_scope
from services.jobkinds import PRIVATIZE, job_kind
from services.models import ACTIVE_JOB_STATES, Corpus, Job
from services.dependencies import Out, TenantRef, bearer, clean_request, current_tenant, get_ctx, polled_row
from services.routes.kinds import ConfigSchema


router = APIRouter(dependencies=[Depends(clean_request)])


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus_id: str
    spec: Annotated[dict, ConfigSchema(lambda: job_kind(PRIVATIZE))]
    """A pipeline spec (``privatize.spec.PipelineSpec``) as JSON: its schema in the API's
    documents is that model's, its validation the privatize kind's (422 with field paths)."""


class JobOut(Out):
    id: str
    kind: str
    corpus_id: str | None
    input_job_id: str | None
    status: str
    ray_status: str | None
    message: str | None
    spec: dict
    spec_sha256: str
    key_ids: list[str]
    submit_attempts: int
    progress: dict
    output_bytes: int
    created_at: dt.datetime
    submitted_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, j: Job, corpus_records: int | None, live: dict | None = None) -> "JobOut":
        """``live``: what the running job reports (``JobKind.live_progress``); its share of the
        corpus is told here when the job could not (the Ray runner streams its input)."""
        progress: dict = {"corpus_records": corpus_records}
        if live:
            progress.update(live)
            if progress.get("records_total") is None and corpus_records and live.get("records_read") is not None:
                share = min(1.0, live["records_read"] / corpus_records)
                el = live.get("elapsed_s")
                progress.update(records_total=corpus_records, percent=round(100 * share, 1),
                                eta_s=round(el * (1 - share) / share, 1) if share and el is not None else None)
        if j.counts:
            progress.update(j.counts)
        return cls(id=j.id, kind=j.kind, corpus_id=j.corpus_id, input_job_id=j.input_job_id, status=j.status,
                   ray_status=j.ray_status, message=j.message,
                   spec=j.spec, spec_sha256=j.spec_sha256, key_ids=j.key_ids or [],
                   submit_attempts=j.submit_attempts, progress=progress, output_bytes=j.output_bytes,
                   created_at=j.created_at, submitted_at=j.submitted_at, started_at=j.started_at,
                   finished_at=j.finished_at)



# ---- jobs -----------------------------------------------------------------------------

def _corpus_records(ctx: ServiceContext, job: Job) -> int | None:
    if not job.corpus_id:
        return None
    with session_scope(ctx.sessions) as s:
        c = s.get(Corpus, job.corpus_id)
        return c.records if c else None


@router.post("/v1/jobs", status_code=201, response_model=JobOut)
def create_job(body: JobCreate, request: Request, tenant: TenantRef = Depends(current_tenant),
               ctx: ServiceContext = Depends(get_ctx)):
    audit_mod.note(request, corpus_id=body.corpus_id[:64])
    job = jobs_mod.create_job(ctx, tenant.id, body.corpus_id, body.spec)
    audit_mod.note(request, job.id, spec_sha256=job.spec_sha256)
    return JobOut.of(job, _corpus_records(ctx, job))


@router.get("/v1/jobs", response_model=list[JobOut])
def list_jobs(corpus_id: str | None = None, kind: str | None = Query(None, max_length=32),
              tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """Every job of the tenant (privatizations and trainings), or those of one ``kind``."""
    with session_scope(ctx.sessions) as s:
        jobs = jobs_mod.list_jobs(s, tenant.id, corpus_id, kind)
        records = {c.id: c.records for c in corpora_mod.list_corpora(s, tenant.id)}
    return [JobOut.of(j, records.get(j.corpus_id)) for j in jobs]


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
    return JobOut.of(job, _corpus_records(ctx, job))


@router.delete("/v1/jobs/{job_id}", status_code=204)
def delete_job(job_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    jobs_mod.delete_job(ctx, tenant.id, job_id)
    return Response(status_code=204)


@router.get("/v1/jobs/{job_id}/logs", response_class=PlainTextResponse)
def job_logs(job_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    return PlainTextResponse(jobs_mod.logs(ctx, tenant.id, job_id))


@router.get("/v1/jobs/{job_id}/results")
def job_results(job_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    job, manifest = specs_mod.results(ctx, tenant.id, job_id)
    size = ctx.storage.size(f"{job.output_path}/{specs_mod.MANIFEST}")
    return {"job_id": job.id, "counts": manifest.get("counts", {}), "spec_sha256": manifest.get("spec_sha256"),
            "files": specs_mod.result_files(manifest, size)}


@router.get("/v1/jobs/{job_id}/results/{name:path}")
def download_result(job_id: str, name: str, tenant: TenantRef = Depends(current_tenant),
                    ctx: ServiceContext = Depends(get_ctx)):
    """The manifest or one shard it lists, streamed. The quarantine is never served."""
    rel = specs_mod.result_path(ctx, tenant.id, job_id, name)
    size = ctx.storage.size(rel)
    media = "application/json" if name.endswith(".json") else "application/vnd.apache.parquet"
    headers = {"Content-Disposition": f'attachment; filename="{name.rsplit("/", 1)[-1]}"'}
    if size is not None:
        headers["Content-Length"] = str(size)
    return StreamingResponse(ctx.storage.open_chunks(rel), media_type=media, headers=headers)
