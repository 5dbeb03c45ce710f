"""``/v1/corpora``: uploads (streamed, checked, counted) and their listing."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import Field
from starlette.requests import ClientDisconnect

from services import audit as audit_mod
from services import corpora as corpora_mod
from services import jobs as jobs_mod
from services.context import ServiceContext
from services.db import session_scope
from services.dependencies import Out, TenantRef, clean_request, current_tenant, get_ctx


router = APIRouter(dependencies=[Depends(clean_request)])


class CorpusOut(Out):
    id: str
    name: str
    format: str
    bytes: int
    records: int
    sha256: str
    created_at: dt.datetime



# ---- corpora --------------------------------------------------------------------------

@router.post("/v1/corpora", status_code=201, response_model=CorpusOut)
async def upload_corpus(request: Request, name: str | None = Query(None, max_length=256),
                        format: Literal["jsonl", "text", "parquet"] | None = Query(None),  # noqa: A002
                        filename: str | None = Query(None, max_length=256),
                        tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """Upload a corpus as the raw request body (``application/octet-stream``), streamed.
    ``format`` or a ``filename`` ending in .jsonl/.txt/.parquet says what it is."""
    try:
        corpus = await corpora_mod.receive_upload(ctx, tenant.id, request, name=name, fmt=format,
                                                  filename=filename)
    except ClientDisconnect:
        return Response(status_code=400)  # nobody is listening; the upload was discarded
    audit_mod.note(request, corpus.id, bytes=corpus.bytes, records=corpus.records, format=corpus.format)
    request.app.state.metrics.upload_bytes.inc(corpus.bytes)
    return CorpusOut.model_validate(corpus)


@router.get("/v1/corpora", response_model=list[CorpusOut])
def list_corpora(tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return [CorpusOut.model_validate(c) for c in corpora_mod.list_corpora(s, tenant.id)]


@router.get("/v1/corpora/{corpus_id}")
def get_corpus(corpus_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        c = corpora_mod.get_corpus(s, tenant.id, corpus_id)
        jobs = jobs_mod.list_jobs(s, tenant.id, corpus_id)
        return {**CorpusOut.model_validate(c).model_dump(mode="json"),
                "jobs": [{"id": j.id, "status": j.status} for j in jobs]}


class LedgerTrainingOut(Out):
    id: str
    state: str = Field(description="reserved (admitted, running: its planned spend) or spent (ended: what it ran)")
    dp: bool
    epsilon: float | None = Field(description="its own epsilon, in the ledger's unit")
    delta: float | None
    unit: str
    steps: int = Field(description="DP steps: planned while reserved, taken once spent")
    planned_steps: int
    corpus_id: str | None = Field(description="the upload it was admitted on (this content, maybe re-uploaded)")
    base_training_id: str | None


class PrivacyOut(Out):
    corpus_id: str
    sha256: str
    epsilon: float | None = Field(description="every training on this content composed; none without a guarantee")
    delta: float | None
    unit: str | None
    guarantee: str = Field(description="dp; none (a training without DP); mixed (trainings in different units)")
    accountant: str | None
    note: str | None
    limit: float | None = Field(description="the tenant's max_epsilon_per_corpus (none: no limit)")
    trainings: list[LedgerTrainingOut]


@router.get("/v1/corpora/{corpus_id}/privacy", response_model=PrivacyOut)
def corpus_privacy(corpus_id: str, tenant: TenantRef = Depends(current_tenant),
                   ctx: ServiceContext = Depends(get_ctx)):
    """The corpus's privacy ledger: what every training on its content (this upload, or the
    same file uploaded before) has spent together, and each training's own spend."""
    from services.ledger import corpus_privacy as ledger_of

    with session_scope(ctx.sessions) as s:
        return PrivacyOut.model_validate(ledger_of(s, tenant.id, corpus_id))


@router.delete("/v1/corpora/{corpus_id}", status_code=204)
def delete_corpus(corpus_id: str, tenant: TenantRef = Depends(current_tenant),
                  ctx: ServiceContext = Depends(get_ctx)):
    corpora_mod.delete_corpus(ctx, tenant.id, corpus_id)
    return Response(status_code=204)
