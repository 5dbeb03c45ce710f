"""The in-process runner: reads the input, runs every stage over Arrow batches in this
process, and writes the deterministic output (``privatize.run(..., runner="local")``).
Tests, the CLI's local mode and small corpora use it; the Ray runner calls the same
stage methods through ``privatize.execution``.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import pyarrow as pa

from privatize import allocator
from privatize.options import RunOptions
from privatize.execution import (READ_STAGE, UniqueIds, concat, finish_stage_output, run_global_stage,
                                 run_stage_batch, split_marked)
from privatize.keys import KeyResolver
from privatize.output import (OutputWriter, Tally, build_manifest, check_strict, prepare_output, quarantine_path,
                              write_quarantine)
from privatize.records import InputFile, read_inputs
from privatize.settings import declared_key_kinds
from privatize.spec import PipelineSpec
from privatize.stage import GlobalStage, Stage, StageContext
from privatize.stages import build_stage

log = logging.getLogger(__name__)


def build_stages(spec: PipelineSpec, base_dir: str | None) -> list[Stage]:
    ctx = StageContext(base_dir=base_dir, run=uuid.uuid4().hex)
    return [build_stage(s, ctx) for s in spec.stages]


def resolve_pseudonym_key(spec: PipelineSpec, base_dir: str | None) -> tuple[bytes | None, str | None]:
    if not spec.output.pseudonym_key:
        return None, None
    km = KeyResolver(base_dir=base_dir).resolve(spec.output.pseudonym_key,
                                                expect=declared_key_kinds(spec.output, "pseudonym_key"))
    return km.secret, km.key_id


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="batch", disable=not enabled, leave=False)


def _live(batches: list[pa.Table]) -> int:
    return sum(split_marked(b)[0].num_rows for b in batches)


def _run_stages(stages: list[Stage], batches: list[pa.Table], tally: Tally, progress: bool) -> list[pa.Table]:
    for i, stage in enumerate(stages):
        ts = time.perf_counter()
        live_in = _live(batches)
        if isinstance(stage, GlobalStage):
            batches = run_global_stage(stage, i, batches, tally.stages[i].stats)
        else:
            with _progress(len(batches), f"{i}:{stage.kind}", progress) as bar:
                out = []
                for b in batches:
                    out.append(run_stage_batch(stage, i, b))
                    bar.update(1)
                batches = out
        live_out = _live(batches)
        tally.add_timing(i, live_in, live_out, time.perf_counter() - ts)
        log.info("stage %d %s: %d -> %d records in %.2fs", i, stage.kind, live_in, live_out,
                 tally.stages[i].seconds)
    return batches


def run_local(spec: PipelineSpec, files: list[InputFile], output_dir: Path, *, spec_dir: str | None,
              options: RunOptions) -> dict:
    """Run ``spec`` on the listed input ``files`` into ``output_dir`` in this process;
    returns the manifest. Call it through :func:`privatize.run`, which checks first."""
    allocator.tune()
    t0 = time.perf_counter()
    stages = build_stages(spec, spec_dir)
    stage_names = {READ_STAGE: "read", **{i: s.kind for i, s in enumerate(stages)}}
    writer = OutputWriter(Path(output_dir), spec.output.num_shards, overwrite=options.overwrite)
    try:
        pseudonym_key, pseudonym_key_id = resolve_pseudonym_key(spec, spec_dir)
        for s in stages:
            s.setup()
        batches = [finish_stage_output(b, READ_STAGE)
                   for b in read_inputs(files, options.batch_size, text_per_line=spec.input.text_unit == "line")]
        batches = run_global_stage(UniqueIds(), READ_STAGE, batches)
        tally = Tally(len(stages), input_records=sum(b.num_rows for b in batches))
        batches = _run_stages(stages, batches, tally, options.progress)
        for i, s in enumerate(stages):
            tally.key_ids.update({f"stages.{i}.{name}": kid for name, kid in s.key_ids().items()})
        if pseudonym_key_id:
            tally.key_ids["output.pseudonym_key"] = pseudonym_key_id
        rows = concat(batches) if batches else None
        out, quarantined, _ = tally.add_final_rows(rows)
        if options.strict:
            check_strict(quarantined, stage_names, [f.name for f in files])
        shards = writer.write_shards(prepare_output(out, meta_keys=spec.output.meta_keys,
                                                    pseudonym_key=pseudonym_key))
        qpath = quarantine_path(writer.output_dir)
        nq = write_quarantine(quarantined, qpath, stage_names)
        manifest = build_manifest(spec, tally, [s.kind for s in stages], shards=shards,
                                  quarantine=str(qpath) if nq else None, quarantine_records=nq,
                                  files=[f.path for f in files], runner="in-process")
        manifest["seconds"] = round(time.perf_counter() - t0, 3)
        writer.commit(manifest)
    except BaseException:
        writer.abort()
        raise
    return manifest
