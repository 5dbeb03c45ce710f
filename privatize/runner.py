"""The in-process runner: reads the input, runs every stage over Arrow batches in this
process, and writes the deterministic output (``privatize.run(..., runner="local")``).
Tests, the CLI's local mode and small corpora use it; the Ray runner calls the same
stage methods through ``privatize.execution``.
"""

from __future__ import annotations

import logging
import sys
import threading
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
from privatize.progress import RunProgress
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


class StageProgress:
    """Progress of one stage over its ``total`` records, on ``stream`` (stderr): with
    ``mode="bar"`` a tqdm bar (records, records/s, ETA; redrawn every second, so the elapsed
    time moves while a long batch runs), with ``mode="lines"`` a line every ``every`` seconds
    and one when the stage ends (for a log, where a bar's redraws are noise), with ``None``
    nothing. Records count as done batch by batch (a stage runs one batch at once), a global
    stage's all at its end. A context manager; :meth:`update` adds finished records."""

    def __init__(self, label: str, total: int, mode: str | None, every: float = 10.0, stream=None):
        self.label, self.total, self.mode, self.every = label, total, mode, every
        self.stream = stream or sys.stderr
        self.done, self.t0 = 0, time.monotonic()
        self.bar = None
        self._stop, self._lock = threading.Event(), threading.Lock()
        self._thread = None
        if mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit=" records", leave=False,
                            dynamic_ncols=True, file=self.stream)
        if mode in ("bar", "lines"):
            self._thread = threading.Thread(target=self._tick, name=f"progress {label}", daemon=True)
            self._thread.start()

    def line(self) -> str:
        """``stage 1 redact: 512/1000 records (51%), 25.3 records/s, ETA 19 s, 20 s elapsed``."""
        el = time.monotonic() - self.t0
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        s = f"{self.label}: {self.done}/{self.total} records{pct}"
        if self.done and el > 0:
            rate = self.done / el
            s += f", {rate:.1f} records/s"
            if self.done < self.total:
                s += f", ETA {(self.total - self.done) / rate:.0f} s"
        return s + f", {el:.0f} s elapsed"

    def _say(self, text: str) -> None:
        with self._lock:
            print(f"privatize: {text}", file=self.stream, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(1.0 if self.bar is not None else self.every):
            if self.bar is not None:
                self.bar.refresh()
            else:
                self._say(self.line())

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)

    def __enter__(self) -> "StageProgress":
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.bar is not None:
            self.bar.close()
        if self.mode == "lines" and exc[0] is None:
            self._say(self.line().replace(" records (100%)", " records done"))


def _progress_mode(progress: bool | str) -> str | None:
    return {True: "bar", "bar": "bar", "lines": "lines"}.get(progress)


def _rebatch(batches: list[pa.Table], size: int) -> list[pa.Table]:
    """``batches`` cut to at most ``size`` rows each (zero-copy slices, same order): a stage
    that makes many records of one (``split``: a document to its sentences) would otherwise
    hand the next stage one large batch, and its progress would move once, at the end."""
    return [b.slice(o, size) for b in batches for o in range(0, max(b.num_rows, 1), size)]


def _live(batches: list[pa.Table]) -> int:
    return sum(split_marked(b)[0].num_rows for b in batches)


def _run_stages(stages: list[Stage], batches: list[pa.Table], tally: Tally, options: RunOptions,
                figures: RunProgress) -> list[pa.Table]:
    mode = _progress_mode(options.progress)
    n = len(stages)
    for i, stage in enumerate(stages):
        ts = time.perf_counter()
        live_in = _live(batches)
        with StageProgress(f"stage {i} {stage.kind}", live_in, mode, options.progress_every) as bar:
            if isinstance(stage, GlobalStage):
                batches = run_global_stage(stage, i, batches, tally.stages[i].stats)
                bar.update(live_in)
            else:
                out, done, given = [], 0, 0
                for b in _rebatch(batches, options.batch_size):
                    out.append(run_stage_batch(stage, i, b))
                    k = split_marked(b)[0].num_rows
                    bar.update(k)
                    done, given = done + k, given + split_marked(out[-1])[0].num_rows
                    figures.set_stage(i, done, given, (i + done / max(1, live_in)) / n)
                batches = out
        live_out = _live(batches)
        figures.set_stage(i, live_in, live_out, (i + 1) / n)
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
        figures = RunProgress([s.kind for s in stages], options.on_progress, total=tally.input_records)
        batches = _run_stages(stages, batches, tally, options, figures)
        figures.close()
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
