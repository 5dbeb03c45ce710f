"""The REST API (``/v1``). Every route but ``/healthz`` needs ``Authorization: Bearer
<token>`` and sees only its tenant's resources: another tenant's id answers 404, the
same as an id that does not exist.

Adding an endpoint: a function here with ``tenant: TenantRef = Depends(current_tenant)``
and ``ctx: ServiceContext = Depends(get_ctx)``, domain logic in its module (``corpora``,
``keys``, ``jobs``, ``trainings``, ``evaluations``), domain errors from ``services.errors``
(``services.app`` turns them into status codes), an audit action in
``services.audit.ACTIONS`` if it changes state, and a test in ``tests/services``.

Unauthenticated: ``/healthz`` (the process is up), ``/readyz`` (database, storage and Ray
reachable) and ``/metrics`` (Prometheus; no tenant data).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

import anyio

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from sqlalchemy import func, select
from starlette.requests import ClientDisconnect

from services import audit as audit_mod
from services import corpora as corpora_mod
from services import evaluations as evaluations_mod
from services import jobs as jobs_mod
from services import keys as keys_mod
from services import trainings as trainings_mod
from services.context import ServiceContext
from services.db import checkpoint_sqlite, session_scope
from services.errors import Conflict, InvalidRequest
from services.jobkinds import EVALUATE, EVALUATION, TRAIN
from services.metrics import CONTENT_TYPE
from services.models import ACTIVE_JOB_STATES, Corpus, Job, Key
from services.tenants import authenticate, storage_used

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


async def get_ctx(request: Request) -> ServiceContext:
    # async: FastAPI runs a sync dependency on the thread pool, a hop per request for nothing
    return request.app.state.ctx


@dataclass(frozen=True)
class TenantRef:
    id: str
    name: str
    token_id: str


_bearer = HTTPBearer(auto_error=False, description="An API token (`pvt_...`) from `privatize admin tenant create`")


def _tenant_of(conn, credentials: HTTPAuthorizationCredentials | None) -> TenantRef:
    return TenantRef(*authenticate(conn, credentials.credentials.strip() if credentials is not None else None))


def current_tenant(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
                   ctx: ServiceContext = Depends(get_ctx)) -> TenantRef:
    with ctx.engine.connect() as conn:
        ref = _tenant_of(conn, credentials)
    request.state.privatize_tenant = ref  # for the access log and the audit entry
    return ref


# ---- schemas --------------------------------------------------------------------------

class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class CorpusOut(Out):
    id: str
    name: str
    format: str
    bytes: int
    records: int
    sha256: str
    created_at: dt.datetime


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["vigenere", "aes-siv", "hmac", "aes-ecb", "api-key"]
    material: SecretStr | None = None
    """An ``api-key`` key's value (an LLM provider's API key: sealed at once, never shown
    again, never exported); the other kinds are generated here."""
    length: int | None = None
    alphabet: Literal["letters52", "latin"] | None = None
    label: str | None = Field(None, max_length=256)


class KeyOut(Out):
    id: str
    ref: str
    kind: str
    alphabet: str | None
    length: int | None
    label: str | None
    status: str
    created_at: dt.datetime
    disabled_at: dt.datetime | None
    destroyed_at: dt.datetime | None

    @classmethod
    def of(cls, k: Key) -> "KeyOut":
        return cls(id=k.id, ref=f"keystore:{k.id}", kind=k.kind, alphabet=k.alphabet, length=k.length,
                   label=k.label, status=k.status, created_at=k.created_at, disabled_at=k.disabled_at,
                   destroyed_at=k.destroyed_at)


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus_id: str
    spec: dict
    """A pipeline spec (``privatize.spec.PipelineSpec``) as JSON."""


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
    def of(cls, j: Job, corpus_records: int | None) -> "JobOut":
        progress: dict = {"corpus_records": corpus_records}
        if j.counts:
            progress.update(j.counts)
        return cls(id=j.id, kind=j.kind, corpus_id=j.corpus_id, input_job_id=j.input_job_id, status=j.status,
                   ray_status=j.ray_status, message=j.message,
                   spec=j.spec, spec_sha256=j.spec_sha256, key_ids=j.key_ids or [],
                   submit_attempts=j.submit_attempts, progress=progress, output_bytes=j.output_bytes,
                   created_at=j.created_at, submitted_at=j.submitted_at, started_at=j.started_at,
                   finished_at=j.finished_at)


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


class DecryptIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="keystore:<id> or the bare key id")
    text: str | None = None
    texts: list[str] | None = None


# ---- health and tenant ----------------------------------------------------------------

@router.get("/healthz")
def healthz(request: Request):
    """The process is up (liveness)."""
    return {"status": "ok", "ray": getattr(request.app.state, "ray_state", "unknown")}


def _check(fn) -> str:
    try:
        fn()
        return "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means not ready; say which kind
        return f"failing: {type(exc).__name__}"


@router.get("/readyz")
def readyz(request: Request, ctx: ServiceContext = Depends(get_ctx)):
    """Ready for traffic (readiness): the database answers, the storage root is readable
    and the Ray Jobs API is connected. 503 with the failing checks otherwise."""
    from sqlalchemy import text

    def db():
        with ctx.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    ray_state = getattr(request.app.state, "ray_state", "unknown")
    checks = {"database": _check(db), "storage": _check(lambda: ctx.storage.exists(".ready-probe")),
              "ray": "ok" if ray_state == "connected" else f"failing: {ray_state.split(':')[0]}"}
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse({"status": "ready" if ready else "not ready", "checks": checks},
                        status_code=200 if ready else 503)


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request):
    """Prometheus text exposition."""
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE)


@router.get("/v1/tenant")
def tenant_info(tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    from services.models import Tenant

    with session_scope(ctx.sessions) as s:
        t = s.get(Tenant, tenant.id)
        active = s.scalar(select(func.count()).select_from(Job).where(Job.tenant_id == t.id,
                                                                      Job.status.in_(ACTIVE_JOB_STATES)))
        return {"id": t.id, "name": t.name, "storage_used_bytes": storage_used(s, t.id),
                "storage_limit_bytes": t.storage_limit_bytes, "active_jobs": active,
                "max_concurrent_jobs": t.max_concurrent_jobs}


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


@router.delete("/v1/corpora/{corpus_id}", status_code=204)
def delete_corpus(corpus_id: str, tenant: TenantRef = Depends(current_tenant),
                  ctx: ServiceContext = Depends(get_ctx)):
    corpora_mod.delete_corpus(ctx, tenant.id, corpus_id)
    return Response(status_code=204)


# ---- keys -----------------------------------------------------------------------------

@router.post("/v1/keys", status_code=201, response_model=KeyOut)
def create_key(body: KeyCreate, request: Request, tenant: TenantRef = Depends(current_tenant),
               ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        k = keys_mod.create_key(s, ctx.master, tenant.id, kind=body.kind, length=body.length,
                                alphabet=body.alphabet, label=body.label,
                                material=body.material.get_secret_value() if body.material is not None else None)
        out = KeyOut.of(k)
    audit_mod.note(request, out.id, kind=out.kind)
    return out


@router.get("/v1/keys", response_model=list[KeyOut])
def list_keys(tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return [KeyOut.of(k) for k in keys_mod.list_keys(s, tenant.id)]


@router.get("/v1/keys/{key_id}", response_model=KeyOut)
def get_key(key_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return KeyOut.of(keys_mod.get_key(s, tenant.id, key_id))


@router.post("/v1/keys/{key_id}/disable", response_model=KeyOut)
def disable_key(key_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return KeyOut.of(keys_mod.set_enabled(s, tenant.id, key_id, False))


@router.post("/v1/keys/{key_id}/enable", response_model=KeyOut)
def enable_key(key_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return KeyOut.of(keys_mod.set_enabled(s, tenant.id, key_id, True))


@router.delete("/v1/keys/{key_id}", response_model=KeyOut)
def destroy_key(key_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """Destroy the key (crypto-shredding): its material is deleted for good; the record
    stays, with status ``destroyed``, so manifests naming it stay explainable."""
    with ctx.admission, session_scope(ctx.sessions) as s:
        out = KeyOut.of(keys_mod.destroy_key(s, ctx.storage, tenant.id, key_id))
    checkpoint_sqlite(ctx.engine)
    return out


@router.post("/v1/keys/{key_id}/export")
def export_key(key_id: str, response: Response, tenant: TenantRef = Depends(current_tenant),
               ctx: ServiceContext = Depends(get_ctx)):
    """The key file (``privatize-key/1`` JSON, as ``privatize keys new`` writes) for its
    owner: the only response that ever carries key material."""
    with session_scope(ctx.sessions) as s:
        row = keys_mod.get_key(s, tenant.id, key_id)
        if row.kind in keys_mod.WRITE_ONLY_KINDS:
            raise Conflict(f"key {key_id} is an {row.kind} key: its owner holds it already, the service never "
                           "gives it out")
        km = keys_mod.material(ctx.master, row)
    response.headers["Cache-Control"] = "no-store"
    return km.to_json()


@router.post("/v1/decrypt")
def decrypt(body: DecryptIn = Body(...), tenant: TenantRef = Depends(current_tenant),
            ctx: ServiceContext = Depends(get_ctx)):
    """Decrypt text (``vigenere``: the whole-text cipher) or entity tokens (``aes-siv``:
    each token reported ``ok``, ``revised`` or ``invalid``) with one of the tenant's
    own keys."""
    if (body.text is None) == (body.texts is None):
        raise InvalidRequest("give exactly one of text or texts")
    texts = [body.text] if body.text is not None else list(body.texts or [])
    size = sum(len(t) for t in texts)
    if size > ctx.settings.max_decrypt_bytes:
        raise InvalidRequest(f"at most {ctx.settings.max_decrypt_bytes} characters per request")
    key_id = body.key.removeprefix("keystore:")
    with session_scope(ctx.sessions) as s:
        row = keys_mod.get_key(s, tenant.id, key_id)
        km = keys_mod.usable_material(ctx.master, row)
    report = None
    if km.kind == "vigenere":
        from privatize.ciphers.vigenere import Vigenere

        outs = Vigenere.from_key(km).decrypt_many(texts)
    elif km.kind in ("aes-siv", "aes-ecb"):
        from privatize.ciphers.entity import DecryptReport, EntityCipher

        cipher, report, outs = EntityCipher(km), DecryptReport(), []
        for t in texts:
            plain, rep = cipher.decrypt_text(t)
            report.add(rep)
            outs.append(plain)
    else:
        raise Conflict(f"key {key_id} is a {km.kind} key; it does not decrypt text")
    out: dict = {"key_id": key_id, "kind": km.kind}
    if body.text is not None:
        out["text"] = outs[0]
    else:
        out["texts"] = outs
    if report is not None:
        out["report"] = {"ok": report.ok, "revised": report.revised, "invalid": report.invalid,
                         "tokens": report.tokens}
    return out


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
async def get_job(job_id: str, request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
                  ctx: ServiceContext = Depends(get_ctx)):
    """What clients poll. The token check and the job's row share one connection and one
    call of :meth:`ServiceContext.read` (elsewhere the token is a dependency of its own: a
    thread hop and a session of its own, which at hundreds of polls a second is most of
    the cost)."""
    def load():
        with ctx.engine.connect() as conn:
            ref = _tenant_of(conn, credentials)
            request.state.privatize_tenant = ref
            return ref, jobs_mod.job_row(conn, ref.id, job_id)

    ref, row = await ctx.read(load)
    if row.status not in ACTIVE_JOB_STATES:
        out = JobOut.of(row, row.corpus_records)
    else:  # reconciled with Ray first (at most once a second per job)
        out = JobOut.of(*await anyio.to_thread.run_sync(jobs_mod.job_status, ctx, ref.id, job_id))
    # already a validated JobOut: serialised once here, not validated again by FastAPI
    return Response(out.model_dump_json(), media_type="application/json")


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
    job, manifest = jobs_mod.results(ctx, tenant.id, job_id)
    size = ctx.storage.size(f"{job.output_path}/{jobs_mod.MANIFEST}")
    return {"job_id": job.id, "counts": manifest.get("counts", {}), "spec_sha256": manifest.get("spec_sha256"),
            "files": jobs_mod.result_files(manifest, size)}


@router.get("/v1/jobs/{job_id}/results/{name:path}")
def download_result(job_id: str, name: str, tenant: TenantRef = Depends(current_tenant),
                    ctx: ServiceContext = Depends(get_ctx)):
    """The manifest or one shard it lists, streamed. The quarantine is never served."""
    rel = jobs_mod.result_path(ctx, tenant.id, job_id, name)
    size = ctx.storage.size(rel)
    media = "application/json" if name.endswith(".json") else "application/vnd.apache.parquet"
    headers = {"Content-Disposition": f'attachment; filename="{name.rsplit("/", 1)[-1]}"'}
    if size is not None:
        headers["Content-Length"] = str(size)
    return StreamingResponse(ctx.storage.open_chunks(rel), media_type=media, headers=headers)


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


def _fresh_of(get, ctx: ServiceContext, tenant_id: str, job_id: str) -> Job:
    """The tenant's job of one kind (``get`` raises 404 otherwise), reconciled with Ray
    while active."""
    with session_scope(ctx.sessions) as s:
        get(s, tenant_id, job_id)
    return jobs_mod.fresh_job(ctx, tenant_id, job_id)


def _fresh_training(ctx: ServiceContext, tenant_id: str, job_id: str) -> Job:
    return _fresh_of(trainings_mod.get_training, ctx, tenant_id, job_id)


@router.get("/v1/trainings/{job_id}", response_model=TrainingOut)
def get_training(job_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """Status and progress: the last metrics the run reported while it runs, its summary
    once it succeeded."""
    return _training_out(ctx, _fresh_training(ctx, tenant.id, job_id))


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
    return _fresh_of(evaluations_mod.get_evaluation, ctx, tenant_id, job_id)


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


# ---- audit ----------------------------------------------------------------------------

class AuditOut(Out):
    id: int
    at: dt.datetime
    actor: str
    action: str
    resource_type: str | None
    resource_id: str | None
    status: int | None
    request_id: str | None
    detail: dict | None


MAX_AUDIT_ID = 2**63 - 1
"""The largest id an audit entry can have (a signed 64-bit column in SQLite and
PostgreSQL): a larger ``before`` cursor is refused (422) instead of reaching the database."""


@router.get("/v1/audit")
def list_audit(limit: int = Query(100, ge=1, le=1000), before: int | None = Query(None, ge=1, le=MAX_AUDIT_ID),
               action: str | None = Query(None, max_length=64), resource_id: str | None = Query(None, max_length=64),
               tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """The tenant's own audit entries, newest first; page with ``before=<next_before>``."""
    with session_scope(ctx.sessions) as s:
        rows = audit_mod.list_events(s, tenant.id, limit=limit, before=before, action=action,
                                     resource_id=resource_id)
        events = [AuditOut.model_validate(r).model_dump(mode="json") for r in rows]
    return {"events": events, "next_before": events[-1]["id"] if len(events) == limit else None}
