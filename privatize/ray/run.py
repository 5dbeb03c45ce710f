"""A privatization run on Ray Data: the plan, and the run function.

::

    read (one task per file, or per byte range; see privatize.ray.reads)
      -> UniqueIds (built in, as in-process)          } a GlobalStage: keys -> split by
      -> stage 0 -> stage 1 -> ...                     } group -> decide -> apply
      -> final pass -> one task writes each shard      (privatize.ray.final)

A stage with a heavy setup (a spaCy model) runs in an actor pool, set up once per actor;
any other as tasks, set up once per worker process and run, which Ray Data fuses with the
task stages around them.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from privatize.options import RunOptions
from privatize.execution import READ_STAGE
from privatize.output import OutputWriter, Tally, build_manifest, check_strict, quarantine_path, write_quarantine
from privatize.progress import RunProgress
from privatize.ray import cluster
from privatize.ray.cluster import Budget, StallGuard
from privatize.ray.final import FinalPass, ShardWriter, finish, write_shards
from privatize.ray.reads import input_datasource, plan_reads
from privatize.ray.shuffle import decide_groups
from privatize.ray.workers import (ApplyUDF, KeysUDF, StageRef, StageUDF, pseudonym_key_id, stage_key_ids)
from privatize.records import InputFile
from privatize.spec import PipelineSpec
from privatize.stage import NUM_PARTITIONS, GlobalStage, add_stats

log = logging.getLogger(__name__)


def _named(cls: type, name: str) -> type:
    """A subclass named after the stage, so Ray's progress bars say which stage runs."""
    safe = "".join(c if c.isalnum() else "_" for c in name)
    return type(safe, (cls,), {"__qualname__": safe, "__module__": cls.__module__})


class Plan:
    """Builds the Ray Data plan stage by stage. Stages see whole blocks: the reader cut
    them at ``batch_size`` records, so a stage sees the batches the in-process runner's
    would, and an expanding stage (split: a document -> hundreds of segments) does not
    multiply the number of calls after it (1024-row batches after split: 0.36x
    in-process on dedup)."""

    def __init__(self, budget: Budget, guard: StallGuard):
        self.budget = budget
        self.guard = guard
        self.keep: list = []  # object refs the plan needs until the end
        self.blocks: int | None = None  # blocks of the last materialized dataset (maps keep the count)

    def _map(self, ds, cls: type, ref: StageRef, actor: bool, **kw):
        named = _named(cls, f"{ref.index}_{ref.kind}" if ref.index >= 0 else ref.kind)
        if actor:
            fn, extra = named, {"fn_constructor_kwargs": {"ref": ref, "eager": True, **kw}}
        else:
            fn, extra = named(ref, **kw), {}
        return cluster.map_batches(ds, fn, batch_size=None, batch_format="pyarrow", **extra,
                                   **self.budget.map_args(actor, self.blocks))

    def stage(self, ds, ref: StageRef, actor: bool):
        return self._map(ds, StageUDF, ref, actor)

    def global_stage(self, ds, ref: StageRef, actor: bool, overlap: bool) -> tuple[Any, Any]:
        """Materialize the rows, start the keys and decisions, and return (the applying
        dataset, the ObjectRef of the decisions' count and seconds). With ``overlap`` the
        driver does not wait for the decisions, so the plan after the stage starts at
        once: its actor pools load their models meanwhile. Without, it waits: apply tasks
        blocked on the decisions give up their CPU, and Ray starts more worker processes
        to use it (three in a 1 GB cipher-only run, 1.5 s of imports each)."""
        import ray

        ds = ds.materialize()
        self.blocks = ds.num_blocks()
        self.guard.tick()
        groups = min(NUM_PARTITIONS, max(2, int(2 * self.budget.cpus)))
        if actor:  # keys from the stage's actors, then split
            keyed = self._map(ds, KeysUDF, ref, actor)
            router, stats = decide_groups(keyed, ref, groups, self.budget.task_cpus, None, self.guard)
        else:  # each block keyed and split in one task: the keyed rows are stored once
            router, stats = decide_groups(ds, ref, groups, self.budget.task_cpus, ref, self.guard)
        self.keep.append(router)
        if not overlap:
            ray.wait([stats], num_returns=1, timeout=None, fetch_local=False)
            self.guard.tick()
        return self._map(ds, ApplyUDF, ref, actor, decisions=[router]), stats


def _plan(ds, refs: list[StageRef], protos: list, plan: Plan, spec_dir: str | None, run: str):
    """The stages after reading; returns (the final dataset, each GlobalStage's stats ref)."""
    # while a GlobalStage decides, a later actor pool starts (see Plan.global_stage)
    pools_after = [any(p.heavy_setup for p in protos[i:]) for i in range(len(protos) + 1)]
    ds, _ = plan.global_stage(ds, StageRef(None, spec_dir, READ_STAGE, run), actor=False, overlap=pools_after[0])
    decided: list = [None] * len(protos)
    for ref, proto in zip(refs, protos):
        if isinstance(proto, GlobalStage):
            ds, decided[ref.index] = plan.global_stage(ds, ref, actor=proto.heavy_setup,
                                                       overlap=pools_after[ref.index + 1])
        else:
            ds = plan.stage(ds, ref, actor=proto.heavy_setup)
    return ds, decided


def _key_ids(tally: Tally, refs: list[StageRef], protos: list, spec: PipelineSpec, spec_dir, run, budget):
    """Key ids of stages no live row reached (asked of a worker), and of the pseudonym key
    when no shard was written."""
    for ref, proto in zip(refs, protos):  # a stage that saw rows reported its key ids with them
        if tally.stages[ref.index].records_in == 0 and proto.needs_setup:
            ids = cluster.get(cluster.task(stage_key_ids, num_cpus=budget.task_cpus).remote(ref))
            tally.key_ids.update({f"stages.{ref.index}.{name}": kid for name, kid in ids.items()})
    if spec.output.pseudonym_key and "output.pseudonym_key" not in tally.key_ids:
        task = cluster.task(pseudonym_key_id, num_cpus=budget.task_cpus)
        tally.key_ids["output.pseudonym_key"] = cluster.get(task.remote(spec.output.pseudonym_key, spec_dir, run))


def _start_ledgers(protos: list) -> list:
    """A spending ledger actor for each budgeted stage (synthesis: ``max_requests``,
    ``max_tokens``), owned by this driver so that it lives as long as the run: the stage's
    workers, on every node, draw on it (:mod:`privatize.synthesis.client`)."""
    from privatize.synthesis.client import start_run_ledger

    return [start_run_ledger(*b) for b in (p.budget() for p in protos) if b is not None]


def _execute(spec: PipelineSpec, files: list[InputFile], writer: OutputWriter, spec_dir: str | None,
             opts: RunOptions, guard: StallGuard) -> dict:
    import ray
    import ray.data
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    run = uuid.uuid4().hex  # names this run's set-up stages in worker processes; not a secret
    refs = [StageRef(s, spec_dir, i, run) for i, s in enumerate(spec.stages)]
    protos = [r.build() for r in refs]  # settings only: never set up on the driver
    ledgers = _start_ledgers(protos)  # held (the driver owns them) until the run ends
    budget = Budget.for_cluster(sum(1 for s in protos if s.heavy_setup))
    driver_node = ray.get_runtime_context().get_node_id()
    scheduling = {"scheduling_strategy": NodeAffinitySchedulingStrategy(driver_node, soft=False)} \
        if opts.reads_on_driver_node else {}
    log.info("ray runner: %d input file(s), %d node(s), %.1f CPU(s), tasks %.2f CPU, actors %.2f CPU (max %d "
             "per stage)", len(files), budget.nodes, budget.cpus, budget.task_cpus, budget.actor_cpus,
             budget.max_actors)
    per_line = spec.input.text_unit == "line"
    pieces = plan_reads(files, text_per_line=per_line, scheduling=scheduling, guard=guard,
                        largest_range=opts.read_range_bytes, slots=budget.slots, task_cpus=budget.task_cpus,
                        window=max(1, int(budget.cpus / budget.task_cpus)))
    plan = Plan(budget, guard)
    ds = ray.data.read_datasource(input_datasource(pieces, opts.batch_size, per_line,
                                                   on_driver_node=opts.reads_on_driver_node),
                                  num_cpus=budget.task_cpus, override_num_blocks=len(pieces))
    ds, decided = _plan(ds, refs, protos, plan, spec_dir, run)
    shard_writer = ShardWriter(spec.output, spec_dir, run, driver_node=driver_node,
                               paths=[str(writer.shard_path(i)) for i in range(spec.output.num_shards)])
    figures = RunProgress([p.kind for p in protos], opts.on_progress) if opts.on_progress else None
    tally, qrows, shards = finish(write_shards(ds, FinalPass(len(protos), spec.output.num_shards), shard_writer,
                                               budget.task_cpus, guard, figures), writer, spec.output, len(protos))
    if figures is not None:
        figures.close()
    stage_names = {READ_STAGE: "read", **{i: p.kind for i, p in enumerate(protos)}}
    if opts.strict and qrows is not None:
        check_strict(qrows, stage_names, [f.name for f in files])
    for i, ref in enumerate(decided):  # a GlobalStage's seconds: keys and decisions, then apply
        if ref is not None:
            stats = cluster.get(ref, guard)
            tally.stages[i].seconds += stats.seconds
            add_stats(tally.stages[i].stats, stats.stats)
            log.info("stage %d %s: %d decision(s), %.2fs on keys and decisions", i, protos[i].kind,
                     stats.decisions, stats.seconds)
    _key_ids(tally, refs, protos, spec, spec_dir, run, budget)
    if qrows is None:
        qrows = pa.table({"doc_id": pa.array([], pa.string())})
    nq = write_quarantine(qrows, quarantine_path(writer.output_dir), stage_names)
    for h in ledgers:  # (on an error, the handles going out of scope end them)
        ray.kill(h)
    return build_manifest(spec, tally, [p.kind for p in protos], shards=shards,
                          quarantine=str(quarantine_path(writer.output_dir)) if nq else None,
                          quarantine_records=nq, files=[f.path for f in files], runner="ray")


def run_ray(spec: PipelineSpec, files: list[InputFile], output_dir: Path, *, spec_dir: str | None,
            address: str | None, options: RunOptions) -> dict:
    """Run ``spec`` on the listed input ``files`` into ``output_dir`` with Ray Data;
    returns the manifest. The shards are byte-identical to the in-process runner's. Call
    it through :func:`privatize.run`, which checks first."""
    import ray

    t_start = time.perf_counter()
    writer = OutputWriter(Path(output_dir), spec.output.num_shards, overwrite=options.overwrite)
    connected = False
    ctx = saved = guard = None
    try:
        connected = cluster.connect(address, num_cpus=options.num_cpus,
                                    object_store_memory=options.object_store_memory)
        import ray.data

        ctx = ray.data.DataContext.get_current()
        saved = ctx.enable_progress_bars, ctx.shuffle_strategy, ctx.raise_original_map_exception
        ctx.enable_progress_bars = options.progress in (True, "bar")  # Ray Data's own bars
        # a stage's own error, not Ray Data's UserCodeException: that one is raised "from"
        # the error, and the cause is lost on its way to the driver when the stage runs in
        # an actor (a synthesis budget spent, an LLM that failed for good)
        ctx.raise_original_map_exception = True
        # The sort-based shuffle runs plain tasks: Ray 2.60's default hash shuffle starts
        # aggregator actors for every group-by, seconds of fixed cost each
        ctx.shuffle_strategy = "sort_shuffle_pull_based"
        with StallGuard(options.stall_timeout_s) as guard:
            try:
                manifest = _execute(spec, files, writer, spec_dir, options, guard)
            except BaseException as exc:
                guard.check(exc)
                raise
        manifest["seconds"] = round(time.perf_counter() - t_start, 3)
        writer.commit(manifest)
    except BaseException as exc:
        writer.abort()
        if guard is not None:
            guard.check(exc)  # the guard's interrupt, wherever it landed: RunStalled
        err = cluster.find_privatize_error(exc)
        if err is not None and err is not exc:
            # a stage's or reader's error, as raised in the worker: one line, exit code 2
            raise type(err)(cluster.message(err)) from None
        raise
    finally:
        if ctx is not None and saved is not None:
            ctx.enable_progress_bars, ctx.shuffle_strategy, ctx.raise_original_map_exception = saved
        if connected:
            ray.shutdown()
    return manifest
