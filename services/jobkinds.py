"""Kinds of service jobs: one registry entry each.

A :class:`JobKind` says everything the service needs to know about one kind of job:

* ``validate``: what a tenant submitted (the ``spec`` of the request, JSON) -> the
  validated spec object (it has ``to_dict()`` and ``sha256()``); raises
  ``services.errors.SpecInvalid`` with field paths. Called once per job.
* ``prepare``: the checks that need the database and the job's input, in the admission
  transaction: ``(session, tenant_id, corpus, spec) -> (spec, keystore key ids)``.
* ``module``: the module the Ray job's driver runs (``python -m services.jobrun KIND SPEC
  INPUT OUTPUT`` installs the keystore, then runs it as ``python -m MODULE SPEC INPUT
  OUTPUT``); it must exit 0 only when it wrote its result under OUTPUT.
* ``read_results``: ``(storage, output path) -> counts`` stored on the job's row, or None
  when the job wrote no ``result_file``.
* ``limits`` (optional): ``(service settings, spec) -> None``; raises ``SpecInvalid``
  naming each field that asks for more than the service allows tenants.
* ``input_kind`` (optional): None when the job reads its corpus; else the kind of job
  whose output it reads (a succeeded job of the same tenant, named at creation:
  ``train`` reads a ``privatize`` job's output).
* ``inputs`` (optional): for a job that reads several of its tenant's corpora and job
  outputs, named in its spec (``evaluate``): ``(stored spec) -> ids`` of what it reads.
  Such a job has no corpus and no input job on its row; its ``prepare`` checks what the
  spec names and writes their locations into it, relative to the tenant's storage folder,
  which is the job's INPUT. While it is active, what it reads cannot be deleted.

Adding a kind is one :func:`register_job_kind` call below. This module imports no web or
database code at import time: the job's driver (``services.jobrun``) imports it.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

PRIVATIZE = "privatize"
TRAIN = "train"
EVALUATE = "evaluate"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
EVALUATION = "evaluation.json"
JOBRUN = "python -m services.jobrun"
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def _no_keys(session, tenant_id: str, corpus, spec) -> tuple[Any, list[str]]:
    return spec, []


def _no_limits(settings, spec) -> None:
    return None


@dataclass(frozen=True)
class JobKind:
    name: str
    validate: Callable[[Any], Any]
    module: str
    read_results: Callable[[Any, str], dict | None]
    prepare: Callable[[Any, str, Any, Any], tuple[Any, list[str]]] = _no_keys
    result_file: str = MANIFEST
    limits: Callable[[Any, Any], None] = _no_limits
    input_kind: str | None = None
    inputs: Callable[[dict], set[str]] | None = None
    also_reads: Callable[[dict], set[str]] | None = None
    """Ids of other jobs whose output a job of this kind also reads, named in its stored
    spec (a continued training's base training): not deleted while it is active."""
    options: Callable[[dict], list[tuple[str, str]]] | None = None
    """Extra entrypoint options from the stored spec: (flag, location relative to the
    tenant's folder), turned into the storage's locations by the service."""
    discard_unless_succeeded: tuple[str, ...] = ()
    """Folders of the job's output, relative to it, removed when the job ends any other way
    than succeeded (a cancelled training's checkpoints: they counted against the quota and
    nothing resumes them)."""
    models: Callable[[dict], dict[str, str]] | None = None
    """Models the stored spec names by reference: ``{reference: location relative to the
    tenant's folder}``, handed to every worker of the job as storage locations
    (``privatize.refs.MODELS_ENV`` in its runtime environment)."""

    def entrypoint(self, spec: str, input: str, output: str, extra: tuple[str, ...] = ()) -> str:
        """The Ray Jobs entrypoint for these locations (the service chose them all; no key
        material is ever an argument)."""
        return f"{JOBRUN} " + " ".join(shlex.quote(a) for a in (self.name, spec, input, output, *extra))


_KINDS: dict[str, JobKind] = {}


def register_job_kind(kind: JobKind) -> JobKind:
    if not _NAME.fullmatch(kind.name):
        raise ValueError(f"job kind name {kind.name!r}: lowercase letters, digits, '-' or '_' (at most 32)")
    if _KINDS.get(kind.name, kind) != kind:
        raise ValueError(f"job kind {kind.name!r} is registered already")
    _KINDS[kind.name] = kind
    return kind


def job_kind(name: str) -> JobKind:
    try:
        return _KINDS[name]
    except KeyError:
        raise LookupError(f"unknown job kind {name!r} (known: {', '.join(sorted(_KINDS))})") from None


def job_kinds() -> list[str]:
    return sorted(_KINDS)


# ---- privatization --------------------------------------------------------------------

def _validate_pipeline(data):
    from services.specs import validate_spec

    return validate_spec(data)


def _pipeline_limits(settings, spec) -> None:
    from services.limits import check_pipeline_limits

    check_pipeline_limits(settings, spec)


def _prepare_pipeline(session, tenant_id: str, corpus, spec):
    """Only the tenant's own enabled ``keystore:`` keys (an LLM API key among them);
    ``input.format`` fixed to the corpus's format; synthesis without a disk cache."""
    from services.specs import check_key_references, check_model_references, for_service, with_input_format

    key_ids = check_key_references(session, tenant_id, spec)
    check_model_references(session, tenant_id, spec)
    return for_service(with_input_format(spec, corpus.format)), key_ids


def read_manifest(storage, output_path: str) -> dict | None:
    try:
        return json.loads(storage.read_bytes(f"{output_path}/{MANIFEST}"))
    except (OSError, ValueError):
        return None


def manifest_counts(manifest: dict) -> dict:
    """A privatization manifest's counts, shard count and per-stage figures (the job
    row's ``counts``: what a job's ``progress`` shows)."""
    c = dict(manifest.get("counts", {}))
    c["shards"] = len(manifest.get("shards", []))
    c["stages"] = [{k: st.get(k) for k in ("index", "kind", "records_in", "records_out", "quarantined", "dropped")}
                   for st in manifest.get("stages", [])]
    return c


def _pipeline_results(storage, output_path: str) -> dict | None:
    manifest = read_manifest(storage, output_path)
    return None if manifest is None else manifest_counts(manifest)


def _pipeline_reads(spec: dict) -> set[str]:
    from services.specs import model_references

    return set(model_references(spec).values())


def _pipeline_models(spec: dict) -> dict[str, str]:
    from services.specs import model_references

    return {f"training:{t}": f"jobs/{t}/output/model" for t in model_references(spec).values()}


register_job_kind(JobKind(PRIVATIZE, _validate_pipeline, "privatize.job", _pipeline_results, _prepare_pipeline,
                          limits=_pipeline_limits, also_reads=_pipeline_reads, models=_pipeline_models))


# ---- training -------------------------------------------------------------------------

def _validate_train(data):
    from services.trainings import validate_config

    return validate_config(data)


def _train_limits(settings, spec) -> None:
    from services.trainings import check_limits

    check_limits(settings, spec)


def _train_results(storage, output_path: str) -> dict | None:
    from services.trainings import summary_counts

    try:
        return summary_counts(json.loads(storage.read_bytes(f"{output_path}/{SUMMARY}")))
    except (OSError, ValueError):
        return None


def _prepare_train(session, tenant_id: str, corpus, spec):
    from services.trainings import check_base_training

    check_base_training(session, tenant_id, spec)
    return spec, []


def _train_reads(spec: dict) -> set[str]:
    from services.trainings import base_training

    t = base_training(spec)
    return {t} if t else set()


def _train_options(spec: dict) -> list[tuple[str, str]]:
    from services.trainings import base_training

    t = base_training(spec)
    return [("--checkpoint", f"jobs/{t}/output/model")] if t else []


register_job_kind(JobKind(TRAIN, _validate_train, "train.job", _train_results, _prepare_train, result_file=SUMMARY,
                          discard_unless_succeeded=("checkpoints",),
                          limits=_train_limits, input_kind=PRIVATIZE, also_reads=_train_reads,
                          options=_train_options))


# ---- evaluation -----------------------------------------------------------------------

def _validate_evaluation(data):
    from services.evaluations import validate_config

    return validate_config(data)


def _evaluation_limits(settings, spec) -> None:
    from services.evaluations import check_limits

    check_limits(settings, spec)


def _prepare_evaluation(session, tenant_id: str, corpus, spec):
    from services.evaluations import prepare

    return prepare(session, tenant_id, spec)


def _evaluation_results(storage, output_path: str) -> dict | None:
    from services.evaluations import read_results

    return read_results(storage, output_path)


def _evaluation_inputs(spec: dict) -> set[str]:
    from services.evaluations import inputs_of

    return inputs_of(spec)


register_job_kind(JobKind(EVALUATE, _validate_evaluation, "attacks.job", _evaluation_results, _prepare_evaluation,
                          result_file=EVALUATION, limits=_evaluation_limits, inputs=_evaluation_inputs))
