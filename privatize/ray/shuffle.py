"""A GlobalStage on Ray, in one pass of Ray core tasks (Ray Data's repartition and
sort-based group-by moved every keyed row twice more):

1. per block, the keyed rows split by hash partition group (:func:`split_by_group`);
2. per group, its rows put in the global order once and ``decide`` called per hash
   partition (:func:`decide_group`), the decisions routed to their rows
   (:func:`privatize.execution.decide_partition`);
3. one task gathers them into the stage's :class:`~privatize.routing.Router`
   (:func:`collect_decisions`), which every apply worker fetches once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from privatize import allocator
from privatize.execution import concat, decide_broadcast, decide_columns, decide_partition, key_rows, no_decisions
from privatize.ray import cluster
from privatize.ray.workers import StageRef, ready_stage
from privatize.routing import Broadcast, Router, packed_order
from privatize.stage import NUM_PARTITIONS, ORDER_COLUMNS


@dataclass
class Decided:
    """What one decide task returns: the routed decisions of its hash partitions, which
    partitions it decided, and the seconds spent."""

    tables: list = field(default_factory=list)
    """Routed decision tables; a broadcast stage's: (partition, table, statistics)."""
    parts: list[int] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class DecisionStats:
    decisions: int
    seconds: float
    stats: dict = field(default_factory=dict)
    """A broadcast stage's decision statistics (added to the stage's in the manifest)."""


def split_by_group(block: pa.Table, groups: int, ref: StageRef | None, by_part: bool,
                   bounds: tuple[int, int] | None):
    """Keyed rows of one block (``ref``: rows of one block, keyed here by that stage) ->
    ``groups`` tables (hash partition ``p`` goes to group ``p % groups``; ``by_part``: each
    sorted by partition, for a broadcast stage's decide task), then the seconds spent
    keying."""
    allocator.tune()
    t0 = time.perf_counter()
    block = cluster.in_bounds(block, bounds)
    if ref is not None:
        block = key_rows(ready_stage(ref), block)
    # what decide needs, the partition as one byte (NUM_PARTITIONS <= 256)
    part = block["_part"].to_numpy().astype(np.uint8)
    block = block.select(decide_columns(block)).append_column("_part", pa.array(part))
    g = part % groups
    if not by_part:  # each group's rows in the block's order (the global order)
        return (*[block.filter(pa.array(g == i)) for i in range(groups)], time.perf_counter() - t0)
    # one sort by (group, partition): each group a slice, sorted by partition within
    order = np.argsort(g.astype(np.uint16) << 8 | part, kind="stable")
    block = block.take(pa.array(order))
    cuts = np.searchsorted(g[order], np.arange(groups + 1))
    return (*[block.slice(int(cuts[i]), int(cuts[i + 1] - cuts[i])) for i in range(groups)],
            time.perf_counter() - t0)


def decide_group(ref: StageRef, *pieces: pa.Table) -> Decided:
    """Every keyed row of the hash partitions of one group -> ``decide`` per partition,
    routed (a broadcast stage's: :func:`_decide_sets`). The rows are put in the global
    order once, by their packed order columns (sorting each partition by three columns
    cost more than deciding it)."""
    allocator.tune()
    t0 = time.perf_counter()
    rows = [p for p in pieces if p.num_rows]
    if not rows:
        return Decided(seconds=time.perf_counter() - t0)
    stage = ready_stage(ref)
    if stage.broadcast:
        return _decide_sets(stage, rows, t0)
    keyed = concat(rows)
    part = keyed["_part"].to_numpy().astype(np.uint8)  # a stable sort of bytes is a radix sort
    keyed = keyed.select(decide_columns(keyed))
    packed = packed_order(keyed)
    # the global order (then by partition, keeping that order within each); where the
    # order columns do not pack, each partition is sorted on its own below
    in_order = packed is None or (packed[1:] >= packed[:-1]).all()
    order = np.arange(len(part)) if in_order else np.argsort(packed, kind="stable")
    order = order[np.argsort(part[order], kind="stable")]
    keyed = pa.table({c: keyed[c].take(pa.array(order)) for c in keyed.column_names})
    part = part[order]
    packed = None if packed is None else packed[order]
    cuts = np.flatnonzero(np.diff(part)) + 1
    out = Decided(parts=sorted(int(p) for p in np.unique(part)))
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(part)]):
        group = keyed.slice(a, b - a)
        if packed is None:
            group = group.sort_by([(c, "ascending") for c in ORDER_COLUMNS])
        out.tables.append(decide_partition(stage, group, None if packed is None else packed[a:b]))
    out.seconds = time.perf_counter() - t0
    return out


def _decide_sets(stage, pieces: list[pa.Table], t0: float) -> Decided:
    """A broadcast stage's decide task: one hash partition at a time, its rows cut from
    every piece (each sorted by partition in :func:`split_by_group`) and joined, so that
    the task holds the pieces as the object store gives them and one partition's copy,
    not a copy of the whole group (a quarter of every keyed row at 2 CPUs)."""
    parts = [p["_part"].to_numpy() for p in pieces]
    for i, p in enumerate(parts):
        if len(p) > 1 and not (p[1:] >= p[:-1]).all():  # not cut by split_by_group: sort it here
            order = np.argsort(p, kind="stable")
            pieces[i], parts[i] = pieces[i].take(pa.array(order)), p[order]
    present = sorted({int(x) for x in np.unique(np.concatenate(parts))})
    out = Decided(parts=present)
    bounds = [np.searchsorted(p, np.arange(NUM_PARTITIONS + 1)) for p in parts]
    for q in present:
        slices = [piece.slice(int(b[q]), int(b[q + 1] - b[q])) for piece, b in zip(pieces, bounds) if b[q + 1] > b[q]]
        out.tables.append(decide_broadcast(stage, q, concat(slices)))
    out.seconds = time.perf_counter() - t0
    return out


def collect_decisions(ref: StageRef, groups: int, *results) -> tuple[Router, DecisionStats]:
    """Every decide task's :class:`Decided` (the first ``groups`` results) and every split
    task's seconds (the rest) -> the stage's router and the count and seconds for the
    manifest. Runs as a task: the plan after the stage is built and running (a redaction
    pool loading its models) while the keys are decided."""
    allocator.tune()
    t0 = time.perf_counter()
    decided: list[Decided] = list(results[:groups])
    parts_done = [p for d in decided for p in d.parts]
    if len(set(parts_done)) != len(parts_done):
        raise RuntimeError(f"stage {ref.kind}: a hash partition was decided in pieces")
    if type(ref.build()).broadcast:
        router = Broadcast([t for d in decided for t in d.tables])
    else:
        router = Router([t for d in decided for t in d.tables], lambda: no_decisions(ready_stage(ref)))
    seconds = sum(d.seconds for d in decided) + sum(results[groups:]) + time.perf_counter() - t0
    return router, DecisionStats(router.num_decisions, seconds, getattr(router, "stats", {}))


def decide_groups(ds, ref: StageRef, groups: int, task_cpus: float, keyed_by: StageRef | None, guard=None):
    """Keyed rows to ``groups`` decide tasks, gathered by one collect task: returns the
    ObjectRefs (router, stats). ``keyed_by``: ``ds`` holds the rows, keyed by that stage in
    the split tasks; None: ``ds`` holds keyed rows."""
    pieces = cluster.block_pieces(ds, split_by_group, groups + 1, task_cpus, groups, keyed_by,
                                  type(ref.build()).broadcast, guard=guard)
    decide = cluster.task(decide_group, num_cpus=task_cpus)
    decided = [decide.remote(ref, *[p[g] for p in pieces]) for g in range(groups)]
    collect = cluster.task(collect_decisions, num_returns=2, num_cpus=task_cpus)
    return collect.remote(ref, groups, *decided, *[p[groups] for p in pieces])
