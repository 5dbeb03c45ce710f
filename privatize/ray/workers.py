"""What runs in Ray workers for each stage: set-up stages cached per process and run,
the callables Ray Data maps over blocks, and the per-batch counts they report.

Objects shipped here hold stage *settings* and key *references* only: keys are resolved
in ``setup()`` on the worker, the pseudonym key in the task that writes a shard.

Counts and timings of each stage batch travel *with the rows*, as a :class:`BatchInfo`
(typed) carried by one marked row appended to the block (:func:`with_info`; a ``_drop``
reason of :data:`INFO`, so no stage sees it): a retried task never counts twice and
nothing is gathered on the side. The final pass (:mod:`privatize.ray.final`) takes them
off with :func:`take_infos` into the run's :class:`~privatize.output.Tally`. (Ray Data
gives a map no side output; a tally actor would cost a worker process per run, about 4%
of a one-core run.)
"""

from __future__ import annotations

import collections
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from privatize import allocator
from privatize.execution import (DSTAGE, READ_STAGE, UniqueIds, apply_global_batch, concat, key_rows, marked_mask,
                                 run_stage_batch, split_by_mask)
from privatize.keys import KeyResolver
from privatize.routing import Router
from privatize.settings import declared_key_kinds
from privatize.stage import DROP, Stage, StageContext
from privatize.stages import build_stage

INFO = "\x00privatize-info"
"""The ``_drop`` reason of an info row."""
INFO_STAGE = -1000
"""The ``_dstage`` of an info row: no stage dropped it."""

_LOCAL: dict[Any, Any] = {}  # per worker process: set-up stages, resolved pseudonym key, by run
_RUNS: collections.OrderedDict = collections.OrderedDict()  # the runs _LOCAL holds entries for
_MAX_RUNS = 2
_LOOKUPS: collections.OrderedDict = collections.OrderedDict()  # decisions, by object id
_MAX_LOOKUPS = 2


def _local(run: str, key: tuple, make):
    """``make()``, once per process and run. A worker process keeps what it set up (stages
    holding key-derived state, the pseudonym key) for the two runs it saw last, so a task
    worker shared by the runs of one cluster does not keep a finished run's keys."""
    allocator.tune()
    _RUNS[run] = True
    _RUNS.move_to_end(run)
    if len(_RUNS) > _MAX_RUNS:
        _RUNS.popitem(last=False)
        for k in [k for k in _LOCAL if k[0] not in _RUNS]:
            del _LOCAL[k]
    value = _LOCAL.get((run, *key))
    if value is None:
        value = make()
        _LOCAL[(run, *key)] = value
    return value


@dataclass(frozen=True)
class StageRef:
    """What a worker needs to build stage ``index``: its settings (``None``: the built-in
    :class:`~privatize.execution.UniqueIds`), the folder key paths resolve against, and
    the run's random id (set-up stages are cached per process and run)."""

    settings: Any
    base_dir: str | None
    index: int
    run: str = ""

    @property
    def kind(self) -> str:
        return UniqueIds.kind if self.settings is None else self.settings.kind

    def build(self) -> Stage:
        if self.settings is None:
            return UniqueIds()
        return build_stage(self.settings, StageContext(base_dir=self.base_dir, run=self.run or None))

    def _cache_key(self) -> tuple:
        body = None if self.settings is None else self.settings.model_dump_json()
        return ("stage", self.index, body, self.base_dir)


def ready_stage(ref: StageRef) -> Stage:
    """The stage of ``ref``, set up once in this process for its run."""

    def make() -> Stage:
        stage = ref.build()
        stage.setup()
        return stage

    return _local(ref.run, ref._cache_key(), make)


def _marked_count(batch: pa.Table) -> int:
    m = marked_mask(batch)
    return 0 if m is None else int(pc.sum(pc.cast(m, pa.int64())).as_py() or 0)


@dataclass
class BatchInfo:
    """The counts of one batch of one stage (``stage`` -1: one read piece)."""

    stage: int
    records_in: int = 0
    records_out: int = 0
    seconds: float = 0.0
    key_ids: dict[str, str] = field(default_factory=dict)


def _info_table(info: BatchInfo) -> pa.Table:
    return pa.table({"doc_id": pa.array([""], pa.string()),
                     "text": pa.array([json.dumps(asdict(info), sort_keys=True)], pa.string()),
                     "_src": pa.array([-1], pa.int32()), "_line": pa.array([-1], pa.int64()),
                     "_seg": pa.array([-1], pa.int32()), DROP: pa.array([INFO], pa.string()),
                     DSTAGE: pa.array([INFO_STAGE], pa.int32())})


def with_info(out: pa.Table | None, info: BatchInfo) -> pa.Table:
    """``out`` with ``info`` appended (last, so the next stage slices it off, no copy)."""
    return _info_table(info) if out is None else concat([out, _info_table(info)])


def take_infos(batch: pa.Table) -> tuple[pa.Table, list[BatchInfo]]:
    """(the batch's rows, the infos its stages appended)."""
    if DROP not in batch.column_names:
        return batch, []
    is_info = np.asarray(pc.fill_null(pc.equal(batch[DROP], INFO), False))
    rows, info = split_by_mask(batch, pa.array(is_info))
    infos = [BatchInfo(**json.loads(t)) for t in info["text"].to_pylist()] if info is not None else []
    return rows, infos


class _StageCall:
    """A callable Ray Data maps over blocks for one stage. As an actor class the stage is
    set up in the constructor (``eager``); as a task callable, on first use in each
    process."""

    def __init__(self, ref: StageRef, eager: bool = False):
        self.ref = ref
        self.__name__ = type(self).__name__
        if eager:
            ready_stage(ref)


def _stage_info(ref: StageRef, stage: Stage, live_in: int, out: pa.Table, t0: float) -> pa.Table:
    """``out`` with the info row of one batch of stage ``ref`` appended."""
    return with_info(out, BatchInfo(ref.index, live_in, out.num_rows - _marked_count(out),
                                    time.perf_counter() - t0, stage.key_ids()))


class StageUDF(_StageCall):
    """``run_stage_batch`` over one batch, plus its info row."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        stage = ready_stage(self.ref)
        t0 = time.perf_counter()
        live_in = batch.num_rows - _marked_count(batch)
        if not live_in:
            return batch  # nothing for this stage: no info row, or batches of one row multiply
        return _stage_info(self.ref, stage, live_in, run_stage_batch(stage, self.ref.index, batch), t0)


class KeysUDF(_StageCall):
    """The keyed rows of a GlobalStage (``doc_id``, ``key``, order columns, ``_part``)."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        return key_rows(ready_stage(self.ref), batch)


def _router(ref) -> Router:
    """The run's router for one GlobalStage (an ObjectRef), fetched once per process."""
    import ray

    key = ref.hex()
    router = _LOOKUPS.get(key)
    if router is None:
        router = ray.get(ref)
        _LOOKUPS[key] = router
        while len(_LOOKUPS) > _MAX_LOOKUPS:
            _LOOKUPS.popitem(last=False)
    else:
        _LOOKUPS.move_to_end(key)
    return router


class ApplyUDF(_StageCall):
    """``apply`` with the decisions for one batch, plus its info row. ``decisions`` is a
    one-element list holding the ObjectRef of the stage's :class:`~privatize.routing.Router`."""

    def __init__(self, ref: StageRef, decisions: list, eager: bool = False):
        self.decisions = decisions
        super().__init__(ref, eager)

    def __call__(self, batch: pa.Table) -> pa.Table:
        stage = ready_stage(self.ref)
        t0 = time.perf_counter()
        live_in = batch.num_rows - _marked_count(batch)
        if not live_in:
            return batch
        out = apply_global_batch(stage, self.ref.index, batch, _router(self.decisions[0]))
        if self.ref.index == READ_STAGE:
            return out  # UniqueIds: part of reading, no manifest entry of its own
        return _stage_info(self.ref, stage, live_in, out, t0)


def stage_key_ids(ref: StageRef) -> dict:
    return ready_stage(ref).key_ids()


def pseudonym_key(ref: str | None, base_dir: str | None, run: str) -> tuple[bytes | None, str | None]:
    if not ref:
        return None, None
    from privatize.spec import OutputSettings

    kinds = declared_key_kinds(OutputSettings, "pseudonym_key")
    km = _local(run, ("pseudonym", ref, base_dir), lambda: KeyResolver(base_dir=base_dir).resolve(ref, expect=kinds))
    return km.secret, km.key_id


def pseudonym_key_id(ref: str, base_dir: str | None, run: str) -> str | None:
    return pseudonym_key(ref, base_dir, run)[1]

