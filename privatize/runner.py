"""The in-process runner: reads the input, runs every stage over Arrow batches in this
process, and writes the deterministic output. Tests, the CLI's local mode and small
corpora use it; the Ray runner calls the same stage methods through
``privatize.execution``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from privatize import allocator
from privatize.errors import RecordError
from privatize.execution import (READ_STAGE, UniqueIds, concat, finish_stage_output, run_global_stage,
                                 run_stage_batch, split_marked)
from privatize.keys import KeyResolver
from privatize.output import (OutputWriter, manifest_skeleton, prepare_output, quarantine_path, split_final_rows,
                              stage_stats, write_quarantine)
from privatize.records import list_inputs, read_inputs
from privatize.spec import PipelineSpec
from privatize.stage import GlobalStage, Stage, StageContext, build_stage

log = logging.getLogger(__name__)


@dataclass
class RunOptions:
    batch_size: int = 1024
    strict: bool = False
    overwrite: bool = False
    progress: bool = False


def build_stages(spec: PipelineSpec, base_dir: str | None) -> list[Stage]:
    ctx = StageContext(base_dir=base_dir)
    return [build_stage(s, ctx) for s in spec.stages]


def resolve_pseudonym_key(spec: PipelineSpec, base_dir: str | None) -> tuple[bytes | None, str | None]:
    if not spec.output.pseudonym_key:
        return None, None
    km = KeyResolver(base_dir=base_dir).resolve(spec.output.pseudonym_key)
    return km.secret, km.key_id


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="batch", disable=not enabled, leave=False)


def check_strict(rows: pa.Table, stage_names: dict[int, str], files: list[str]) -> None:
    _, q, _ = split_final_rows(rows)
    if q.num_rows:
        r = q.slice(0, 1).to_pylist()[0]
        where = f"{files[r['_src']]}:{r['_line']}" if 0 <= r["_src"] < len(files) else f"line {r['_line']}"
        raise RecordError(f"{where}: {r['_quarantine']} (record {r['doc_id']!r}, stage "
                          f"{stage_names.get(r.get('_qstage', READ_STAGE), '?')}) "
                          f"[--strict; {q.num_rows} record(s) in all]")


def run_pipeline(spec: PipelineSpec, input_path: str | Path, output_dir: str | Path, *,
                 spec_dir: str | None = None, options: RunOptions | None = None, **kw) -> dict:
    """Run ``spec`` on ``input_path`` into ``output_dir``; returns the manifest."""
    opts = options or RunOptions(**kw)
    allocator.tune()
    t0 = time.perf_counter()
    files = list_inputs(input_path, spec.input.format)
    stages = build_stages(spec, spec_dir)
    stage_names = {READ_STAGE: "read", **{i: s.kind for i, s in enumerate(stages)}}
    writer = OutputWriter(Path(output_dir), spec.output.num_shards, overwrite=opts.overwrite)
    try:
        pseudonym_key, pseudonym_key_id = resolve_pseudonym_key(spec, spec_dir)
        for s in stages:
            s.setup()
        batches = [finish_stage_output(b, READ_STAGE)
                   for b in read_inputs(files, opts.batch_size, text_per_line=spec.input.text_unit == "line")]
        batches = run_global_stage(UniqueIds(), READ_STAGE, batches)
        input_records = sum(b.num_rows for b in batches)
        timings = []
        for i, stage in enumerate(stages):
            ts = time.perf_counter()
            live_in = sum(split_marked(b)[0].num_rows for b in batches)
            if isinstance(stage, GlobalStage):
                batches = run_global_stage(stage, i, batches)
            else:
                with _progress(len(batches), f"{i}:{stage.kind}", opts.progress) as bar:
                    out = []
                    for b in batches:
                        out.append(run_stage_batch(stage, i, b))
                        bar.update(1)
                    batches = out
            live_out = sum(split_marked(b)[0].num_rows for b in batches)
            timings.append({"records_in": live_in, "records_out": live_out,
                            "seconds": round(time.perf_counter() - ts, 4)})
            log.info("stage %d %s: %d -> %d records in %.2fs", i, stage.kind, live_in, live_out,
                     timings[-1]["seconds"])
        rows = concat(batches) if batches else None
        if opts.strict:
            check_strict(rows, stage_names, [f.name for f in files])
        manifest = finish_output(spec, writer, rows, stages, stage_names, input_records, timings,
                                 pseudonym_key, pseudonym_key_id, files=[f.path for f in files], runner="in-process")
        manifest["seconds"] = round(time.perf_counter() - t0, 3)
        writer.commit(manifest)
    except BaseException:
        writer.abort()
        raise
    return manifest


def finish_output(spec: PipelineSpec, writer: OutputWriter, rows: pa.Table, stages: list[Stage],
                  stage_names: dict[int, str], input_records: int, timings: list[dict],
                  pseudonym_key: bytes | None, pseudonym_key_id: str | None, *, files: list[str],
                  runner: str) -> dict:
    """Split final rows into output / quarantine / dropped, write shards and the
    quarantine, and build the manifest (without committing it)."""
    out, quarantined, dropped = split_final_rows(rows)
    table = prepare_output(out, meta_keys=spec.output.meta_keys, pseudonym_key=pseudonym_key)
    shards = writer.write_shards(table)
    qpath = quarantine_path(writer.output_dir)
    nq = write_quarantine(quarantined, qpath, stage_names)
    per_stage = stage_stats(rows, len(stages))
    key_ids = {}
    for i, s in enumerate(stages):
        for name, kid in s.key_ids().items():
            key_ids[f"stages.{i}.{name}"] = kid
    if pseudonym_key_id:
        key_ids["output.pseudonym_key"] = pseudonym_key_id
    return build_manifest(spec, [s.kind for s in stages], per_stage, timings, key_ids,
                          input_records=input_records, output_records=table.num_rows,
                          quarantined=quarantined.num_rows, dropped=dropped.num_rows, shards=shards,
                          quarantine=str(qpath) if nq else None, quarantine_records=nq, files=files,
                          runner=runner)


def build_manifest(spec: PipelineSpec, kinds: list[str], per_stage: dict[int, dict], timings: list[dict],
                   key_ids: dict[str, str], *, input_records: int, output_records: int, quarantined: int,
                   dropped: int, shards: list[dict], quarantine: str | None, quarantine_records: int,
                   files: list[str], runner: str) -> dict:
    """The manifest (without ``seconds``) from what a runner counted; every runner builds
    it here, so the fields agree."""
    stage_entries = []
    for i, kind in enumerate(kinds):
        st = per_stage[i]
        entry = {"index": i, "kind": kind, **timings[i], "quarantined": st["quarantined"],
                 "dropped": st["dropped"], "stats": st["stats"]}
        expanded = entry["stats"].get("expanded", 0)
        entry["reconciled"] = entry["records_in"] + expanded == entry["records_out"] + st["quarantined"] + st["dropped"]
        stage_entries.append(entry)
    manifest = manifest_skeleton(spec.to_dict(), spec.sha256())
    manifest.update({
        "runner": runner,
        "inputs": files,
        "counts": {"input_records": input_records, "read_quarantined": per_stage[READ_STAGE]["quarantined"],
                   "output_records": output_records, "quarantined": quarantined, "dropped": dropped},
        "stages": stage_entries,
        "key_ids": key_ids,
        "shards": shards,
        "quarantine": {"path": quarantine, "records": quarantine_records},
    })
    return manifest
