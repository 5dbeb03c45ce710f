"""``/v1/evaluations``: evaluation jobs, their report and its JSON."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from services import audit as audit_mod
from services import evaluations as evaluations_mod
from services import jobs as jobs_mod
from services.context import ServiceContext
from services.db import session_scope
from services.jobkinds import EVALUATE, EVALUATION
from services.models import Job
from services.routes.common import Out, TenantRef, clean_request, current_tenant, fresh_of, get_ctx


router = APIRouter(dependencies=[Depends(clean_request)])


class EvaluationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: dict
    """An evaluation config (``attacks.config.AttackConfig``) as JSON, without locations:
    models name trainings (``training_id``), data sources corpora or privatization jobs
    (``{"corpus_id": ...}``, ``{"job_id": ...}``), the canary key is ``keystore:<id>``."""


class EvaluationOut(Out):
    id: str
    training_ids: list[str | None] = Field(description="the training each model is, in the config's order")
    status: str
    ray_status: str | None
    message: str | None
    config: dict = Field(description="the config it runs: every reference as its location in the tenant's folder")
    config_sha256: str
    key_ids: list[str]
    submit_attempts: int
    summary: dict | None = Field(description="once it succeeded: per model, its training, perplexity, "
                                             "max_exposure, mia_auc (the best score's AUC), extracted")
    output_bytes: int
    created_at: dt.datetime
    submitted_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, j: Job) -> "EvaluationOut":
        return cls(id=j.id, training_ids=evaluations_mod.training_ids(j.spec), status=j.status,
                   ray_status=j.ray_status, message=j.message, config=j.spec, config_sha256=j.spec_sha256,
                   key_ids=j.key_ids or [], submit_attempts=j.submit_attempts,
                   summary=evaluations_mod.summary_of(j), output_bytes=j.output_bytes, created_at=j.created_at,
                   submitted_at=j.submitted_at, started_at=j.started_at, finished_at=j.finished_at)



# ---- evaluations ----------------------------------------------------------------------
# An evaluation is a job of kind ``evaluate``: cancel, logs and delete are /v1/jobs/{job_id}/...

REPORT_HEADERS = {"Content-Security-Policy": "default-src 'none'; img-src data:; style-src 'unsafe-inline'",
                  "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
"""The report is a page of the API's origin: it may show its inline CSS and embedded
plots, nothing else, and is not kept by caches (it says what a model leaks)."""


@router.post("/v1/evaluations", status_code=201, response_model=EvaluationOut)
def create_evaluation(body: EvaluationCreate, request: Request, tenant: TenantRef = Depends(current_tenant),
                      ctx: ServiceContext = Depends(get_ctx)):
    """Attack some of the tenant's succeeded trainings (canary exposure, membership
    inference, perplexity, extraction) and write one report. 422 with field paths for a
    config naming a location or asking for more than the service allows; 404 for a
    training, job or corpus that is not the tenant's; 409 for one that has not succeeded."""
    job = jobs_mod.create_job(ctx, tenant.id, None, body.config, kind=EVALUATE)
    audit_mod.note(request, job.id, config_sha256=job.spec_sha256,
                   training_ids=evaluations_mod.training_ids(job.spec))
    return EvaluationOut.of(job)


@router.get("/v1/evaluations", response_model=list[EvaluationOut])
def list_evaluations(tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return [EvaluationOut.of(j) for j in evaluations_mod.list_evaluations(s, tenant.id)]


def _fresh_evaluation(ctx: ServiceContext, tenant_id: str, job_id: str) -> Job:
    return fresh_of(evaluations_mod.get_evaluation, ctx, tenant_id, job_id)


@router.get("/v1/evaluations/{job_id}", response_model=EvaluationOut)
def get_evaluation(job_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """Status; once it succeeded, the summary per model."""
    return EvaluationOut.of(_fresh_evaluation(ctx, tenant.id, job_id))


def _evaluation_file(request: Request, ctx: ServiceContext, tenant_id: str, job_id: str, name: str,
                     media: str) -> StreamingResponse:
    audit_mod.note(request, file=name)
    rel = evaluations_mod.result_rel(ctx, _fresh_evaluation(ctx, tenant_id, job_id), name)
    headers = dict(REPORT_HEADERS)
    size = ctx.storage.size(rel)
    if size is not None:
        headers["Content-Length"] = str(size)
    return StreamingResponse(ctx.storage.open_chunks(rel), media_type=media, headers=headers)


@router.get("/v1/evaluations/{job_id}/report", response_class=StreamingResponse,
            responses={200: {"content": {"text/html": {}}, "description": "the self-contained HTML report"}})
def evaluation_report(job_id: str, request: Request, tenant: TenantRef = Depends(current_tenant),
                      ctx: ServiceContext = Depends(get_ctx)):
    """The privacy report (one HTML page, plots embedded); 409 until the evaluation has
    succeeded. Each read is audited (``evaluation.report``)."""
    return _evaluation_file(request, ctx, tenant.id, job_id, evaluations_mod.REPORT, "text/html; charset=utf-8")


@router.get("/v1/evaluations/{job_id}/report.json", response_class=StreamingResponse,
            responses={200: {"content": {"application/json": {}}, "description": "evaluation.json"}})
def evaluation_report_json(job_id: str, request: Request, tenant: TenantRef = Depends(current_tenant),
                           ctx: ServiceContext = Depends(get_ctx)):
    """The results behind the report (``evaluation.json``: ``attacks.results.Evaluation``);
    409 until the evaluation has succeeded. Each read is audited (``evaluation.report``)."""
    return _evaluation_file(request, ctx, tenant.id, job_id, EVALUATION, "application/json")
