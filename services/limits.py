"""What a tenant's privatization spec may ask of the cluster: the service's quotas
(``PRIVATIZE_PIPELINE_*``), checked when a job is created, after the spec validated
(whose models bound every number absolutely) and before anything is stored or
submitted. Beyond a quota: ``SpecInvalid`` (422) naming every field path, the value
asked for and the service's limit.

* ``stages``: at most ``pipeline_max_stages`` stages;
* ``output.num_shards``: at most ``pipeline_max_shards``;
* every settings field marked ``privatize.policy.Quota`` or ``AllowList`` (the stages declare
  them; nothing here names a stage kind): today ``dedup``'s ``bloom_capacity`` (the Bloom
  filters its ``bloom_memory_bytes()`` needs, at most ``pipeline_max_bloom_bytes`` for the
  whole job), ``redact``'s ``batch_size`` (``pipeline_max_redact_batch_size``) and
  ``synthesize``'s ``llm.base_url`` (one of ``llm_base_urls``).

Trainings and evaluations declare theirs the same way, on the fields of ``train.config`` and
``attacks.config`` (``PRIVATIZE_TRAIN_*``, ``PRIVATIZE_EVAL_*``): :func:`field_quotas`, called
by ``services.trainings.check_limits`` and ``services.evaluations.check_limits``;
the number of jobs a tenant runs at once is the tenant's ``max_concurrent_jobs``
(checked at admission, 429).
"""

from __future__ import annotations

from privatize.policy import AllowList, Quota, marked_values
from services.errors import SpecInvalid

GiB = 1 << 30


def _size(n: int) -> str:
    return f"{n / GiB:.3g} GiB" if n >= GiB else f"{n / (1 << 20):.3g} MiB"


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def quota_refusal(settings, value, m: Quota, holder) -> str | None:
    """Why ``value`` of a field marked ``m`` (a :class:`~privatize.policy.Quota` without a
    ``measure``) in ``holder`` (the settings model holding it) is beyond the service's
    quota, or None: above the setting ``m.setting`` (a list by its length), or below what
    ``m.least`` says the holder needs."""
    if value is None or not m.applies(holder):
        return None
    n = len(value) if isinstance(value, (list, tuple, dict)) else value
    limit = getattr(settings, m.setting)
    if n > limit:
        return f"at most {_num(limit)} on this service (asked for {_num(n)})"
    if m.least is not None:
        need = getattr(holder, m.least)()
        if n < need:
            return f"at least {_num(need)} on this service (asked for {_num(n)}): {m.least_why.format(need=need)}"
    return None


def field_quotas(settings, model, prefix: str = "") -> list[tuple[str, str]]:
    """(field path, message) for every field of a validated settings model (a training or
    an evaluation config), at any depth, marked :class:`~privatize.policy.Quota` and beyond
    the service's quota: the quotas are declared on the fields, so no kind or section is
    named here."""
    errors = []
    for path, value, m, holder in marked_values(model, (Quota,)):
        message = quota_refusal(settings, value, m, holder) if m.measure is None else None
        if message:
            errors.append((prefix + ".".join(path), message))
    return errors


def pipeline_limits(settings, spec) -> list[tuple[str, str]]:
    """(field path, message) for every number of ``spec`` (a validated
    ``privatize.spec.PipelineSpec``) beyond the service's quotas."""
    s = settings
    errors: list[tuple[str, str]] = []
    if len(spec.stages) > s.pipeline_max_stages:
        errors.append(("stages", f"at most {s.pipeline_max_stages} stages on this service "
                                 f"(asked for {len(spec.stages)})"))
    if spec.output.num_shards > s.pipeline_max_shards:
        errors.append(("output.num_shards", f"at most {s.pipeline_max_shards} on this service "
                                            f"(asked for {spec.output.num_shards})"))
    totals: dict[str, list] = {}
    fields: list[tuple[str, str]] = []
    for i, st in enumerate(spec.stages):
        for path, value, m, holder in marked_values(st, (Quota, AllowList)):
            where, limit = f"stages.{i}.{'.'.join(path)}", getattr(s, m.setting)
            if isinstance(m, AllowList):
                if value.rstrip("/") not in limit:
                    fields.append((where, m.refused.format(allowed=", ".join(limit)) if limit else m.none))
            elif m.measure is None:
                message = quota_refusal(s, value, m, holder)
                if message:
                    fields.append((where, message))
            else:
                need = getattr(holder, m.measure)()
                if need > 0:
                    totals.setdefault(m.setting, []).append((where, holder, m, need))
    for setting, asks in totals.items():
        limit, total = getattr(s, setting), sum(n for *_, n in asks)
        if (total if asks[0][2].total else max(n for *_, n in asks)) > limit:
            for where, holder, m, need in asks:
                job = f" ({_size(total)} for the job)" if m.total and len(asks) > 1 else ""
                errors.append((where, f"{m.asked.format(**dict(holder))} needs {_size(need)} of {m.what}{job}; at "
                                      f"most {_size(limit)} on this service: {m.hint}"))
    errors += fields
    return errors


def check_pipeline_limits(settings, spec) -> None:
    """SpecInvalid (422) naming every field of ``spec`` beyond the service's quotas."""
    errors = pipeline_limits(settings, spec)
    if errors:
        raise SpecInvalid("; ".join(f"{p}: {m}" for p, m in errors),
                          errors=[{"path": p, "loc": ["body", "spec", *p.split(".")], "message": m}
                                  for p, m in errors])
