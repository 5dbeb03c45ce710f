"""Trainings: jobs of kind ``train`` (``train.job`` on Ray), on the output of one of the
tenant's succeeded privatization jobs.

What a tenant submits is a ``train.config.TrainConfig`` without any location: the service
sets ``data.path`` (the privatization job's output) and ``output`` (the training's own
folder), so a config naming a path (``data.path``, ``output``, ``storage``,
``model.checkpoint``, ``tokenizer.path``, ``tokenizer.also_on``) answers 422 with the
field (a checkpoint is ``training:<id>``, one of the tenant's succeeded trainings:
continual pre-training on a new privatization job, protected from deletion while it
runs; or ``base:<name>``, a model of the operator's catalog or one the tenant uploaded,
``services.catalog``: admission keeps what it resolved to as the config's ``base_model``),
and so does one asking for more than the service's ``train_*`` settings allow
(workers, CPUs and threads, GPUs, steps, epochs, batch sizes, sequence length, vocabulary, LoRA
rank, audit canaries, presets: the quotas are declared on the fields of ``train.config``).

A training's row is a ``jobs`` row (``kind = 'train'``, ``input_job_id`` the privatization
job, ``corpus_id`` that job's corpus): admission, submission, reconciliation, cancel, logs
and deletion are the jobs' own. Its progress while it runs is the last line of the run's
``metrics.jsonl``; once it has succeeded, the figures of its ``summary.json``. Its model
folder is served as a ``.tar.gz`` stream.
"""

from __future__ import annotations

import hashlib
import json
import math
import tarfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from sqlalchemy.orm import Session

from privatize.refs import MODEL_REF
from services.catalog import BASE_REF, base_name
from services.errors import Conflict, NotFound, config_error, config_invalid
from services.jobkinds import PRIVATIZE, TRAIN, JobKind, KindOut, RootPath, register_job_kind
from train.progress import METRICS, SUMMARY
from services.jobs import succeeded_job
from services.models import Job

MODEL_DIR = "model"
PROGRESS_FIELDS = ("step", "epoch", "phase", "loss", "lr", "tokens", "tokens_per_s", "epsilon", "dp_steps", "time")
TAIL_BYTES = 64 << 10

TRAINING_REF = MODEL_REF
"""``model.checkpoint`` through the service: ``training:<id>``, the model of one of the
tenant's succeeded trainings (``kind: continue``, or an ``mlm`` fine-tune); the job gets
its location as ``train.job --checkpoint``. ``base:<name>`` (:data:`services.catalog.BASE_REF`)
names a model of the catalog or one of the tenant's uploads."""

@dataclass(frozen=True)
class TrainSpec:
    """A validated training config as the job machinery wants a spec: ``to_dict()`` (what
    is stored and handed to ``train.job``) and ``sha256()``."""

    config: Any  # train.config.TrainConfig

    def to_dict(self) -> dict:
        return self.config.to_dict()

    def sha256(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()


def validate_config(data) -> TrainSpec:
    """A tenant's training config -> :class:`TrainSpec`; SpecInvalid with field paths."""
    from privatize.errors import SpecError
    from privatize.policy import ServerPath, ServiceSets, marked
    from train.config import TrainConfig, parse_config

    if not isinstance(data, dict):
        raise config_invalid([("", "config: must be a JSON object (a training config, as in train/configs/)")])
    # fields naming files on the server, as the config declares them (privatize.policy.ServerPath)
    errors = [(".".join(path), m.why) for path, value, m in marked(data, TrainConfig, (ServerPath, ServiceSets))
              if value not in (None, []) and not (getattr(m, "model_ref", False) and isinstance(value, str)
                                                  and (TRAINING_REF.fullmatch(value) or BASE_REF.fullmatch(value)))]
    if errors:
        raise config_invalid(errors)
    try:
        cfg = parse_config(data, "config")
    except SpecError as exc:
        raise config_error(exc) from None
    if cfg.dp is not None and cfg.dp.no_guarantee:
        # a tenant's model would carry a DP-SGD label and no guarantee: the CLI runs these
        raise config_invalid([("dp.no_guarantee", "a training through the service makes a privacy claim; "
                                                  "run calibration without one from the CLI")])
    return TrainSpec(cfg)


def base_training(config: dict) -> str | None:
    """The id of the training a stored config continues from (``model.checkpoint:
    training:<id>``), or None."""
    ckpt = (config.get("model") or {}).get("checkpoint")
    m = TRAINING_REF.fullmatch(ckpt) if isinstance(ckpt, str) else None
    return m.group(1) if m else None


def check_base_training(s: Session, tenant_id: str, spec: TrainSpec) -> TrainSpec:
    """The training a config continues from is one of the tenant's, and has succeeded
    (404 as for an id that does not exist, else 409; both at ``model.checkpoint``); a
    ``base:<name>`` is a model of the catalog or of the tenant's (404 at
    ``model.checkpoint`` otherwise, another tenant's upload included). Returns the spec
    with ``base_model`` (what the name resolved to); Conflict when planning resolved it to
    another model (deleted and uploaded again meanwhile)."""
    from services.catalog import ref_of, resolve

    d = spec.to_dict()
    tid = base_training(d)
    if tid is not None:
        succeeded_training(s, tenant_id, tid, "model.checkpoint", "a training continues from one that has succeeded")
    name = base_name(d)
    if name is None:
        return spec
    ref = ref_of(resolve(s, tenant_id, name, "model.checkpoint"))
    planned = spec.config.base_model
    if planned is not None and planned.get("id") != ref["id"]:
        raise Conflict(f"model {name!r} changed while this training was planned; submit it again",
                       path="model.checkpoint")
    return TrainSpec(spec.config.model_copy(update={"base_model": ref}))


def base_folder(spec: dict, tenant_id: str) -> str | None:
    """The storage folder (relative to the root) of the model a stored config fine-tunes
    from by reference: a training's ``model/`` or a catalogued model's folder."""
    from services.catalog import folder_of

    tid = base_training(spec)
    if tid is not None:
        from services.storage import job_dir

        return f"{job_dir(tenant_id, tid)}/output/{MODEL_DIR}"
    ref = spec.get("base_model")
    return folder_of(ref, tenant_id) if isinstance(ref, dict) and base_name(spec) else None


def succeeded_training(s: Session, tenant_id: str, tid: str, path: str, why: str) -> Job:
    """The tenant's training ``tid``, which has succeeded (:func:`services.jobs.succeeded_job`)."""
    return succeeded_job(s, TRAIN, tenant_id, tid, path, why)


def check_limits(settings, spec: TrainSpec) -> None:
    """SpecInvalid naming every field that asks for more than the service allows tenants:
    the presets and GPUs it offers, and every field ``train.config`` marks with a
    ``privatize.policy.Quota`` (``services.limits.field_quotas``: workers, CPUs and threads,
    steps, epochs, batch sizes, sequence length, vocabulary, LoRA rank, audit canaries,
    restarts)."""
    from services.limits import field_quotas

    c = spec.config
    s = settings
    errors: list[tuple[str, str]] = []
    presets = s.train_preset_list
    if c.model.preset is not None and c.model.preset not in presets:
        errors.append(("model.preset", f"{c.model.preset!r} is not available on this service "
                                       f"(available: {', '.join(presets) or 'none'})"))
    if c.workers.use_gpu and not s.train_allow_gpu:
        errors.append(("workers.use_gpu", "GPUs are not available to trainings on this service"))
    errors += field_quotas(s, c)
    if errors:
        raise config_invalid(errors)


# ---- results and progress -------------------------------------------------------------

def _finite(v):
    """JSON-safe figures: a diverged run's NaN or infinite loss becomes None."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def summary_counts(summary) -> dict | None:
    """The figures of a run's ``summary.json`` kept on the job's row (no config, no paths)."""
    if not isinstance(summary, dict):
        return None
    keep = ("kind", "steps", "final_loss", "last_step_loss", "tokens", "seconds", "examples", "seq_len",
            "epsilon", "delta", "dp_steps", "confidentiality", "audit", "unit", "guarantee", "base", "lora",
            "unit_epsilon", "unit_delta")
    out = {k: summary[k] for k in keep if k in summary}
    tok = summary.get("tokenizer")
    if isinstance(tok, dict):
        out["vocab_size"] = tok.get("vocab_size")
    workers = summary.get("workers")
    if isinstance(workers, dict):
        out["workers"] = workers.get("count")
    return _finite(out)


def latest_metrics(storage, output_path: str) -> dict | None:
    """The last complete line of the run's ``metrics.jsonl`` (one ranged read), or None."""
    tail = storage.read_tail(f"{output_path}/{METRICS}", TAIL_BYTES)
    for line in reversed(tail.splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:  # the first, cut by the range, or the last, half written
            continue
        if isinstance(rec, dict) and "step" in rec:
            return _finite({k: rec[k] for k in PROGRESS_FIELDS if k in rec})
    return None


def progress_of(ctx, job) -> dict | None:
    """What a training's status shows as progress: its final figures once it succeeded,
    else the last metrics it reported (live while it runs; how far it got when it failed or
    was cancelled), read at most once a second per training."""
    if job.status == "succeeded" and job.counts:
        c = job.counts
        out = {"step": c.get("steps"), "loss": c.get("final_loss"), "tokens": c.get("tokens")}
        out.update({k: c[k] for k in ("epsilon", "dp_steps") if k in c})
        return out
    if job.status == "queued":
        return None
    return ctx.cached_progress(job.id, lambda: latest_metrics(ctx.storage, job.output_path))


# ---- the model, as a .tar.gz stream ---------------------------------------------------------

def model_files(ctx, job: Job) -> list[tuple[str, int]]:
    """(name under ``model/``, size) of a succeeded training's model; Conflict before."""
    if job.status != "succeeded":
        raise Conflict(f"training {job.id} is {job.status}; its model exists once it has succeeded")
    files = ctx.storage.list_files(f"{job.output_path}/{MODEL_DIR}")
    if not files:
        raise NotFound(f"training {job.id} has no model (deleted?)")
    return files


def tar_gz(storage, rel_dir: str, files: list[tuple[str, int]], root: str, mtime: float | None = None
           ) -> Iterator[bytes]:
    """A gzip-compressed tar of ``files`` (under ``rel_dir`` in storage) as ``root/<name>``,
    produced as it is read: a header, the file's chunks, padding, for each file in turn,
    so memory stays one chunk whatever the model's size."""
    z = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: the gzip container
    mtime = int(time.time() if mtime is None else mtime)
    written = 0

    def put(b: bytes) -> bytes:
        nonlocal written
        written += len(b)
        return z.compress(b)

    d = tarfile.TarInfo(root)
    d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, mtime
    yield put(d.tobuf(tarfile.PAX_FORMAT))
    for name, size in files:
        ti = tarfile.TarInfo(f"{root}/{name}")
        ti.size, ti.mode, ti.mtime = size, 0o644, mtime
        yield put(ti.tobuf(tarfile.PAX_FORMAT))
        n = 0
        for chunk in storage.open_chunks(f"{rel_dir}/{name}"):
            n += len(chunk)
            if n > size:
                raise OSError(f"{name} grew while it was being sent")
            out = put(chunk)
            if out:
                yield out
        if n != size:
            raise OSError(f"{name} shrank while it was being sent")
        if size % tarfile.BLOCKSIZE:
            yield put(tarfile.NUL * (tarfile.BLOCKSIZE - size % tarfile.BLOCKSIZE))
    end = tarfile.NUL * (2 * tarfile.BLOCKSIZE)
    written_after = written + len(end)
    end += tarfile.NUL * (-written_after % tarfile.RECORDSIZE)
    yield put(end)
    yield z.flush()


# ---- the train job kind -----------------------------------------------------------------

class TrainingOut(KindOut):
    job_id: str | None = Field(description="the privatization job it trains on")
    progress: dict | None = Field(description="step, loss, tokens (epsilon, dp_steps under DP) of its last "
                                              "report while it runs; its final figures once it succeeded")


@register_job_kind
class TrainJobKind(JobKind):
    """A training (``train.job`` on Ray Train) on a succeeded privatization job's output:
    ``/v1/trainings``, its progress from ``metrics.jsonl``, its model as a ``.tar.gz``."""

    name = TRAIN
    module = "train.job"
    noun = "training"
    resource = "trainings"
    result_file = SUMMARY
    input_kind = PRIVATIZE
    discard_unless_succeeded = ("checkpoints",)
    Out = TrainingOut
    downloads = (("model", "model.tar.gz"),)
    config_help = ("a training config (train.config.TrainConfig, as in train/configs/) as JSON, without paths: "
                   "the service sets data.path and output")

    def validate(self, data) -> TrainSpec:
        return validate_config(data)

    def config_model(self):
        from train.config import TrainConfig

        return TrainConfig

    def limits(self, settings, spec: TrainSpec) -> None:
        check_limits(settings, spec)

    def prepare(self, session, tenant_id: str, corpus, spec: TrainSpec):
        return check_base_training(session, tenant_id, spec), []

    def plan(self, ctx, tenant_id: str, input_job_id: str | None, spec: TrainSpec) -> TrainSpec:
        from services.db import session_scope
        from services.ledger import plan_training

        from services.jobs import input_job

        if spec.config.dp is None:
            return spec
        with session_scope(ctx.sessions) as s:
            inp = input_job(ctx, s, tenant_id, input_job_id, PRIVATIZE)
            spec = check_base_training(s, tenant_id, spec)
            base = base_folder(spec.to_dict(), tenant_id)
            s.expunge_all()
        return plan_training(ctx, inp, base, spec)

    def admit(self, session, tenant_id: str, corpus, job, spec: TrainSpec) -> None:
        from services.ledger import admit

        admit(session, tenant_id, corpus, job, spec, base_training(spec.to_dict()))

    def settle(self, ctx, session, job) -> None:
        from services.ledger import settle

        last = latest_metrics(ctx.storage, job.output_path) if job.status != "succeeded" else None
        settle(ctx, session, job, last)

    def read_results(self, storage, output_path: str) -> dict | None:
        try:
            return summary_counts(json.loads(storage.read_bytes(f"{output_path}/{SUMMARY}")))
        except (OSError, ValueError):
            return None

    def also_reads(self, spec: dict) -> set[str]:
        t = base_training(spec)
        ref = spec.get("base_model") if base_name(spec) else None
        return {t} if t else {ref["id"]} if isinstance(ref, dict) and ref.get("id") else set()

    def options(self, spec: dict) -> list[tuple[str, str]]:
        t = base_training(spec)
        if t:
            return [("--checkpoint", f"jobs/{t}/output/model")]
        ref = spec.get("base_model") if base_name(spec) else None
        if not isinstance(ref, dict):
            return []
        if ref.get("owner") == "catalog":  # the operator's catalog: under the storage root
            return [("--checkpoint", RootPath(f"models/{ref['id']}"))]
        return [("--checkpoint", f"models/{ref['id']}")]

    def live_progress(self, ctx, job) -> dict | None:
        return progress_of(ctx, job)

    def out(self, ctx, job, live: bool = True) -> TrainingOut:
        progress = progress_of(ctx, job) if live or job.status == "succeeded" else None
        return TrainingOut(**TrainingOut.fields_of(job), job_id=job.input_job_id, progress=progress)

    def routes(self, router) -> None:
        from fastapi import Depends
        from fastapi.responses import StreamingResponse

        from services.dependencies import current_tenant, fresh_job_of, get_ctx

        def download_model(job_id: str, tenant=Depends(current_tenant), ctx=Depends(get_ctx)):
            """The trained model (a Hugging Face folder with its tokenizer) as a ``.tar.gz`` of
            ``model/``, streamed; 409 until the training has succeeded."""
            job = fresh_job_of(self, ctx, tenant.id, job_id)
            files = model_files(ctx, job)
            stream = tar_gz(ctx.storage, f"{job.output_path}/{MODEL_DIR}", files, MODEL_DIR,
                            job.finished_at.timestamp() if job.finished_at else None)
            headers = {"Content-Disposition": f'attachment; filename="training-{job.id}-model.tar.gz"'}
            return StreamingResponse(stream, media_type="application/gzip", headers=headers)

        router.add_api_route("/v1/trainings/{job_id}/model", download_model, methods=["GET"],
                             response_class=StreamingResponse,
                             responses={200: {"content": {"application/gzip": {}},
                                              "description": "model/ as a .tar.gz"}})
