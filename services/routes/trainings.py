"""``/v1/trainings``: training jobs, their progress and their model."""

from __future__ import annotations

import datetime as dt

import anyio
from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from services import audit as audit_mod
from services import jobs as jobs_mod
from services import trainings as trainings_mod
from services.context import ServiceContext
from services.db import session_scope
from services.jobkinds import TRAIN
from services.errors import NotFound
from services.models import ACTIVE_JOB_STATES, Job
from services.routes.common import Out, TenantRef, bearer, clean_request, current_tenant, fresh_of, get_ctx, polled_row


router = APIRouter(dependencies=[Depends(clean_request)])


class TrainingCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(description="a succeeded privatization job of the tenant: its output is the training data")
    config: dict
    """A training config (``train.config.TrainConfig``, as in ``train/configs/``) as JSON,
    without paths: the service sets ``data.path`` and ``output``."""


class TrainingOut(Out):
    id: str
    job_id: str | None = Field(description="the privatization job it trains on")
    corpus_id: str | None
    status: str
    ray_status: str | None
    message: str | None
    config: dict
    config_sha256: str
    submit_attempts: int
    progress: dict | None = Field(description="step, loss, tokens (epsilon, dp_steps under DP) of its last "
                                              "report while it runs; its final figures once it succeeded")
    summary: dict | None = Field(description="the run's summary once it succeeded: steps, final_loss, tokens, "
                                             "epsilon, delta, confidentiality...")
    output_bytes: int
    created_at: dt.datetime
    submitted_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, j: Job, progress: dict | None) -> "TrainingOut":
        return cls(id=j.id, job_id=j.input_job_id, corpus_id=j.corpus_id, status=j.status, ray_status=j.ray_status,
                   message=j.message, config=j.spec, config_sha256=j.spec_sha256, submit_attempts=j.submit_attempts,
                   progress=progress, summary=j.counts if j.status == "succeeded" else None,
                   output_bytes=j.output_bytes, created_at=j.created_at, submitted_at=j.submitted_at,
                   started_at=j.started_at, finished_at=j.finished_at)



# ---- trainings ------------------------------------------------------------------------
# A training is a job of kind ``train``: cancel, logs and delete are /v1/jobs/{job_id}/...

def _training_out(ctx: ServiceContext, job: Job) -> TrainingOut:
    return TrainingOut.of(job, trainings_mod.progress_of(ctx, job))


@router.post("/v1/trainings", status_code=201, response_model=TrainingOut)
def create_training(body: TrainingCreate, request: Request, tenant: TenantRef = Depends(current_tenant),
                    ctx: ServiceContext = Depends(get_ctx)):
    """Train a language model on the output of one of the tenant's succeeded privatization
    jobs (Ray Train). 422 with field paths for a config naming a path or asking for more
    than the service allows; 404 for a job that is not the tenant's; 409 for one that has
    not succeeded."""
    audit_mod.note(request, input_job_id=body.job_id[:64])
    job = jobs_mod.create_job(ctx, tenant.id, None, body.config, kind=TRAIN, input_job_id=body.job_id)
    audit_mod.note(request, job.id, config_sha256=job.spec_sha256)
    return _training_out(ctx, job)


@router.get("/v1/trainings", response_model=list[TrainingOut])
def list_trainings(tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        jobs = trainings_mod.list_trainings(s, tenant.id)
    return [TrainingOut.of(j, trainings_mod.progress_of(ctx, j) if j.status == "succeeded" else None) for j in jobs]



def _fresh_training(ctx: ServiceContext, tenant_id: str, job_id: str) -> Job:
    return fresh_of(trainings_mod.get_training, ctx, tenant_id, job_id)


@router.get("/v1/trainings/{job_id}", response_model=TrainingOut)
async def get_training(job_id: str, request: Request,
                       credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
                       ctx: ServiceContext = Depends(get_ctx)):
    """Status and progress: the last metrics the run reported while it runs, its summary
    once it succeeded. Polled as ``GET /v1/jobs/{id}`` is, and as cheaply: the token and
    the row in one read (inline on SQLite), Ray and the metrics file only while the run is
    active (each at most once a second), the response serialised once."""
    try:
        ref, row = await polled_row(ctx, request, credentials, job_id)
    except NotFound:
        row = None
    if row is None or row.kind != TRAIN:
        raise NotFound(f"no training {job_id!r}")
    if row.status == "succeeded":  # its figures are in the row
        out = TrainingOut.of(row, trainings_mod.progress_of(ctx, row))
    else:  # reconciled with Ray while active; the last metrics from storage (cached a second)
        def current():
            job = jobs_mod.fresh_job(ctx, ref.id, job_id) if row.status in ACTIVE_JOB_STATES else row
            return TrainingOut.of(job, trainings_mod.progress_of(ctx, job))
        out = await anyio.to_thread.run_sync(current)
    return Response(out.model_dump_json(), media_type="application/json")


@router.get("/v1/trainings/{job_id}/model", response_class=StreamingResponse,
            responses={200: {"content": {"application/gzip": {}}, "description": "model/ as a .tar.gz"}})
def download_model(job_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """The trained model (a Hugging Face folder with its tokenizer) as a ``.tar.gz`` of
    ``model/``, streamed; 409 until the training has succeeded."""
    job = _fresh_training(ctx, tenant.id, job_id)
    files = trainings_mod.model_files(ctx, job)
    stream = trainings_mod.tar_gz(ctx.storage, f"{job.output_path}/{trainings_mod.MODEL_DIR}", files,
                                  trainings_mod.MODEL_DIR, job.finished_at.timestamp() if job.finished_at else None)
    headers = {"Content-Disposition": f'attachment; filename="training-{job.id}-model.tar.gz"'}
    return StreamingResponse(stream, media_type="application/gzip", headers=headers)
