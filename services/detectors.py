"""Detectors: jobs of kind ``adapt`` (``privatize.adapt_job`` on Ray, one worker), the
redaction detector adapted to one of the tenant's annotated corpora (issue 51, item 2).

What a tenant submits is a corpus (``corpus_id``: an uploaded JSONL corpus whose records
hold ``text`` and ``spans``, ``start``/``end``/``type``; or TAB's JSON lines with
``format: tab``) and a ``privatize.adapt_job.AdaptConfig`` (``format``, ``holdout``,
``epochs``, ``seed``, ``map``: annotated type -> spaCy label, ``complete``: the corpus
annotates everything the tenant redacts), with no location: the job
reads the corpus where the tenant's storage keeps it and writes ``detector/`` (the detector
folder of ``privatize train-ner --annotated``) and ``summary.json`` into its own output
folder. The epochs are bounded by the service's ``detector_max_epochs`` (the quota is
declared on the config's field); an unknown field, a bad label or a corpus that is not
JSONL answers 422 with the field.

A detector's row is a ``jobs`` row (``kind = 'adapt'``, its corpus): admission, submission,
reconciliation, cancel, logs, deletion and audit (``detector.create``) are the jobs' own;
another tenant's corpus or detector answers 404 as one that does not exist. Once it has
succeeded, its summary is the held-out evaluation of its ``detector.json`` (recall, the
miss rate's 95% bound, character recall and precision, span precision, by type; the base
model's on the same slice; pi's threshold and pi_c's calibration), and a privatize spec's
redact stage (or a mask or identifiers stage) names it as ``model: detector:<id>``
(``services.specs``): the workers get its folder's location through
``privatize.refs.MODELS_ENV``. ``GET /v1/detectors/{id}/detector.json`` serves its
``detector.json``.
"""

from __future__ import annotations

import json

from pydantic import Field

from services.errors import Conflict, NotFound, config_error, config_invalid
from privatize.adapt_job import SUMMARY
from privatize.redaction.defaults import DETECTOR_FILE as DETECTOR_JSON
from services.jobkinds import ADAPT, JobKind, KindOut, register_job_kind

DETECTOR_DIR = "detector"
REFERENCE = "detector:{id}"


def detector_folder(job_id: str) -> str:
    """A detector job's folder, relative to its tenant's storage folder."""
    return f"jobs/{job_id}/output/{DETECTOR_DIR}"


def validate_config(data):
    """A tenant's adaptation config -> ``privatize.adapt_job.AdaptConfig``; SpecInvalid with
    field paths."""
    from privatize.adapt_job import parse_config
    from privatize.errors import SpecError

    if not isinstance(data, dict):
        raise config_invalid([("", "config: must be a JSON object (format, holdout, epochs, seed, map, complete)")])
    try:
        return parse_config(data)
    except SpecError as exc:
        raise config_error(exc) from None


def check_limits(settings, spec) -> None:
    """SpecInvalid naming every field beyond the service's quotas (declared on the config's
    fields: ``privatize.policy.Quota``)."""
    from services.limits import field_quotas

    errors = field_quotas(settings, spec)
    if errors:
        raise config_invalid(errors)


def check_corpus(corpus) -> None:
    """An annotated corpus is a JSONL corpus (records with ``text`` and ``spans``)."""
    if corpus is not None and corpus.format != "jsonl":
        raise config_invalid([("format", f"corpus {corpus.id} is {corpus.format}; an annotated corpus is JSONL "
                                         "(records with text and spans)")])


def read_summary(storage, output_path: str) -> dict | None:
    try:
        summary = json.loads(storage.read_bytes(f"{output_path}/{SUMMARY}"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


class DetectorOut(KindOut):
    reference: str = Field(description="how a privatize spec names it (a redact stage's model: detector:<id>)")


@register_job_kind
class AdaptKind(JobKind):
    """The detector adapted to an annotated corpus (``privatize.adapt_job``):
    ``/v1/detectors``, its held-out evaluation as its summary, its ``detector.json``."""

    name = ADAPT
    module = "privatize.adapt_job"
    noun = "detector"
    resource = "detectors"
    result_file = SUMMARY
    discard_unless_succeeded = (DETECTOR_DIR,)
    Out = DetectorOut
    downloads = ((DETECTOR_JSON, DETECTOR_JSON),)
    config_help = ("an adaptation config as JSON (privatize.adapt_job.AdaptConfig): format (jsonl or tab), "
                   "holdout, epochs, seed, map (annotated type -> spaCy label), complete (the corpus annotates "
                   "everything the tenant redacts); the corpus is an annotated JSONL "
                   "corpus (text, spans with start, end, type)")

    def validate(self, data):
        return validate_config(data)

    def config_model(self):
        from privatize.adapt_job import AdaptConfig

        return AdaptConfig

    def limits(self, settings, spec) -> None:
        check_limits(settings, spec)

    def prepare(self, session, tenant_id: str, corpus, spec):
        check_corpus(corpus)
        return spec, []

    def read_results(self, storage, output_path: str) -> dict | None:
        return read_summary(storage, output_path)

    def out(self, ctx, job, live: bool = True) -> DetectorOut:
        return DetectorOut(**DetectorOut.fields_of(job), reference=REFERENCE.format(id=job.id))

    def audit_detail(self, job) -> dict:
        return {"epochs": (job.spec or {}).get("epochs")}

    def routes(self, router) -> None:
        from fastapi import Depends
        from fastapi.responses import Response

        from services.dependencies import current_tenant, fresh_job_of, get_ctx

        def detector_json(job_id: str, tenant=Depends(current_tenant), ctx=Depends(get_ctx)):
            """The detector's ``detector.json`` (its threshold, labels, held-out evaluation and
            provenance); 409 until it has succeeded."""
            job = fresh_job_of(self, ctx, tenant.id, job_id)
            if job.status != "succeeded":
                raise Conflict(f"detector {job.id} is {job.status}; its detector.json exists once it has succeeded")
            try:
                body = ctx.storage.read_bytes(f"{job.output_path}/{DETECTOR_DIR}/{DETECTOR_JSON}")
            except OSError:
                raise NotFound(f"detector {job.id} has no detector.json (deleted?)") from None
            return Response(body, media_type="application/json")

        router.add_api_route(f"/v1/detectors/{{job_id}}/{DETECTOR_JSON}", detector_json, methods=["GET"],
                             responses={200: {"content": {"application/json": {}},
                                              "description": "the detector's detector.json"}})
