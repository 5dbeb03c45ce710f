"""Pipeline specs submitted by tenants: validated by ``privatize.spec.parse_spec`` (422
with field paths), then checked for what a tenant may reference: no ``file:`` keys,
and only ``keystore:`` keys of its own that are enabled and of a kind the field takes
(what its settings class declares: ``privatize.settings.KeyKinds``). Settings that name
a file on the server (a word list, a filler model) are refused before the spec is parsed,
so a tenant cannot probe the server's file system through validation errors. Which fields
those are is declared on the fields (``privatize.policy``); nothing here names a stage kind.

Also the ``privatize`` job kind (:class:`PrivatizeKind`, ``/v1/privatizations``) and its
results: the manifest and the shards it lists (``.../{id}/results``, under ``/v1/jobs`` too)."""

from __future__ import annotations

import json

from pydantic import Field
from sqlalchemy.orm import Session

from privatize.errors import SpecError
from privatize.policy import MODEL_NAME, Credential, ModelName, ServerPath, marked, marked_values
from privatize.spec import InputSettings, PipelineSpec, parse_spec
from privatize.spec import key_references as spec_key_references
from privatize.spec import key_requirements
from privatize.refs import DETECTOR_REF, MODEL_REF
from services import jobs as jobs_mod
from services.context import ServiceContext
from services.errors import Conflict, NotFound, SpecInvalid
from privatize.output import MANIFEST
from services.jobkinds import ADAPT, PRIVATIZE, JobKind, KindOut, job_kind, register_job_kind
from services.limits import check_pipeline_limits
from services.models import Job, Key


def _structured_errors(exc: SpecError) -> list[dict]:
    """Field paths of a failed spec, from the error ``parse_spec`` raised (no second
    validation): pydantic's locations, and the stage-order check's ``stages.<i>``."""
    fields = getattr(exc, "field_errors", None)
    if fields is None:
        return [{"path": "", "loc": ["body", "spec"], "message": str(exc)}]
    return [{"path": ".".join(loc), "loc": ["body", "spec", *loc], "message": msg} for loc, msg in fields]


def _stage_settings(st) -> type | None:
    from privatize.stages import registered_kinds

    return registered_kinds().get(st.get("kind"), (None,))[0] if isinstance(st, dict) else None


def _server_files(data: dict) -> list[dict]:
    """The tenant policy its settings declare on their fields (``privatize.policy``), on the raw
    spec: a credential reference other than ``keystore:``, a field naming a file on the server
    (a ``training:<id>`` is one of the tenant's models where the field takes it: checked by
    :func:`check_model_references`), a model named by a path where the field takes a name or a
    reference (``ModelName``: an installed model's name, ``detector:<id>``)."""
    stages = data.get("stages")
    errors = []
    for i, st in enumerate(stages if isinstance(stages, list) else []):
        cls = _stage_settings(st)
        if cls is None:
            continue  # an unknown kind: parse_spec names it
        for path, value, m in marked(st, cls, (Credential, ServerPath, ModelName)):
            where = f"stages.{i}.{st['kind']}.{'.'.join(path)}"
            if isinstance(m, Credential):
                if isinstance(value, str) and not value.startswith("keystore:"):
                    errors.append({"path": where, "loc": ["body", "spec", *where.split(".")],
                                   "message": "the service takes keystore:<id> of one of your api-key keys (POST "
                                              "/v1/keys with kind api-key and its material), never env: or file:"})
            elif isinstance(m, ModelName):
                if value is not None and not (isinstance(value, str) and model_name_taken(value, m)):
                    errors.append({"path": where, "loc": ["body", "spec", *where.split(".")], "message": m.why})
            elif value is not None and not (m.model_ref and isinstance(value, str) and MODEL_REF.fullmatch(value)):
                errors.append({"path": where, "loc": ["body", "spec", *where.split(".")], "message": m.why})
    return errors


def validate_spec(data) -> PipelineSpec:
    if not isinstance(data, dict):
        raise SpecInvalid("spec: must be a JSON object with 'stages'",
                          errors=[{"path": "", "loc": ["body", "spec"], "message": "must be a JSON object"}])
    errors = _server_files(data)
    if errors:
        raise SpecInvalid("; ".join(f"{e['path']}: {e['message']}" for e in errors), errors=errors)
    try:
        return parse_spec(data)
    except SpecError as exc:
        raise SpecInvalid(str(exc), errors=_structured_errors(exc)) from None


def key_references(spec: PipelineSpec) -> list[tuple[str, str]]:
    """(field path, reference) for every key reference in the spec, at any depth
    (``privatize.spec.key_references``), sorted by path."""
    return sorted(spec_key_references(spec))


def check_key_references(s: Session, tenant_id: str, spec: PipelineSpec) -> list[str]:
    """Keystore ids the spec uses; SpecInvalid (with the field path) for a ``file:``
    reference or a key that is not this tenant's, disabled, destroyed, or of a kind the
    field does not take."""
    errors, ids = [], []
    for path, ref, kinds in sorted(key_requirements(spec)):
        key_id, why = check_key_reference(s, tenant_id, ref, kinds)
        if why is not None:
            errors.append((path, why))
        elif key_id not in ids:
            ids.append(key_id)
    if errors:
        raise SpecInvalid("; ".join(f"{p}: {m}" for p, m in errors),
                          errors=[{"path": p, "loc": ["body", "spec", *p.split(".")], "message": m}
                                  for p, m in errors])
    return ids


def check_key_reference(s: Session, tenant_id: str, ref: str, kinds: tuple[str, ...] | None
                        ) -> tuple[str | None, str | None]:
    """(key id, None) for a ``keystore:`` reference to one of the tenant's enabled keys of
    one of ``kinds`` (any kind when None); (None, why) otherwise."""
    scheme, _, rest = ref.partition(":")
    if scheme == "file":
        return None, ("file: key references are not accepted by the service; create a key with "
                      "POST /v1/keys and name it keystore:<id>")
    if scheme != "keystore":
        return None, "a key reference is keystore:<id>"
    row = s.get(Key, rest)
    if row is None or row.tenant_id != tenant_id:
        return None, f"no key {rest!r}"
    if row.status != "enabled":
        return None, f"key {rest} is {row.status}"
    if kinds is not None and row.kind not in kinds:
        return None, f"key {rest} is a {row.kind} key; this field takes {' or '.join(kinds)} keys"
    return rest, None


def model_name_taken(value: str, m: ModelName) -> bool:
    """Whether the service takes ``value`` for a field marked ``m``: an installed model's name
    (no path separator) or a reference of one of its schemes (``detector:<id>``)."""
    return bool(MODEL_NAME.fullmatch(value) or ("detector" in m.refs and DETECTOR_REF.fullmatch(value)))


def model_references(spec: dict) -> dict[str, str]:
    """``{field path: training id}`` for every model a stored spec names by reference (a
    field marked ``ServerPath(model_ref=True)`` holding ``training:<id>``: a ``refill``
    stage's ``checkpoint``)."""
    out = {}
    for i, st in enumerate(spec.get("stages") or []):
        cls = _stage_settings(st)
        for path, value, m in marked(st, cls, (ServerPath,)) if cls is not None else ():
            ref = MODEL_REF.fullmatch(value) if m.model_ref and isinstance(value, str) else None
            if ref:
                out[f"stages.{i}.{st['kind']}.{'.'.join(path)}"] = ref.group(1)
    return out


def detector_references(spec: dict) -> dict[str, str]:
    """``{field path: detector job id}`` for every detector a stored spec names by reference
    (a field marked ``ModelName`` holding ``detector:<id>``: a redact stage's ``model``)."""
    out = {}
    for i, st in enumerate(spec.get("stages") or []):
        cls = _stage_settings(st)
        for path, value, m in marked(st, cls, (ModelName,)) if cls is not None else ():
            ref = DETECTOR_REF.fullmatch(value) if isinstance(value, str) else None
            if ref:
                out[f"stages.{i}.{st['kind']}.{'.'.join(path)}"] = ref.group(1)
    return out


def check_model_references(s: Session, tenant_id: str, spec: PipelineSpec) -> None:
    """Each ``training:<id>`` a spec names is one of the tenant's trainings (404 as for an
    id that does not exist), has succeeded (409) and is of kind ``mlm`` (422), at its
    field; each ``detector:<id>`` is one of the tenant's detector jobs (404) that has
    succeeded (409)."""
    from services.jobkinds import TRAIN
    from services.jobs import succeeded_job
    from train.kinds import train_kinds, train_kind

    d = spec.to_dict()
    for path, tid in model_references(d).items():
        j = succeeded_job(s, TRAIN, tenant_id, tid, path, "a filler is a training that has succeeded")
        kind = (j.spec or {}).get("kind")
        if kind not in train_kinds() or not train_kind(kind).masked_lm:
            raise SpecInvalid(f"{path}: training {tid} is of kind {(j.spec or {}).get('kind')}; a filler is a "
                              "masked LM (kind mlm)",
                              errors=[{"path": path, "loc": ["body", "spec", *path.split(".")],
                                       "message": f"training {tid} is not of kind mlm"}])
    for path, did in detector_references(d).items():
        succeeded_job(s, ADAPT, tenant_id, did, path, "a redact stage uses a detector that has succeeded")


def for_service(spec: PipelineSpec) -> PipelineSpec:
    """The spec as a service job runs it: fields marked ``ServerPath(cleared=True)`` are
    cleared (a ``synthesize`` stage keeps no answers on disk: ``cache: null``; a node's disk
    is no tenant's, and a shared cache would answer one tenant from another's requests)."""
    def cleared(st):
        names = [path[0] for path, _, m, _ in marked_values(st, (ServerPath,)) if m.cleared and len(path) == 1]
        return st.model_copy(update={n: None for n in names}) if names else st

    stages = [cleared(st) for st in spec.stages]
    if all(a is b for a, b in zip(stages, spec.stages)):
        return spec
    return spec.model_copy(update={"stages": stages})


def with_input_format(spec: PipelineSpec, corpus_format: str) -> PipelineSpec:
    """The spec the job runs: ``input.format`` fixed to the corpus's format."""
    fmt = spec.input.format
    if fmt not in ("auto", corpus_format):
        raise SpecInvalid(f"input.format: the corpus is {corpus_format}, the spec says {fmt}",
                          errors=[{"path": "input.format", "loc": ["body", "spec", "input", "format"],
                                   "message": f"the corpus is {corpus_format}"}])
    if fmt == corpus_format:
        return spec
    # the rest of the spec is validated already: only the changed part is checked again
    inp = InputSettings.model_validate({**spec.input.model_dump(), "format": corpus_format})
    return spec.model_copy(update={"input": inp})


# ---- the privatize job kind -------------------------------------------------------------

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


def results(ctx: ServiceContext, tenant_id: str, job_id: str) -> tuple[Job, dict]:
    """The job and its manifest; Conflict while the job has no output."""
    job = jobs_mod.fresh_job(ctx, tenant_id, job_id)
    if job.kind != PRIVATIZE:
        jk = job_kind(job.kind)
        where = "".join(f" (its {file}: GET /v1/{jk.resource}/{job_id}/{path})" for path, file in jk.downloads[:1])
        raise NotFound(f"job {job_id} is a {job.kind} job: it has no manifest or shards{where}")
    if job.status != "succeeded":
        raise Conflict(f"job {job_id} is {job.status}; results exist once it has succeeded")
    manifest = read_manifest(ctx.storage, job.output_path)
    if manifest is None:
        raise NotFound(f"job {job_id} has no output (deleted?)")
    return job, manifest


def result_files(manifest: dict, manifest_bytes: int | None) -> list[dict]:
    files = [{"name": MANIFEST, "bytes": manifest_bytes}]
    for sh in manifest.get("shards", []):
        files.append({"name": sh["file"], "bytes": sh.get("bytes"), "rows": sh.get("rows"),
                      "sha256": sh.get("sha256")})
    return files


def results_listing(ctx: ServiceContext, tenant_id: str, job_id: str) -> dict:
    """What ``GET .../{id}/results`` answers: the manifest's counts and every file served."""
    job, manifest = results(ctx, tenant_id, job_id)
    size = ctx.storage.size(f"{job.output_path}/{MANIFEST}")
    return {"job_id": job.id, "counts": manifest.get("counts", {}), "spec_sha256": manifest.get("spec_sha256"),
            "files": result_files(manifest, size)}


def result_response(ctx: ServiceContext, tenant_id: str, job_id: str, name: str):
    """``GET .../{id}/results/{name}``: the manifest or one shard it lists, streamed."""
    from fastapi.responses import StreamingResponse

    rel = result_path(ctx, tenant_id, job_id, name)
    size = ctx.storage.size(rel)
    media = "application/json" if name.endswith(".json") else "application/vnd.apache.parquet"
    headers = {"Content-Disposition": f'attachment; filename="{name.rsplit("/", 1)[-1]}"'}
    if size is not None:
        headers["Content-Length"] = str(size)
    return StreamingResponse(ctx.storage.open_chunks(rel), media_type=media, headers=headers)


def result_path(ctx: ServiceContext, tenant_id: str, job_id: str, name: str) -> str:
    """Storage path of a downloadable result: the manifest or a shard it lists. Nothing
    else (the quarantine least of all) is ever served."""
    job, manifest = results(ctx, tenant_id, job_id)
    if name == MANIFEST or name in {sh["file"] for sh in manifest.get("shards", [])}:
        return f"{job.output_path}/{name}"
    raise NotFound(f"job {job_id} has no result {name!r}")



class PrivatizationOut(KindOut):
    progress: dict = Field(description="the corpus's records; while it runs what it reports (records read, "
                                       "per stage records in and out, percent, ETA); once it ended its counts")


@register_job_kind
class PrivatizeKind(JobKind):
    """A pipeline spec (a ``privatize.spec.PipelineSpec``, keys as ``keystore:<id>``) run on
    a corpus by ``privatize.job``: ``/v1/privatizations``, its manifest and shards under
    ``/results`` (``POST /v1/jobs`` creates one too, with the spec as ``spec``)."""

    name = PRIVATIZE
    module = "privatize.job"
    noun = "privatization"
    resource = "privatizations"
    result_file = MANIFEST
    Out = PrivatizationOut
    listing = "results"
    config_help = "a pipeline spec (version, stages, output...); keys as keystore:<id>"

    def validate(self, data) -> PipelineSpec:
        return validate_spec(data)

    def config_model(self) -> type[PipelineSpec]:
        return PipelineSpec  # POST /v1/jobs's spec (services.routes.jobs.JobCreate)

    def limits(self, settings, spec: PipelineSpec) -> None:
        check_pipeline_limits(settings, spec)

    def prepare(self, session, tenant_id: str, corpus, spec: PipelineSpec):
        """Only the tenant's own enabled ``keystore:`` keys (an LLM API key among them);
        ``input.format`` fixed to the corpus's format; synthesis without a disk cache."""
        key_ids = check_key_references(session, tenant_id, spec)
        check_model_references(session, tenant_id, spec)
        return for_service(with_input_format(spec, corpus.format)), key_ids

    def read_results(self, storage, output_path: str) -> dict | None:
        manifest = read_manifest(storage, output_path)
        return None if manifest is None else manifest_counts(manifest)

    def also_reads(self, spec: dict) -> set[str]:
        return set(model_references(spec).values()) | set(detector_references(spec).values())

    def out(self, ctx, job, live: bool = True) -> PrivatizationOut:
        running = self.live_progress(ctx, job) if live and job.status == "running" else None
        return PrivatizationOut(**PrivatizationOut.fields_of(job),
                                progress=jobs_mod.job_progress(job, jobs_mod.corpus_records(ctx, job), running))

    def routes(self, router) -> None:
        from fastapi import Depends

        from services.dependencies import current_tenant, get_ctx

        def results_of(job_id: str, tenant=Depends(current_tenant), ctx=Depends(get_ctx)):
            """The manifest's counts and every file it serves (409 until it succeeded)."""
            self._own(ctx, tenant.id, job_id)
            return results_listing(ctx, tenant.id, job_id)

        def result_of(job_id: str, name: str, tenant=Depends(current_tenant), ctx=Depends(get_ctx)):
            """The manifest or one shard it lists, streamed. The quarantine is never served."""
            self._own(ctx, tenant.id, job_id)
            return result_response(ctx, tenant.id, job_id, name)

        router.add_api_route(f"/v1/{self.resource}/{{job_id}}/results", results_of, methods=["GET"])
        router.add_api_route(f"/v1/{self.resource}/{{job_id}}/results/{{name:path}}", result_of, methods=["GET"])

    def _own(self, ctx, tenant_id: str, job_id: str) -> None:
        from services.db import session_scope

        with session_scope(ctx.sessions) as s:
            jobs_mod.job_of_kind(s, self, tenant_id, job_id)  # "no privatization ..." for another kind's

    def live_progress(self, ctx, job) -> dict | None:
        """The figures ``privatize.job`` keeps beside its output while it runs
        (:mod:`privatize.progress`: records through every stage, per stage records in and out)."""
        from privatize.job import progress_location

        return ctx.cached_progress(job.id, lambda: _read_json(ctx.storage, progress_location(job.output_path)))

    def models(self, spec: dict) -> dict[str, str]:
        out = {f"training:{t}": f"jobs/{t}/output/model" for t in model_references(spec).values()}
        out.update({f"detector:{d}": f"jobs/{d}/output/detector" for d in detector_references(spec).values()})
        return out


def _read_json(storage, rel: str) -> dict | None:
    try:
        got = json.loads(storage.read_bytes(rel))
    except (OSError, ValueError):  # not written yet, or gone
        return None
    return got if isinstance(got, dict) else None
