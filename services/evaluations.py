"""Evaluations: jobs of kind ``evaluate`` (``attacks.job`` on Ray), privacy attacks on a
tenant's own succeeded trainings, with one report.

What a tenant submits is an ``attacks.config.AttackConfig`` without any location: models
name trainings (``{"name": "crt", "training_id": ...}``), data sources name corpora
(``{"corpus_id": ...}``) or privatization jobs (``{"job_id": ...}``, their output shards),
``mia.reference`` names a training, and the canary key is ``keystore:<id>`` (an ``hmac``
key of the tenant's, as the ``canaries`` stage takes it). A field naming a location on
the server (a string where a reference goes, ``models.<i>.path``, ``output``) answers 422
with the field, and so does one asking for more than the service's ``eval_*`` settings
allow. Another tenant's training, job or corpus answers 404, exactly as one that does not
exist; a training or job that has not succeeded, 409.

At admission the references become locations relative to the tenant's storage folder
(``jobs/<training>/output``, ``corpora/<corpus>/data.jsonl``): the stored config (the
row's ``spec``, ``spec.json``) is a complete ``AttackConfig`` but for ``output``, which
``attacks.job`` sets; it names nothing outside the tenant's folder, which is the job's
INPUT. The canary key reaches the job as a reference and a key bundle, like a
privatization's keys.

An evaluation's row is a ``jobs`` row (``kind = 'evaluate'``, no corpus, no input job):
admission, submission, reconciliation, cancel, logs and deletion are the jobs' own; what
it reads cannot be deleted while it runs (``services.jobs.active_readers``). Once it has
succeeded its row's counts are the per-model summary of its ``evaluation.json``
(perplexity, max exposure, best MIA AUC); ``report.html`` and ``evaluation.json`` are
served as they are.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from pydantic import Field

from sqlalchemy.orm import Session

from services.errors import Conflict, NotFound, config_error, config_invalid
from attacks.results import EVALUATION, REPORT
from services.jobkinds import EVALUATE, PRIVATIZE, TRAIN, JobKind, KindOut, job_kind, register_job_kind
from services.models import Job
from services.storage import tenant_prefix

_SOURCE_HINT = ('name one of your corpora ({"corpus_id": ...}) or succeeded privatization jobs '
                '({"job_id": ...})')
_REF = {"training_id": "training", "corpus_id": "corpus", "job_id": "job", "model": "base"}
"""Reference field -> the scheme of its placeholder (``training:<id>``, ``base:<name>``) until
admission."""
_REF_FIELD = {scheme: field for field, scheme in _REF.items()}
_LOCATION = re.compile(r"(?:jobs|corpora|models)/([^/]+)(?:/|$)|catalog:([0-9a-f]{16})$")


def local_only() -> dict[str, str]:
    """Config sections the service does not offer -> why: the attacks that say so
    (``Attack.local_only``: what they read has no reference a tenant could give) and the
    config's own sections marked ``ServerPath`` (``corpus_stats``). Refused (422) rather than
    passed through as paths, and left out of the service's schema."""
    from attacks.config import config_model
    from attacks.registry import ATTACKS
    from privatize.policy import ServerPath, marked_fields

    out = {name: f"not offered by the service yet ({a.local_only}): run it with `privatize attack` on your own "
                 "copy of the model" for name, a in ATTACKS.items() if a.local_only}
    out.update((path[0], m.why) for path, m in marked_fields(config_model(), (ServerPath,)) if len(path) == 1)
    return out


@dataclass(frozen=True)
class EvaluationSpec:
    """A validated evaluation config as the job machinery wants a spec: ``to_dict()``
    (what is stored and handed to ``attacks.job``: no ``output``) and ``sha256()``.
    Before admission its locations are placeholders (``training:<id>``)."""

    config: Any  # attacks.config.AttackConfig

    def to_dict(self) -> dict:
        return self.config.model_dump(mode="json", exclude={"output"})

    def sha256(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()


def _ref_id(value) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 64 else None


def _reference(value, fields: tuple[str, ...]) -> str | None:
    """``{"<field>": "<id>"}`` with one of ``fields`` -> its placeholder; None otherwise."""
    if isinstance(value, dict) and len(value) == 1:
        (field, rid), = value.items()
        if field in fields and _ref_id(rid):
            return f"{_REF[field]}:{rid}"
    return None


def validate_config(data) -> EvaluationSpec:
    """A tenant's evaluation config -> :class:`EvaluationSpec` (references as
    placeholders); SpecInvalid with field paths."""
    from attacks.config import parse_config
    from privatize.errors import SpecError
    from privatize.policy import ServerPath

    if not isinstance(data, dict):
        raise config_invalid([("", "config: must be a JSON object (an evaluation config: models, canaries, mia, "
                             "perplexity, extraction)")])
    data = copy.deepcopy(data)
    errors: list[tuple[str, str]] = []
    if data.get("output") is not None:
        errors.append(("output", "set by the service: an evaluation writes to its own folder"))
    models = data.get("models")
    for i, m in enumerate(models if isinstance(models, list) else []):
        if not isinstance(m, dict):
            continue  # the config's own validation names it
        if "path" in m:
            errors.append((f"models.{i}.path", "a location on the server: name one of your succeeded trainings "
                                               "as training_id"))
            continue
        if "model" in m:  # a base model the tenant may use (GET /v1/models), as trainings name one
            from services.catalog import BASE_REF

            ref, both = m.pop("model"), "training_id" in m
            if both or not (isinstance(ref, str) and BASE_REF.fullmatch(ref)):
                errors.append((f"models.{i}.model", "give either training_id or model" if both else
                               "a base model's reference, base:<name> (GET /v1/models lists yours)"))
                continue
            m["path"] = ref
            continue
        rid = _ref_id(m.pop("training_id", None))
        if rid is None:
            errors.append((f"models.{i}.training_id", "required: the id of one of your succeeded trainings "
                                                      "(or model: base:<name>, a base model you may use)"))
            continue
        m["path"] = f"training:{rid}"
    for section, why in local_only().items():
        if data.get(section) not in (None, []):
            errors.append((section, why))
    errors += registered_attack_errors(data.get("attacks"))
    from attacks.config import data_sources, marked_in, set_at

    for path, value, m in list(marked_in(data, (ServerPath,))):  # mia's reference model, wherever it is
        if not m.model_ref or value is None:
            continue
        ref = _reference(value, ("training_id",))
        if ref is None:
            errors.append((path, m.why + (" (a string is a location on the server)" if isinstance(value, str) else "")))
        else:
            set_at(data, path, ref)
    for path, value in data_sources(data):  # named sections and attacks entries alike
        if value is None:
            continue  # the config's own validation says whether it is required
        ref = _reference(value, ("corpus_id", "job_id"))
        if ref is None:
            where = "a location on the server: " if isinstance(value, str) else ""
            errors.append((path, where + _SOURCE_HINT))
        else:
            set_at(data, path, ref)
    if errors:
        raise config_invalid(errors)
    try:
        cfg = parse_config(data, "config")
    except SpecError as exc:
        raise config_error(exc) from None
    return EvaluationSpec(cfg)


def _ref_object(*fields: str, description: str) -> dict:
    one = [{"type": "object", "properties": {f: {"type": "string", "minLength": 1, "maxLength": 64}},
            "required": [f], "additionalProperties": False} for f in fields]
    return {**(one[0] if len(one) == 1 else {"oneOf": one}), "description": description}


def _section_def(prop: dict | None, resolve) -> dict | None:
    """The definition an optional section's property (``anyOf: [{$ref}, null]``) names."""
    for s in (prop or {}).get("anyOf", [prop or {}]):
        if "$ref" in s:
            return resolve(s)
    return None


def service_schema(schema: dict, resolve) -> dict:
    """The evaluation config's JSON schema (``attacks.config``'s) as :func:`validate_config`
    takes it: models name a training (``training_id``) or a base model (``model``) instead of
    a ``path``; the sections' data sources and ``mia.reference`` are references; no
    ``output``, nor the sections the service does not offer (:func:`local_only`)."""
    from attacks.registry import ATTACKS
    from privatize.policy import DataSource, ServerPath, marked_fields

    top = resolve(schema) if "$ref" in schema else schema
    props = top.get("properties", {})
    for name in ("output", *local_only()):
        props.pop(name, None)
    models = props.get("models", {}).get("items", {})
    spec = resolve(models) if "$ref" in models else models
    if "path" in spec.get("properties", {}):
        spec["properties"].pop("path")
        spec["required"] = [r for r in spec.get("required", []) if r != "path"]
        if not spec["required"]:
            del spec["required"]
        spec["properties"]["training_id"] = {"type": "string", "minLength": 1, "maxLength": 64,
                                             "description": "one of your succeeded trainings"}
        spec["properties"]["model"] = {"type": "string", "description": "a base model you may use: base:<name> "
                                                                        "(GET /v1/models)"}
        spec["oneOf"] = [{"required": ["training_id"]}, {"required": ["model"]}]
    entries = _entry_defs(props.get("attacks"), resolve)
    training = _ref_object("training_id", description="one of your succeeded trainings")
    for name, a in ATTACKS.items():  # in each attack's named section and its attacks entry: every
        for d in (_section_def(props.get(name), resolve), entries.get(name)):  # data source, model reference
            for path, m in marked_fields(a.Settings, (DataSource, ServerPath)):
                if d is None or len(path) != 1 or path[0] not in d.get("properties", {}):
                    continue
                if isinstance(m, DataSource):
                    d["properties"][path[0]] = _nullable(d["properties"][path[0]], _ref_object(
                        "corpus_id", "job_id", description=_SOURCE_HINT))
                elif m.model_ref:
                    d["properties"][path[0]] = _nullable(d["properties"][path[0]], training)
    return schema


def _nullable(was: dict, now: dict) -> dict:
    """``now``, also null where the property it replaces (``was``) took null (an optional field)."""
    if any(s.get("type") == "null" for s in was.get("anyOf", [])):
        return {"anyOf": [now, {"type": "null"}], "default": None}
    return now


def _entry_defs(prop: dict | None, resolve) -> dict[str, dict]:
    """The ``attacks`` list's entry definitions by kind (its items: a ``oneOf`` of entries, each
    with a constant ``kind``)."""
    items = (prop or {}).get("items") or {}
    union = resolve(items) if "$ref" in items else items
    out = {}
    for ref in union.get("oneOf", union.get("anyOf", [])):
        d = resolve(ref) if "$ref" in ref else ref
        kind = d.get("properties", {}).get("kind", {}).get("const")
        if isinstance(kind, str):
            out[kind] = d
    return out


def registered_attack_errors(entries) -> list[tuple[str, str]]:
    """What the service refuses in a config's ``attacks`` list (registered attacks, plugins
    included), from the markers on each attack's settings (``privatize.policy``): a field
    marked ``ServerPath`` (a file on the server) that the entry sets, at
    ``attacks.<i>.<field>``; and a built-in attack the service does not offer. An unknown
    kind is the config's own error."""
    from attacks.registry import ATTACKS
    from privatize.policy import ServerPath, marked

    errors: list[tuple[str, str]] = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict) or entry.get("kind") not in ATTACKS:
            continue
        a = ATTACKS.get(entry["kind"])
        if a.local_only:
            errors.append((f"attacks.{i}.kind", f"{a.name} is not offered by the service yet ({a.local_only}): "
                                                "run it with `privatize attack`"))
            continue
        for path, value, m in marked(entry, a.Settings, (ServerPath,)):
            if value not in (None, []) and not m.model_ref:  # a model reference is converted, not refused
                errors.append((f"attacks.{i}." + ".".join(path), m.why))
    return errors


def check_limits(settings, spec: EvaluationSpec) -> None:
    """SpecInvalid naming every field that asks for more than the service allows tenants:
    every field ``attacks.config`` marks with a ``privatize.policy.Quota``
    (``services.limits.field_quotas``: models, scoring workers and batch tokens, examples,
    canaries and their digits)."""
    from services.limits import field_quotas

    errors = field_quotas(settings, spec.config)  # the attacks entries too: each is its attack's own settings
    if errors:
        raise config_invalid(errors)


# ---- admission: references -> locations in the tenant's folder ---------------------------

def _location(s: Session, tenant_id: str, field: str, placeholder: str) -> str:
    """Where the resource a placeholder names lives, relative to the tenant's folder; the
    same NotFound for another tenant's id as for one that does not exist. Errors name the
    field as the tenant wrote it (``models.0.training_id``, ``mia.members.job_id``)."""
    from services.corpora import get_corpus
    from services.jobs import job_of_kind

    scheme, _, rid = placeholder.partition(":")
    field = f"{field.removesuffix('.path')}.{_REF_FIELD[scheme]}"
    try:
        if scheme == "base":
            return _base_location(s, tenant_id, rid, field)
        if scheme == "corpus":
            return get_corpus(s, tenant_id, rid).storage_path.removeprefix(f"{tenant_prefix(tenant_id)}/")
        if scheme == "training":
            job = job_of_kind(s, job_kind(TRAIN), tenant_id, rid)
            what = "training"
        else:
            job = s.get(Job, rid)
            if job is None or job.tenant_id != tenant_id:
                raise NotFound(f"no job {rid!r}")
            if job.kind != PRIVATIZE:
                raise Conflict(f"job {rid} is a {job.kind} job; give a {PRIVATIZE} job")
            what = "job"
    except (NotFound, Conflict) as exc:
        raise type(exc)(exc.message, path=field) from None
    if job.status != "succeeded":
        raise Conflict(f"{what} {rid} is {job.status}; give a {what} that has succeeded", path=field)
    return job.output_path.removeprefix(f"{tenant_prefix(tenant_id)}/")


def _base_location(s: Session, tenant_id: str, name: str, field: str) -> str:
    """Where the base model ``base:<name>`` is for this tenant's job: one of its uploads is in
    its folder (``models/<id>``); the operator's catalog's is outside it, so the job finds it
    by the reference ``catalog:<id>`` (:data:`privatize.refs.MODELS_ENV`, set from
    :func:`models_of`). NotFound at ``field`` as for a training of another tenant's."""
    from services.catalog import CATALOG_PREFIX, resolve

    m = resolve(s, tenant_id, name, field)
    return f"catalog:{m.id}" if m.tenant_id is None else f"{CATALOG_PREFIX}/{m.id}"


def models_of(spec: dict) -> dict[str, str]:
    """The operator's catalogued models a stored config names (``catalog:<id>``) -> their
    folders under the storage root, handed to the job's workers."""
    from services.catalog import CATALOG_PREFIX
    from services.jobkinds import RootPath

    return {m["path"]: RootPath(f"{CATALOG_PREFIX}/{m['path'].removeprefix('catalog:')}")
            for m in spec.get("models") or [] if _LOCATION.fullmatch(m.get("path") or "")
            and m["path"].startswith("catalog:")}


def prepare(s: Session, tenant_id: str, spec: EvaluationSpec) -> tuple[EvaluationSpec, list[str]]:
    """In the admission transaction: each reference checked and replaced by its location,
    every key an attack's settings mark ``Credential`` checked (the canary key: one of the
    tenant's enabled hmac keys, 422 at its field otherwise); returns the spec the job runs
    and its keystore key ids."""
    from attacks.config import marked_in, set_at
    from attacks.job import locations
    from privatize.policy import Credential
    from services.specs import check_key_reference

    data = spec.to_dict()
    for field, placeholder in locations(data):
        set_at(data, field, _location(s, tenant_id, field, placeholder))
    key_ids: list[str] = []
    for path, ref, m in marked_in(spec.to_dict(), (Credential,)):  # the canary key, section or entry
        key_id, why = check_key_reference(s, tenant_id, ref, m.kinds)
        if why is not None:
            raise config_invalid([(path, why)])
        if key_id not in key_ids:
            key_ids.append(key_id)
    return EvaluationSpec(type(spec.config).model_validate(data)), key_ids


def inputs_of(spec: dict) -> set[str]:
    """Ids of the trainings, privatization jobs and corpora a stored config reads."""
    from attacks.job import locations

    return {m.group(1) or m.group(2) for _, loc in locations(spec) if (m := _LOCATION.match(loc))}


def training_ids(spec: dict) -> list[str]:
    """The training each model of a stored config is, in order."""
    out = []
    for m in spec.get("models") or []:
        hit = _LOCATION.match(m.get("path", ""))
        out.append(hit.group(1) if hit and m["path"].startswith("jobs/") else None)
    return out


# ---- results ------------------------------------------------------------------------------

def _finite(v):
    """JSON-safe figures: an overflowing perplexity becomes None."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def summary_counts(evaluation: dict) -> dict | None:
    """The row's counts: per model, what ``privatize attack`` prints (perplexity, max
    exposure, best MIA AUC, extracted), from ``evaluation.json``'s content."""
    from attacks.cli import summary
    from attacks.results import from_dict

    try:
        ev = from_dict(evaluation)
        return _finite({"models": summary(ev, "")["models"]})
    except (TypeError, KeyError, AttributeError, ValueError):
        return None


def read_results(storage, output_path: str) -> dict | None:
    try:
        data = json.loads(storage.read_bytes(f"{output_path}/{EVALUATION}"))
    except (OSError, ValueError):
        return None
    return summary_counts(data) if isinstance(data, dict) else None


def summary_of(job: Job) -> dict | None:
    """A succeeded evaluation's summary, each model with its training id."""
    if job.status != "succeeded" or not job.counts:
        return None
    ids = dict(zip((m.get("name") for m in job.spec.get("models", [])), training_ids(job.spec)))
    return {"models": [{**m, "training_id": ids.get(m.get("name"))} for m in job.counts.get("models", [])]}


# ---- lookups and files ----------------------------------------------------------------------

def result_rel(ctx, job: Job, name: str) -> str:
    """Storage path of a succeeded evaluation's ``report.html`` or ``evaluation.json``;
    Conflict before it has succeeded."""
    if job.status != "succeeded":
        raise Conflict(f"evaluation {job.id} is {job.status}; its report exists once it has succeeded")
    rel = f"{job.output_path}/{name}"
    if not ctx.storage.exists(rel):
        raise NotFound(f"evaluation {job.id} has no {name} (deleted?)")
    return rel


# ---- the evaluate job kind ----------------------------------------------------------------

REPORT_HEADERS = {"Content-Security-Policy": "default-src 'none'; img-src data:; style-src 'unsafe-inline'",
                  "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
"""The report is a page of the API's origin: it may show its inline CSS and embedded
plots, nothing else, and is not kept by caches (it says what a model leaks)."""


class EvaluationOut(KindOut):
    training_ids: list[str | None] = Field(description="the training each model is, in the config's order")
    summary: dict | None = Field(description="once it succeeded: per model, its training, perplexity, "
                                             "max_exposure, mia_auc (the best score's AUC), extracted")


@register_job_kind
class EvaluateKind(JobKind):
    """Attacks on some of the tenant's succeeded trainings (``attacks.job``), one report:
    ``/v1/evaluations``, its report and the JSON behind it."""

    name = EVALUATE
    module = "attacks.job"
    noun = "evaluation"
    resource = "evaluations"
    result_file = EVALUATION
    Out = EvaluationOut
    downloads = (("report", REPORT), ("report.json", EVALUATION))
    config_help = ("an evaluation config (attacks.config.AttackConfig) as JSON, without locations: models name "
                   "trainings (training_id), data sources corpora or privatization jobs ({\"corpus_id\": ...}, "
                   "{\"job_id\": ...}), the canary key is keystore:<id>")

    def validate(self, data) -> EvaluationSpec:
        return validate_config(data)

    def config_model(self):
        """The evaluation config for the attacks registered now (plugins' too)."""
        from attacks.config import config_model

        return config_model()

    def config_schema(self, schema: dict, resolve) -> dict:
        return service_schema(schema, resolve)

    def limits(self, settings, spec: EvaluationSpec) -> None:
        check_limits(settings, spec)

    def prepare(self, session, tenant_id: str, corpus, spec: EvaluationSpec):
        return prepare(session, tenant_id, spec)

    def read_results(self, storage, output_path: str) -> dict | None:
        return read_results(storage, output_path)

    def inputs(self, spec: dict) -> set[str]:
        return inputs_of(spec)

    def models(self, spec: dict) -> dict[str, str]:
        return models_of(spec)

    def audit_detail(self, job) -> dict:
        return {"training_ids": training_ids(job.spec)}

    def out(self, ctx, job, live: bool = True) -> EvaluationOut:
        return EvaluationOut(**{**EvaluationOut.fields_of(job), "summary": summary_of(job)},
                             training_ids=training_ids(job.spec))

    def routes(self, router) -> None:
        from fastapi import Depends
        from fastapi.responses import StreamingResponse

        from services import audit
        from services.dependencies import current_tenant, fresh_job_of, get_ctx

        def result_file(request, ctx, tenant_id: str, job_id: str, name: str, media: str):
            audit.note(request, file=name)
            rel = result_rel(ctx, fresh_job_of(self, ctx, tenant_id, job_id), name)
            headers = dict(REPORT_HEADERS)
            size = ctx.storage.size(rel)
            if size is not None:
                headers["Content-Length"] = str(size)
            return StreamingResponse(ctx.storage.open_chunks(rel), media_type=media, headers=headers)

        def evaluation_report(job_id: str, request: Request, tenant=Depends(current_tenant), ctx=Depends(get_ctx)):
            """The privacy report (one HTML page, plots embedded); 409 until the evaluation has
            succeeded. Each read is audited (``evaluation.report``)."""
            return result_file(request, ctx, tenant.id, job_id, REPORT, "text/html; charset=utf-8")

        def evaluation_report_json(job_id: str, request: Request, tenant=Depends(current_tenant),
                                   ctx=Depends(get_ctx)):
            """The results behind the report (``evaluation.json``: ``attacks.results.Evaluation``);
            409 until the evaluation has succeeded. Each read is audited (``evaluation.report``)."""
            return result_file(request, ctx, tenant.id, job_id, EVALUATION, "application/json")

        for path, fn, media, what in (("report", evaluation_report, "text/html", "the self-contained HTML report"),
                                      ("report.json", evaluation_report_json, "application/json",
                                       EVALUATION)):
            audit.register_action(fn.__name__, "evaluation.report", "job", read=True)
            router.add_api_route(f"/v1/evaluations/{{job_id}}/{path}", fn, methods=["GET"],
                                 response_class=StreamingResponse,
                                 responses={200: {"content": {media: {}}, "description": what}})
