"""What a tenant's privatization spec may ask of the cluster: the service's quotas
(``PRIVATIZE_PIPELINE_*``), checked when a job is created, after the spec validated
(whose models bound every number absolutely) and before anything is stored or
submitted. Beyond a quota: ``SpecInvalid`` (422) naming every field path, the value
asked for and the service's limit.

* ``stages``: at most ``pipeline_max_stages`` stages;
* ``output.num_shards``: at most ``pipeline_max_shards``;
* ``stages.<i>.bloom_capacity``: the Bloom filters of the spec's ``dedup`` stages
  (``method: bloom``), sized from ``bloom_capacity`` and ``bloom_fp_rate``
  (``DedupSettings.bloom_memory_bytes``), at most ``pipeline_max_bloom_bytes`` in all;
* ``stages.<i>.batch_size`` of a ``redact`` stage: at most ``pipeline_max_redact_batch_size``;
* ``stages.<i>.llm.base_url`` of a ``synthesize`` stage: one of ``llm_base_urls``.

The quotas of trainings are ``services.trainings.check_limits`` (``PRIVATIZE_TRAIN_*``);
the number of jobs a tenant runs at once is the tenant's ``max_concurrent_jobs``
(checked at admission, 429).
"""

from __future__ import annotations

from services.errors import SpecInvalid

GiB = 1 << 30


def _size(n: int) -> str:
    return f"{n / GiB:.3g} GiB" if n >= GiB else f"{n / (1 << 20):.3g} MiB"


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
    blooms = [(i, st, st.bloom_memory_bytes()) for i, st in enumerate(spec.stages)
              if st.kind == "dedup" and st.bloom_memory_bytes() > 0]
    total = sum(b for _, _, b in blooms)
    if total > s.pipeline_max_bloom_bytes:
        for i, st, b in blooms:
            errors.append((f"stages.{i}.bloom_capacity",
                           f"bloom_capacity {st.bloom_capacity} at bloom_fp_rate {st.bloom_fp_rate:g} needs "
                           f"{_size(b)} of Bloom filters{f' ({_size(total)} for the job)' if len(blooms) > 1 else ''}; "
                           "at most "
                           f"{_size(s.pipeline_max_bloom_bytes)} on this service: lower bloom_capacity, raise "
                           "bloom_fp_rate or use method sha1"))
    for i, st in enumerate(spec.stages):
        if st.kind == "redact" and st.batch_size > s.pipeline_max_redact_batch_size:
            errors.append((f"stages.{i}.batch_size", f"at most {s.pipeline_max_redact_batch_size} on this "
                                                     f"service (asked for {st.batch_size})"))
        if st.kind == "synthesize":
            allowed = s.llm_base_url_list
            if st.llm.base_url.rstrip("/") not in allowed:
                errors.append((f"stages.{i}.llm.base_url",
                               f"not an LLM endpoint of this service (it calls {', '.join(allowed)})" if allowed
                               else "this service calls no LLM endpoint (its operator lists them in "
                                    "PRIVATIZE_LLM_BASE_URLS)"))
    return errors


def check_pipeline_limits(settings, spec) -> None:
    """SpecInvalid (422) naming every field of ``spec`` beyond the service's quotas."""
    errors = pipeline_limits(settings, spec)
    if errors:
        raise SpecInvalid("; ".join(f"{p}: {m}" for p, m in errors),
                          errors=[{"path": p, "loc": ["body", "spec", *p.split(".")], "message": m}
                                  for p, m in errors])
