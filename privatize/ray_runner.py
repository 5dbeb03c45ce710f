"""The Ray Data runner: the same stages, the same output, on a Ray cluster.

A :class:`~privatize.spec.PipelineSpec` becomes a Ray Data plan::

    read (one task per file, or per byte range of a large JSONL / text file)
      -> UniqueIds (built in, as in-process)          } a GlobalStage: keys -> group by
      -> stage 0 -> stage 1 -> ...                     } ``_part`` -> decide -> apply
      -> final rows -> hash-partition by shard -> one task writes each shard

Every stage runs through :mod:`privatize.execution` (``run_stage_batch``, ``key_rows``,
``decide_partition``, ``apply_global_batch``), so the rows are the in-process runner's
rows; each shard is written by :func:`privatize.output.shard_bytes` from the rows that
belong to it, sorted, so the shards are byte-identical to the in-process runner's.

* A stage with a heavy setup (``Stage.heavy_setup``: a spaCy model) runs in an actor
  pool, set up once per actor; any other as tasks, set up once per worker process and
  run, which Ray Data fuses with the task stages around them (one task per block does
  UniqueIds' apply, split and encrypt_text; the cipher stage in actors cost a worker
  process per run and an object-store round trip per block). Workers receive stage
  *settings* (key references), never key bytes: keys are resolved in ``setup()`` on the
  worker, the pseudonym key in the task that writes a shard.
* CPUs are budgeted so that reads, tasks and writes run beside the actors even on a
  one-CPU cluster (fractional ``num_cpus``, bounded actor pools); a plan without actors
  gives each task a whole CPU.
* Write tasks on the driver's node write their shard files in place (the run's
  temporary directory); elsewhere they return the bytes for the driver to store.
* Counts, timings and key ids travel *with the rows*: each stage task appends one
  marked "info" row per batch (``_drop`` = :data:`INFO`), so a retried task never
  counts twice and nothing is gathered on the side. The final pass turns them into the
  manifest's per-stage ``records_in`` / ``records_out`` / ``seconds``; they are never
  written anywhere.
* A GlobalStage's keys are split by hash partition group in one task per block; one
  task per group puts its rows in the global order and decides; one task gathers and
  indexes the decisions (:func:`collect_decisions`), which each worker looks up once
  per process (:class:`DecisionLookup`). The driver waits for them only when no actor
  pool comes later (an actor pool starts loading while they are made).
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from privatize import allocator
from privatize.errors import InputError, PrivatizeError
from privatize.execution import (DSTAGE, QSTAGE, READ_STAGE, UniqueIds, apply_global_batch, concat,
                                 decide_partition, finish_stage_output, key_rows, marked_mask, run_stage_batch,
                                 split_by_mask, split_marked)
from privatize.keys import KeyResolver
from privatize.output import (OutputWriter, prepare_output, quarantine_path, sha256_file, shard_bytes, shard_of,
                              split_final_rows, stage_stats, write_quarantine, write_shard)
from privatize.records import (InputFile, jsonl_has_record, list_inputs, not_jsonl_error, parse_jsonl,
                               parse_text_lines, read_jsonl, read_parquet, read_text)
from privatize.runner import build_manifest, check_strict
from privatize.spec import OutputSettings, PipelineSpec
from privatize.stage import (DROP, NUM_PARTITIONS, ORDER_COLUMNS, QUARANTINE, ROW, GlobalStage, Stage, StageContext,
                             build_stage)

log = logging.getLogger(__name__)

INFO = "\x00privatize-info"
"""The ``_drop`` reason of an info row (counts and timings of one batch of one stage)."""
INFO_STAGE = -1000
"""The ``_dstage`` of an info row: no stage dropped it, and ``stage_stats`` never sees it."""
SUMMARY_SHARD = -1
DEFAULT_RANGE_BYTES = 64 << 20


@dataclass
class RayRunOptions:
    batch_size: int = 1024
    strict: bool = False
    overwrite: bool = False
    read_range_bytes: int = DEFAULT_RANGE_BYTES
    """JSONL and line-per-record text files larger than this are read in byte ranges."""
    num_cpus: float | None = None
    """CPUs of an embedded local cluster (default: all)."""
    object_store_memory: int | None = None
    """Object store of an embedded local cluster, in bytes (Ray's minimum is 75 MiB)."""
    reads_on_driver_node: bool = True
    """Input paths are the driver's: read them on its node (turn off for shared storage)."""
    progress: bool = True


# ---- worker side ---------------------------------------------------------------------
# Everything below up to the driver section runs in Ray workers. Objects shipped there
# hold settings and key *references* only.

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
        return build_stage(self.settings, StageContext(base_dir=self.base_dir))

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


def _info_table(data: dict) -> pa.Table:
    return pa.table({"doc_id": pa.array([""], pa.string()),
                     "text": pa.array([json.dumps(data, sort_keys=True)], pa.string()),
                     "_src": pa.array([-1], pa.int32()), "_line": pa.array([-1], pa.int64()),
                     "_seg": pa.array([-1], pa.int32()), DROP: pa.array([INFO], pa.string()),
                     DSTAGE: pa.array([INFO_STAGE], pa.int32())})


def _with_info(out: pa.Table, data: dict) -> pa.Table:
    return concat([out, _info_table(data)])


def _is_info(batch: pa.Table) -> np.ndarray:
    if DROP not in batch.column_names:
        return np.zeros(batch.num_rows, dtype=bool)
    return np.asarray(pc.fill_null(pc.equal(batch[DROP], INFO), False))


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
    info = {"stage": ref.index, "in": live_in, "out": out.num_rows - _marked_count(out),
            "seconds": time.perf_counter() - t0, "key_ids": stage.key_ids()}
    return _with_info(out, info)


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


def decide_one(ref: StageRef, group: pa.Table, packed: np.ndarray | None) -> pa.Table:
    """``decide`` over all keyed rows of one hash partition. ``packed``: the rows' order
    columns packed (:func:`pack_order`); the rows then come in the global order and,
    after UniqueIds, ``decide`` gets each row's position in the partition (``ROW``), as
    in-process.

    After UniqueIds a live ``doc_id`` names one row: each decision then carries its row's
    packed order (:data:`ORDER_HASH`), so apply finds its rows by number, not by string.
    Without ``packed`` the partition is sorted here and its decisions keep ``doc_id``
    only."""
    stage = ready_stage(ref)
    if packed is None:
        return decide_partition(stage, group)
    rows = group.select(["doc_id", "key", *ORDER_COLUMNS])
    routed = ref.index >= 0
    if routed:
        rows = rows.append_column(ROW, pa.array(np.arange(group.num_rows, dtype=np.int64)))
    decided = stage.decide(rows)
    if not routed or not decided.num_rows or "doc_id" not in decided.column_names:
        return decided.drop_columns([ROW]) if ROW in decided.column_names else decided
    at = None
    if ROW in decided.column_names:
        kept = decided[ROW]
        at = None if kept.null_count else kept.to_numpy()
        decided = decided.drop_columns([ROW])
    if at is None:
        pos = pc.index_in(decided["doc_id"], value_set=group["doc_id"].combine_chunks())
        at = None if pos.null_count else pos.to_numpy(zero_copy_only=False)
    if at is None or ((at < 0) | (at >= group.num_rows)).any():
        raise ValueError(f"stage {ref.index} ({ref.kind}): decide() returned a decision for a row not in its partition")
    return decided.append_column(ORDER_HASH, pa.array(packed[at]))


ORDER_HASH = "_k"
"""The column decisions carry their rows' order columns in, packed into one uint64
(:func:`pack_order`); the driver sorts the decisions by it."""
RUN_META = b"privatize.run"
"""Schema metadata of the tables keys and decide tasks return: the hash partitions a
decide task decided (``parts``), the seconds spent (``seconds``)."""


_PACK = ((0, 16), (16, 32), (48, 16))  # (shift, bits) of _seg, _line, _src in the packed key


def pack_order(src: np.ndarray, line: np.ndarray, seg: np.ndarray) -> np.ndarray | None:
    """(``_src``, ``_line``, ``_seg``) packed into one uint64 that sorts in the global
    order (16, 32 and 16 bits), or None where some value does not fit."""
    out = np.zeros(len(src), np.uint64)
    for values, (shift, bits) in zip((seg, line, src), _PACK):
        v = values.astype(np.int64, copy=False)
        if len(v) and (v.min() < 0 or v.max() >= (1 << bits)):
            return None
        out |= v.astype(np.uint64) << np.uint64(shift)
    return out


def _packed_order(rows: pa.Table) -> np.ndarray | None:
    cols = [rows[c] for c in ORDER_COLUMNS]
    if any(c.null_count for c in cols):
        return None
    return pack_order(*(c.to_numpy() for c in cols))


def index_by_order(decisions: pa.Table) -> pa.Table:
    """On the driver: decisions that all carry their rows' packed order, sorted by it
    (the workers binary-search it, zero-copy). Other decisions keep the doc_id lookup."""
    if ORDER_HASH not in decisions.column_names:
        return decisions
    if decisions[ORDER_HASH].null_count:  # some partitions' order did not pack
        return decisions.drop_columns([ORDER_HASH])
    key = decisions[ORDER_HASH].to_numpy()
    order = np.argsort(key, kind="stable")  # timsort: one sorted run per partition
    key = key[order]
    if len(key) > 1 and (key[1:] == key[:-1]).any():  # two decisions for one row: not after UniqueIds
        return decisions.drop_columns([ORDER_HASH])
    public = decisions.drop_columns([ORDER_HASH])
    idx = pa.array(order)
    return pa.table({**{c: public[c].take(idx).combine_chunks() for c in public.column_names},
                     ORDER_HASH: pa.array(key)})


class DecisionLookup:
    """A run's decisions, indexed once per process. After UniqueIds the driver has sorted
    them in the global order by their rows' packed order columns (:func:`index_by_order`):
    a batch's rows find theirs by binary search within the stretch of the order the batch
    covers (checked against ``doc_id``), and ``apply`` gets each decision's row position
    (``ROW``).
    Otherwise (UniqueIds itself: one id may sit on several rows) a binary search over
    Python hashes of ``doc_id``, checked exactly."""

    _CHUNK = 1 << 16

    def __init__(self, decisions: pa.Table):
        self.table = decisions
        self.by_order = ORDER_HASH in decisions.column_names
        if self.by_order:
            self.sorted = decisions[ORDER_HASH].to_numpy()
            self.public = decisions.drop_columns([ORDER_HASH])
            return
        ids = decisions["doc_id"]
        h = np.concatenate([self._hash(ids.slice(i, self._CHUNK)) for i in range(0, len(ids), self._CHUNK)]) \
            if len(ids) else np.zeros(0, np.int64)
        self.order = np.argsort(h, kind="stable")
        self.sorted = h[self.order]

    @staticmethod
    def _hash(ids) -> np.ndarray:
        # Python's str hash: stable within this process, which is all an index needs
        return np.fromiter((hash(s) for s in ids.to_pylist()), dtype=np.int64, count=len(ids))

    def for_batch(self, batch: pa.Table) -> pa.Table:
        if self.by_order:
            return self._for_batch_by_order(batch)
        if not self.table.num_rows or not batch.num_rows:
            return self.table.slice(0, 0)
        ids = batch["doc_id"]
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        q = self._hash(ids)
        lo = np.searchsorted(self.sorted, q, "left")
        hi = np.searchsorted(self.sorted, q, "right")
        n = hi - lo
        if not n.any():
            return self.table.slice(0, 0)
        start = np.repeat(lo, n)
        step = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        rows = np.unique(self.order[start + step])
        cand = self.table.take(pa.array(rows))
        return cand.filter(pc.is_in(cand["doc_id"], value_set=ids.cast(cand["doc_id"].type)))


    def _for_batch_by_order(self, batch: pa.Table) -> pa.Table:
        live, _ = split_marked(batch)
        none = np.zeros(0, np.int64)
        # rows whose order columns do not pack (q None) had no packable decision
        q = _packed_order(live) if self.public.num_rows and live.num_rows else None
        if q is None:
            return self._found(live, none, none)
        # a batch covers a short stretch of the global order: search that stretch only
        lo = int(np.searchsorted(self.sorted, q.min(), "left"))
        hi = int(np.searchsorted(self.sorted, q.max(), "right"))
        if hi <= lo:
            return self._found(live, none, none)
        near = self.sorted[lo:hi]
        at = np.minimum(np.searchsorted(near, q), len(near) - 1)
        row = np.flatnonzero(near[at] == q)
        at = at[row] + lo
        if len(row):
            # the same order on two rows (stages that renumber ``_seg``) must not route a
            # decision to the wrong one: the ids must agree too
            same = pc.equal(self.public["doc_id"].take(pa.array(at)),
                            live["doc_id"].take(pa.array(row))).to_numpy(zero_copy_only=False)
            if not same.all():
                at, row = at[same], row[same]
        return self._found(live, at, row)

    def _found(self, live: pa.Table, decision: np.ndarray, row: np.ndarray) -> pa.Table:
        """Decisions number ``decision`` for the live rows ``row``, with each row's
        position (``ROW``)."""
        idx, rows = pa.array(decision.astype(np.int64)), pa.array(row.astype(np.int64))
        return pa.table({**{c: self.public[c].take(idx) for c in self.public.column_names}, ROW: rows})


def _lookup(ref) -> DecisionLookup:
    import ray

    key = ref.hex()
    lk = _LOOKUPS.get(key)
    if lk is None:
        lk = DecisionLookup(ray.get(ref))
        _LOOKUPS[key] = lk
        while len(_LOOKUPS) > _MAX_LOOKUPS:
            _LOOKUPS.popitem(last=False)
    else:
        _LOOKUPS.move_to_end(key)
    return lk


class ApplyUDF(_StageCall):
    """``apply`` with the decisions for one batch, plus its info row. ``decisions`` is a
    one-element list holding the ObjectRef of the whole run's decisions."""

    def __init__(self, ref: StageRef, decisions: list, eager: bool = False):
        self.decisions = decisions
        super().__init__(ref, eager)

    def __call__(self, batch: pa.Table) -> pa.Table:
        stage = ready_stage(self.ref)
        t0 = time.perf_counter()
        live_in = batch.num_rows - _marked_count(batch)
        if not live_in:
            return batch
        lookup = _lookup(self.decisions[0])
        out = apply_global_batch(stage, self.ref.index, batch, lookup.for_batch(batch))
        if self.ref.index == READ_STAGE:
            return out  # UniqueIds: part of reading, no manifest entry of its own
        return _stage_info(self.ref, stage, live_in, out, t0)


def _empty_decisions(ref: StageRef) -> pa.Table:
    empty = pa.table({"doc_id": pa.array([], pa.string()), "key": pa.array([], pa.binary()),
                      **{c: pa.array([], pa.int64()) for c in ORDER_COLUMNS}})
    return ready_stage(ref).decide(empty)


def _stage_key_ids(ref: StageRef) -> dict:
    return ready_stage(ref).key_ids()


def _pseudonym_key(ref: str | None, base_dir: str | None, run: str) -> tuple[bytes | None, str | None]:
    if not ref:
        return None, None
    km = _local(run, ("pseudonym", ref, base_dir), lambda: KeyResolver(base_dir=base_dir).resolve(ref))
    return km.secret, km.key_id


def _pseudonym_key_id(ref: str, base_dir: str | None, run: str) -> str | None:
    return _pseudonym_key(ref, base_dir, run)[1]


# ---- reading ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ReadPiece:
    """One read task: a whole file (``end is None``: read by :mod:`privatize.records`),
    or the lines that start in bytes ``[start, end)`` of a file, the first of them being
    line ``first_line``."""

    file: InputFile
    start: int = 0
    end: int | None = None
    first_line: int = 1


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _line_start(fh, p: int, size: int) -> int:
    """The first position >= ``p`` where a line starts."""
    if p <= 0:
        return 0
    if p >= size:
        return size
    fh.seek(p - 1)
    pos = p - 1
    while True:
        chunk = fh.read(1 << 16)
        if not chunk:
            return size
        i = chunk.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(chunk)


def _read_range(path: str, start: int, end: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            return fh.read(end - start)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None


_NONBLANK = re.compile(rb"\S")
_SCAN_CHUNK = 4 << 20


def _range_lines(fh, start: int, end: int) -> Iterator[bytes]:
    """The lines (without their newline) in bytes ``[start, end)`` of ``fh``, read lazily."""
    fh.seek(start)
    pos = start
    while pos < end:
        line = fh.readline(end - pos)
        if not line:
            return
        pos += len(line)
        yield line[:-1] if line.endswith(b"\n") else line


def scan_range(path: str, fmt: str, nominal_start: int, nominal_end: int, size: int) -> dict:
    """Cut ``[nominal_start, nominal_end)`` at line starts; count its lines and check it
    as :func:`privatize.records.parse_jsonl` checks a whole file. The range streams
    through one small buffer and the JSONL check reads lines only up to the first record
    (splitting whole 64 MB ranges into lines cost 2.1 s of CPU per GB, 7% of a
    cipher-only run on one core)."""
    allocator.tune()
    try:
        with open(path, "rb") as fh:
            start = _line_start(fh, nominal_start, size)
            end = _line_start(fh, nominal_end, size) if nominal_end < size else size
            if end <= start:
                return {"start": start, "end": start, "newlines": 0, "nonblank": False, "record": False,
                        "bad": None}
            newlines, nonblank = 0, False
            buf = bytearray(min(_SCAN_CHUNK, end - start))
            view = memoryview(buf)
            fh.seek(start)
            left = end - start
            while left:
                n = fh.readinto(view[:min(left, len(buf))])
                if not n:
                    break
                newlines += buf.count(b"\n", 0, n)
                nonblank = nonblank or _NONBLANK.search(buf, 0, n) is not None
                left -= n
            view.release()
            out = {"start": start, "end": end, "newlines": newlines, "nonblank": nonblank, "record": True,
                   "bad": None}
            if fmt == "jsonl":
                out["record"], out["bad"] = jsonl_has_record(_range_lines(fh, start, end), first_line=1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return out


def read_piece(piece: ReadPiece, batch_size: int, text_per_line: bool):
    """Blocks of the internal schema for one piece, then one info row (rows read)."""
    allocator.tune()
    t0 = time.perf_counter()
    f = piece.file
    if piece.end is None:
        if f.format == "jsonl":
            tables = read_jsonl(f, batch_size)
        elif f.format == "text":
            tables = read_text(f, batch_size, text_per_line)
        else:
            tables = read_parquet(f, batch_size)
    else:
        data = _read_range(f.path, piece.start, piece.end)
        if f.format == "jsonl":
            tables = parse_jsonl(f, data, batch_size, piece.first_line, whole_file=False)
        else:
            tables = parse_text_lines(f, data, batch_size, piece.first_line)
    rows = 0
    pending = None
    for t in tables:
        if pending is not None:
            yield pending
        pending = finish_stage_output(t, READ_STAGE)
        rows += t.num_rows
    info = {"stage": READ_STAGE, "rows": rows, "seconds": time.perf_counter() - t0}
    yield _with_info(pending, info) if pending is not None else _info_table(info)


def _input_datasource(pieces: list[ReadPiece], batch_size: int, text_per_line: bool, *, on_driver_node: bool):
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class PrivatizeInputDatasource(Datasource):
        def get_name(self) -> str:
            return "ReadInputs"

        @property
        def supports_distributed_reads(self) -> bool:
            return not on_driver_node  # Ray then reads on the driver's node

        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return [ReadTask(partial(read_piece, p, batch_size, text_per_line),
                             BlockMetadata(num_rows=None, size_bytes=None, input_files=[p.file.path],
                                           exec_stats=None))
                    for p in pieces]

    return PrivatizeInputDatasource()


# ---- the final pass: summaries and shards -------------------------------------------

class FinalPass:
    """A block of final rows -> its summary (info rows, statistics, schema, quarantined
    rows) and its output rows by shard (each block's own schema: the write task
    concatenates them as the in-process runner does)."""

    def __init__(self, num_stages: int, num_shards: int):
        self.num_stages = num_stages
        self.num_shards = num_shards

    def split(self, batch: pa.Table) -> tuple[pa.Table, dict[int, pa.Table]]:
        """(the block's summary table, its output rows by shard)."""
        rows, info = split_by_mask(batch, pa.array(_is_info(batch)))
        infos = info["text"].to_pylist() if info is not None else []
        per_shard: dict[int, pa.Table] = {}
        summary = {"info": infos, "stats": None, "schema": None, "output": 0, "dropped": 0}
        quarantined = None
        if rows.num_rows:
            summary["stats"] = {str(k): v for k, v in stage_stats(rows, self.num_stages).items()}
            summary["schema"] = rows.schema.serialize().to_pybytes().hex()
            out, q, d = split_final_rows(rows)
            summary["output"], summary["dropped"] = out.num_rows, d.num_rows
            if q.num_rows:
                cols = [c for c in ("doc_id", QUARANTINE, QSTAGE, "text", *ORDER_COLUMNS) if c in q.column_names]
                quarantined = q.select(cols)
            if out.num_rows:
                out = out.select([c for c in out.column_names if not c.startswith("_") or c in ORDER_COLUMNS])
                shard = shard_of(out["doc_id"], self.num_shards)
                for i in np.unique(shard):
                    per_shard[int(i)] = out.filter(pa.array(shard == i))
        summary_table = pa.table({"summary": [json.dumps(summary)],
                                  "quarantine": pa.array([_ipc(quarantined) if quarantined is not None else None],
                                                         pa.large_binary())})
        return summary_table, per_shard


def sort_shard_rows(rows: pa.Table) -> pa.Table:
    """Rows of one shard in the output order: by ``doc_id`` (ties, which only a corpus
    with clashing ids can have, in the global order)."""
    keys = [("doc_id", "ascending")] + [(c, "ascending") for c in ORDER_COLUMNS if c in rows.column_names]
    return rows.take(pc.sort_indices(rows, sort_keys=keys))


def _written_row(shard: int, rows: int, data: bytes | None, schema: bytes | None, key_id: str | None,
                 size: int | None = None, sha256: str | None = None) -> pa.Table:
    """One row of what the final tasks return to the driver: a shard's Parquet bytes (or,
    with ``data`` None, the size and SHA-256 of the shard file the task wrote in place),
    or (shard -1) a block's summary as Arrow IPC."""
    return pa.table({"shard": pa.array([shard], pa.int64()), "rows": pa.array([rows], pa.int64()),
                     "data": pa.array([data], pa.large_binary()), "schema": pa.array([schema], pa.large_binary()),
                     "key_id": pa.array([key_id], pa.string()), "size": pa.array([size], pa.int64()),
                     "sha256": pa.array([sha256], pa.string())})


class ShardWriter:
    """All rows of one shard -> the shard's Parquet bytes. The pseudonym key is resolved
    here, on the worker. A task on the driver's node writes the shard file in place
    (``paths``: the output's shard files before the commit) and returns its size and
    SHA-256; elsewhere it returns the bytes for the driver to store (sending a 1 GB
    output through the object store to the driver cost 12% of a one-core run)."""

    def __init__(self, output: OutputSettings, base_dir: str | None, run: str = "",
                 driver_node: str | None = None, paths: list[str] | None = None):
        self.output = output
        self.base_dir = base_dir
        self.run = run
        self.driver_node = driver_node
        self.paths = paths

    def _on_driver_node(self) -> bool:
        if not self.driver_node or not self.paths:
            return False
        import ray

        return ray.get_runtime_context().get_node_id() == self.driver_node

    def write(self, shard: int, rows: pa.Table) -> pa.Table:
        key, key_id = _pseudonym_key(self.output.pseudonym_key, self.base_dir, self.run)
        table = prepare_output(sort_shard_rows(rows), meta_keys=self.output.meta_keys, pseudonym_key=key)
        schema = table.schema.serialize().to_pybytes()
        if self._on_driver_node():
            # straight into the file in the run's temporary directory, as in-process (built
            # in memory first, the bytes were copied twice more: 1.4 s of a 1 GB cipher run)
            path = Path(self.paths[shard])
            write_shard(table, path)
            return _written_row(shard, table.num_rows, None, schema, key_id, path.stat().st_size, sha256_file(path))
        return _written_row(shard, table.num_rows, shard_bytes(table), schema, key_id)


def _slice(block: pa.Table, bounds: tuple[int, int] | None) -> pa.Table:
    return block if bounds is None else block.slice(bounds[0], bounds[1] - bounds[0])


def final_split(block: pa.Table, final: FinalPass, bounds: tuple[int, int] | None):
    """One block of final rows -> ``num_shards + 1`` objects: the block's summary (a
    written row of shard -1), then each shard's output rows (an empty table where the
    block has none)."""
    allocator.tune()
    summary_table, per_shard = final.split(_slice(block, bounds))
    summary = _written_row(SUMMARY_SHARD, 0, _ipc(summary_table), None, None)
    return (summary, *(per_shard.get(s, pa.table({})) for s in range(final.num_shards)))


def write_shard_task(udf: ShardWriter, shard: int, *pieces: pa.Table) -> pa.Table | None:
    """Every piece of one shard -> its written row (None: no rows)."""
    allocator.tune()
    rows = [p for p in pieces if p.num_rows]
    return udf.write(shard, concat(rows)) if rows else None


def split_by_group(block: pa.Table, groups: int, ref: StageRef | None, bounds: tuple[int, int] | None):
    """Keyed rows of one block (``ref``: rows of one block, keyed here by that stage) ->
    ``groups`` tables (hash partition ``p`` goes to group ``p % groups``)."""
    allocator.tune()
    t0 = time.perf_counter()
    block = _slice(block, bounds)
    if ref is not None:
        block = key_rows(ready_stage(ref), block)
    # what decide needs, the partition as one byte (NUM_PARTITIONS <= 256)
    part = block["_part"].to_numpy().astype(np.uint8)
    block = block.select(["doc_id", "key", *ORDER_COLUMNS]).append_column("_part", pa.array(part))
    g = part % groups
    out = [block.filter(pa.array(g == i)) for i in range(groups)]
    out[0] = _with_meta(out[0], seconds=time.perf_counter() - t0)  # the keys' time, for the manifest
    return tuple(out)


def decide_group(ref: StageRef, *pieces: pa.Table) -> pa.Table:
    """Every keyed row of the hash partitions of one group -> ``decide`` per partition
    (:func:`decide_one`). The table's schema metadata (:data:`RUN_META`) names the
    partitions decided, so :func:`collect_decisions` can check that each was decided
    exactly once (a partition split across groups would miss duplicates), and the
    seconds spent on keys and decisions. The rows are put in the global
    order once, by their packed order columns (sorting each partition by three columns
    cost more than deciding it)."""
    allocator.tune()
    t0 = time.perf_counter()
    before = sum(_meta(p).get("seconds", 0.0) for p in pieces)
    rows = [p for p in pieces if p.num_rows]
    if not rows:
        return _with_meta(pa.table({}), parts=[], seconds=before)
    keyed = concat(rows)
    part = keyed["_part"].to_numpy().astype(np.uint8)  # a stable sort of bytes is a radix sort
    keyed = keyed.select(["doc_id", "key", *ORDER_COLUMNS])
    packed = _packed_order(keyed)
    # the global order (arrival order where the order columns do not pack), then by
    # partition, keeping that order within each
    in_order = packed is None or (packed[1:] >= packed[:-1]).all()
    order = np.arange(len(part)) if in_order else np.argsort(packed, kind="stable")
    order = order[np.argsort(part[order], kind="stable")]
    if packed is not None:
        packed = packed[order]
    keyed = pa.table({c: keyed[c].take(pa.array(order)) for c in keyed.column_names})
    part = part[order]
    cuts = np.flatnonzero(np.diff(part)) + 1
    out = [decide_one(ref, keyed.slice(a, b - a), None if packed is None else packed[a:b])
           for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(part)])]
    return _with_meta(concat(out), parts=sorted(int(p) for p in np.unique(part)),
                      seconds=before + time.perf_counter() - t0)


def _with_meta(table: pa.Table, **meta) -> pa.Table:
    """``table`` with ``meta`` (JSON) as its schema metadata (:data:`RUN_META`)."""
    return table.replace_schema_metadata({RUN_META: json.dumps(meta).encode()})


def _meta(table: pa.Table) -> dict:
    return json.loads((table.schema.metadata or {}).get(RUN_META, b"{}"))


def collect_decisions(ref: StageRef, *tables: pa.Table) -> tuple[pa.Table, dict]:
    """Every decide task's table -> (the run's decisions for stage ``ref``, indexed for
    the apply tasks (:func:`index_by_order`), and their count and seconds for the
    manifest). Runs as a task: the plan after the stage is built and running (a
    redaction pool loading its models) while the keys are decided."""
    allocator.tune()
    t0 = time.perf_counter()
    metas = [_meta(t) for t in tables]
    parts_done = [p for m in metas for p in m.get("parts", [])]
    if len(set(parts_done)) != len(parts_done):
        raise RuntimeError(f"stage {ref.kind}: a hash partition was decided in pieces")
    found = [t.replace_schema_metadata(None) for t in tables if t.num_rows]
    decisions = concat(found) if found else None
    if decisions is not None:
        decisions = index_by_order(decisions) if "doc_id" in decisions.column_names else None
    if decisions is None:
        decisions = _empty_decisions(ref)
    seconds = sum(m.get("seconds", 0.0) for m in metas) + time.perf_counter() - t0
    return decisions, {"decisions": decisions.num_rows, "seconds": seconds}


# ---- driver ---------------------------------------------------------------------------

def _named(cls: type, name: str) -> type:
    """A subclass named after the stage, so Ray's progress bars say which stage runs."""
    safe = "".join(c if c.isalnum() else "_" for c in name)
    return type(safe, (cls,), {"__qualname__": safe, "__module__": cls.__module__})


def _map_batches(ds, fn, **kwargs):
    """Every ``map_batches`` of the plan goes through here (one place to audit what is
    shipped to workers: settings and key references, never key bytes)."""
    return ds.map_batches(fn, **kwargs)


@dataclass
class _Budget:
    cpus: float
    task_cpus: float
    actor_cpus: float
    max_actors: int

    @classmethod
    def for_cluster(cls, cpus: float, pools: int) -> "_Budget":
        """``pools``: the plan's actor-pool stages (0: tasks only)."""
        cpus = max(cpus, 0.1)
        max_actors = max(1, int(cpus))
        # every pool's actors (fixed-size pools: all of them start) plus one task slot
        # fit at once, so reads and writes never wait behind actors (on one CPU a plan
        # with a 1-CPU read and any actor hangs; so does one whose actors leave less than
        # a task's share free). With no actors a task takes a whole CPU: one core then
        # runs one task at a time (four quarter-CPU tasks time-sliced on one core, each
        # with its own 30-60 MB block, ran a 1 GB cipher-only spec in 28-33 s instead of 25)
        task_cpus = min(1.0, cpus) if pools == 0 else min(1.0, cpus / 4)
        actor_cpus = min(1.0, (cpus - task_cpus) / (max(1, pools) * max_actors))
        return cls(cpus, task_cpus, math.floor(actor_cpus * 1e4) / 1e4, max_actors)

    def map_args(self, actor: bool) -> dict:
        if actor:
            import ray.data

            return {"compute": ray.data.ActorPoolStrategy(min_size=self.max_actors, max_size=self.max_actors),
                    "num_cpus": self.actor_cpus}
        return {"num_cpus": self.task_cpus}


class _Plan:
    def __init__(self, budget: _Budget, batch_size: int):
        self.budget = budget
        self.batch_size = batch_size
        # Stages see whole blocks: the reader already cut them at ``batch_size`` records,
        # so a stage sees the batches the in-process runner's would, and an expanding
        # stage (split: a document -> hundreds of segments) does not multiply the number
        # of calls after it (1024-row batches after split: 0.36x in-process on dedup)
        self.map_batch_size = None
        self.keep: list = []  # object refs the plan needs until the end

    def _udf(self, cls: type, ref: StageRef, actor: bool, **kw):
        named = _named(cls, f"{ref.index}_{ref.kind}" if ref.index >= 0 else ref.kind)
        if actor:
            return named, {"fn_constructor_kwargs": {"ref": ref, "eager": True, **kw}}
        return named(ref, **kw), {}

    def stage(self, ds, ref: StageRef, actor: bool):
        fn, extra = self._udf(StageUDF, ref, actor)
        return _map_batches(ds, fn, batch_size=self.map_batch_size, batch_format="pyarrow",
                            **extra, **self.budget.map_args(actor))

    def global_stage(self, ds, ref: StageRef, actor: bool, overlap: bool) -> tuple[Any, Any]:
        """Materialize the rows, start the keys and decisions, and return (the applying
        dataset, the ObjectRef of the decisions' count and seconds). With ``overlap`` the
        driver does not wait for the decisions (:func:`collect_decisions`), so the plan
        after the stage starts at once: its actor pools load their models meanwhile.
        Without, it waits: apply tasks blocked on the decisions give up their CPU, and
        Ray starts more worker processes to use it (three in a 1 GB cipher-only run,
        1.5 s of imports each)."""
        import ray

        ds = ds.materialize()
        groups = min(NUM_PARTITIONS, max(2, int(2 * self.budget.cpus)))
        if actor:  # keys from the stage's actors, then split
            fn, extra = self._udf(KeysUDF, ref, actor)
            keyed = _map_batches(ds, fn, batch_size=self.map_batch_size, batch_format="pyarrow",
                                 **extra, **self.budget.map_args(actor))
            tables = _decide_groups(keyed, ref, groups, self.budget.task_cpus, keyed_by=None)
        else:  # each block keyed and split in one task: the keyed rows are stored once
            tables = _decide_groups(ds, ref, groups, self.budget.task_cpus, keyed_by=ref)
        collect = _task(collect_decisions, num_returns=2, num_cpus=self.budget.task_cpus)
        dref, stats = collect.remote(ref, *tables)
        self.keep.append(dref)
        if not overlap:
            ray.wait([stats], num_returns=1, timeout=None, fetch_local=False)
        fn, extra = self._udf(ApplyUDF, ref, actor, decisions=[dref])
        return _map_batches(ds, fn, batch_size=self.map_batch_size, batch_format="pyarrow",
                            **extra, **self.budget.map_args(actor)), stats


def _windowed(task, arg_lists: list[tuple], window: int) -> list:
    """``task.remote(*args)`` for each of ``arg_lists``, at most ``window`` in flight
    (what can run at once); the results in order. Submitting all at once queued them,
    and Ray starts a worker process for every queued task it expects to run (three
    more at 1 CPU for a 1 GB input's 16 ranges: 1.5 s of imports each)."""
    import ray

    results: list = [None] * len(arg_lists)
    pending: dict = {}
    todo = iter(enumerate(arg_lists))
    while True:
        for i, args in todo:
            pending[task.remote(*args)] = i
            if len(pending) >= window:
                break
        if not pending:
            return results
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            results[pending.pop(ref)] = _get(ref)


def plan_reads(files: list[InputFile], *, text_per_line: bool, range_bytes: int, task_cpus: float,
               scheduling: dict, window: int = 1) -> list[ReadPiece]:
    """One piece per file; large JSONL and line-per-record text files in byte ranges cut
    at line starts, their first line numbers found by counting newlines in parallel
    (``window`` at a time)."""
    pieces: list[ReadPiece] = []
    scans = []
    scan = _task(scan_range, num_cpus=task_cpus, **scheduling)
    for f in files:
        splittable = f.format == "jsonl" or (f.format == "text" and text_per_line)
        try:
            size = os.path.getsize(f.path)
        except OSError as exc:
            raise InputError(f"{f.path}: cannot read: {exc.strerror or exc}") from None
        if not splittable or size <= range_bytes:
            pieces.append(ReadPiece(f))
            continue
        bounds = list(range(0, size, range_bytes)) + [size]
        scans.append((f, len(pieces), [(f.path, f.format, a, b, size) for a, b in zip(bounds, bounds[1:])]))
        pieces.append(None)  # placeholder, filled in below
    done = iter(_windowed(scan, [args for _, _, jobs in scans for args in jobs], window))
    out: list[ReadPiece] = []
    filled: dict[int, list[ReadPiece]] = {}
    for f, slot, jobs in scans:
        results = [next(done) for _ in jobs]
        if not any(r["nonblank"] for r in results):
            raise InputError(f"{f.path}: file is empty")
        line = 1
        ranges = []
        first_bad = None
        for r in results:
            if r["bad"] is not None and first_bad is None:
                first_bad = (line + r["bad"][0] - 1, r["bad"][1])
            if r["end"] > r["start"]:
                ranges.append(ReadPiece(f, r["start"], r["end"], line))
            line += r["newlines"]
        if f.format == "jsonl" and not any(r["record"] for r in results):
            raise not_jsonl_error(f, first_bad)
        filled[slot] = ranges
    for i, p in enumerate(pieces):
        out.extend(filled[i] if p is None else [p])
    return out


def _find_privatize_error(exc: BaseException) -> PrivatizeError | None:
    seen = set()
    todo = [exc]
    found = None
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, PrivatizeError) and type(e).__module__.startswith("privatize"):
            found = e
        todo.extend([getattr(e, "cause", None), e.__cause__, e.__context__])
    return found


def _message(err: BaseException) -> str:
    # the error's own one line (Ray Data appends its retry advice to the message)
    return (str(err).splitlines() or [""])[0]


def _get(refs):
    import ray

    try:
        return ray.get(refs)
    except Exception as exc:
        err = _find_privatize_error(exc)
        if err is not None:
            raise type(err)(_message(err)) from None
        raise


def _runtime_env() -> dict | None:
    """Workers of an embedded cluster import ``privatize`` from where this process did."""
    import privatize

    root = str(Path(privatize.__file__).resolve().parents[1])
    if "site-packages" in root or "dist-packages" in root:
        return None
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


def local_init_args(num_cpus: float | None = None) -> dict:
    """``ray.init`` arguments for an embedded local cluster, beyond its size.

    Ray keeps idle worker processes only up to ``num_workers_soft_limit`` (default: the
    node's CPU count) and kills the rest after a second of idleness. The plan runs
    fractional-CPU tasks (four at once on one CPU, see :class:`_Budget`) beside its
    actors, so on a small node the default limit kills and restarts workers all through a
    run, each restart re-importing Ray, Arrow and the stages (about 1.5 s of CPU). The
    limit here keeps one worker per concurrent task and actor. (Nodes of four or more CPUs
    run whole-CPU tasks, for which Ray's default fits; a long-lived cluster of smaller
    nodes sets ``RAY_num_workers_soft_limit`` on them likewise.)"""
    cpus = num_cpus if num_cpus is not None else (os.cpu_count() or 1)
    b = _Budget.for_cluster(cpus, 1)
    # every task that can run at once, plus the actors of two actor-pool stages
    return {"_system_config": {"num_workers_soft_limit": math.ceil(cpus / b.task_cpus) + 2 * b.max_actors}}


def connect(address: str | None = None, *, num_cpus: float | None = None,
            object_store_memory: int | None = None) -> bool:
    """Join the current Ray session, or the cluster at ``address`` (or ``RAY_ADDRESS``),
    or start an embedded local one. Returns whether this call connected (and so should
    disconnect)."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        ctx = ray.init(num_cpus=num_cpus, object_store_memory=object_store_memory, runtime_env=_runtime_env(),
                       **local_init_args(num_cpus))
    else:
        ctx = ray.init(address=address)
    url = getattr(ctx, "dashboard_url", None)
    if url:  # operators watch the run there (jobs, Ray Data operators, workers)
        print(f"privatize: Ray dashboard at http://{url}", file=sys.stderr)
    return True


def run_pipeline_ray(spec: PipelineSpec, input_path: str | Path, output_dir: str | Path, *,
                     spec_dir: str | None = None, address: str | None = None,
                     options: RayRunOptions | None = None, **kw) -> dict:
    """Run ``spec`` on ``input_path`` into ``output_dir`` with Ray Data; returns the
    manifest. The shards are byte-identical to :func:`privatize.runner.run_pipeline`'s."""
    import ray

    opts = options or RayRunOptions(**kw)
    t_start = time.perf_counter()
    files = list_inputs(input_path, spec.input.format)
    run = uuid.uuid4().hex  # names this run's set-up stages in worker processes; not a secret
    refs = [StageRef(s, spec_dir, i, run) for i, s in enumerate(spec.stages)]
    protos = [r.build() for r in refs]  # settings only: never set up on the driver
    stage_names = {READ_STAGE: "read", **{i: s.kind for i, s in enumerate(protos)}}
    writer = OutputWriter(Path(output_dir), spec.output.num_shards, overwrite=opts.overwrite)
    connected = False
    ctx = None
    saved_progress = None
    try:
        connected = connect(address, num_cpus=opts.num_cpus, object_store_memory=opts.object_store_memory)
        import ray.data
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ctx = ray.data.DataContext.get_current()
        saved_progress = ctx.enable_progress_bars, ctx.shuffle_strategy
        ctx.enable_progress_bars = opts.progress
        # The sort-based shuffle runs plain tasks: Ray 2.60's default hash shuffle starts
        # aggregator actors for every group-by, seconds of fixed cost each
        ctx.shuffle_strategy = "sort_shuffle_pull_based"
        pools = sum(1 for s in protos if s.heavy_setup)
        budget = _Budget.for_cluster(ray.cluster_resources().get("CPU", 1.0), pools)
        scheduling = {}
        if opts.reads_on_driver_node:
            scheduling = {"scheduling_strategy": NodeAffinitySchedulingStrategy(
                ray.get_runtime_context().get_node_id(), soft=False)}
        log.info("ray runner: %d input file(s), %.1f CPU(s), tasks %.2f CPU, actors %.2f CPU (max %d per stage)",
                 len(files), budget.cpus, budget.task_cpus, budget.actor_cpus, budget.max_actors)
        text_per_line = spec.input.text_unit == "line"
        pieces = plan_reads(files, text_per_line=text_per_line, range_bytes=opts.read_range_bytes,
                            task_cpus=budget.task_cpus, scheduling=scheduling,
                            window=max(1, int(budget.cpus / budget.task_cpus)))
        plan = _Plan(budget, opts.batch_size)
        ds = ray.data.read_datasource(_input_datasource(pieces, opts.batch_size, text_per_line,
                                                        on_driver_node=opts.reads_on_driver_node),
                                      num_cpus=budget.task_cpus, override_num_blocks=len(pieces))
        # while a GlobalStage decides, a later actor pool starts (see _Plan.global_stage)
        pools_after = [any(p.heavy_setup for p in protos[i:]) for i in range(len(protos) + 1)]
        ds, _ = plan.global_stage(ds, StageRef(None, spec_dir, READ_STAGE, run), actor=False,
                                  overlap=pools_after[0])
        decided: list = [None] * len(protos)  # ObjectRefs of each GlobalStage's decision stats
        for ref, proto in zip(refs, protos):
            if isinstance(proto, GlobalStage):
                ds, decided[ref.index] = plan.global_stage(ds, ref, actor=proto.heavy_setup,
                                                           overlap=pools_after[ref.index + 1])
            else:
                ds = plan.stage(ds, ref, actor=proto.heavy_setup)
        shard_writer = ShardWriter(spec.output, spec_dir, run, driver_node=ray.get_runtime_context().get_node_id(),
                                   paths=[str(writer.shard_path(i)) for i in range(spec.output.num_shards)])
        written = _write_shards(ds, FinalPass(len(protos), spec.output.num_shards), shard_writer,
                                spec.output.num_shards, budget.task_cpus)
        manifest = _finish(spec, writer, written, refs, protos, stage_names, decided, files, opts,
                           budget, spec_dir, run)
        manifest["seconds"] = round(time.perf_counter() - t_start, 3)
        writer.commit(manifest)
    except BaseException as exc:
        writer.abort()
        err = _find_privatize_error(exc)
        if err is not None and err is not exc:
            # a stage's or reader's error, as raised in the worker: one line, exit code 2
            raise type(err)(_message(err)) from None
        raise
    finally:
        if ctx is not None and saved_progress is not None:
            ctx.enable_progress_bars, ctx.shuffle_strategy = saved_progress
        if connected:
            ray.shutdown()
    return manifest


def _task(fn, **options):
    """Every Ray core task of the plan is made here (one place to audit what is shipped
    to workers: settings and key references, never key bytes)."""
    import ray

    return ray.remote(fn).options(**options)


def _block_pieces(ds, fn, n: int, task_cpus: float, *args) -> list:
    """``fn(block, *args, bounds)`` -> ``n`` objects, for every block of ``ds`` as it is
    produced: the map side of a one-pass shuffle in Ray core tasks."""
    task = _task(fn, num_returns=n, num_cpus=task_cpus)
    pieces = []
    for bundle in ds.iter_internal_ref_bundles():
        slices = bundle.slices or [None] * len(bundle.block_refs)
        for ref, sl in zip(bundle.block_refs, slices):
            pieces.append(task.remote(ref, *args, None if sl is None else (sl.start_offset, sl.end_offset)))
    return pieces


def _decide_groups(ds, ref: StageRef, groups: int, task_cpus: float, keyed_by: StageRef | None) -> list:
    """Keyed rows to ``groups`` decide tasks (their ObjectRefs) in one pass (Ray Data's repartition and
    sort-based group-by moved every keyed row twice more). ``keyed_by``: ``ds`` holds
    the rows, keyed by that stage in the split tasks; None: ``ds`` holds keyed rows."""
    pieces = _block_pieces(ds, split_by_group, groups, task_cpus, groups, keyed_by)
    decide = _task(decide_group, num_cpus=task_cpus)
    return [decide.remote(ref, *[p[g] for p in pieces]) for g in range(groups)]


def _write_shards(ds, final: FinalPass, udf: ShardWriter, num_shards: int, task_cpus: float):
    """The final pass and the output shuffle in one: as blocks of final rows stream out
    of the plan, a task summarizes each and splits its output rows by shard
    (``num_shards + 1`` objects); then one task per shard gathers its pieces and writes
    the shard's bytes. (Ray Data's sort-based group-by moved every byte twice more: 0.6x
    the in-process runner on the cipher-only spec.)
    Yields written rows (:func:`_written_row`): the summaries first, then the shards."""
    write = _task(write_shard_task, num_cpus=task_cpus)
    pieces = _block_pieces(ds, final_split, num_shards + 1, task_cpus, final)
    summaries = [p[0] for p in pieces]
    shard_refs = [write.remote(udf, s, *[p[s + 1] for p in pieces]) for s in range(num_shards)]
    del pieces
    yield from _get(summaries)
    for ref in shard_refs:
        t = _get(ref)
        if t is not None:
            yield t


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    cols = [table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
            for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def _finish(spec: PipelineSpec, writer: OutputWriter, written, refs: list[StageRef], protos: list[Stage],
            stage_names: dict[int, str], decided: list, files: list[InputFile],
            opts: RayRunOptions, budget: _Budget, spec_dir: str | None, run: str) -> dict:
    """Store the shards as they arrive, then merge the summaries into the manifest."""
    n_stages = len(protos)
    infos: list[dict] = []
    per_stage = {i: {"quarantined": 0, "dropped": 0, "stats": {}} for i in range(READ_STAGE, n_stages)}
    schemas: dict[bytes, pa.Schema] = {}
    quarantined: list[pa.Table] = []
    output_rows = dropped = 0
    shard_data: dict[int, dict] = {}  # shard -> its written row (_written_row)
    pseudonym_key_id = None
    try:
        for batch in written:
            for row in batch.to_pylist():
                if row["shard"] == SUMMARY_SHARD:
                    summary = _from_ipc(row["data"])
                    s = json.loads(summary["summary"][0].as_py())
                    infos.extend(json.loads(t) for t in s["info"])
                    output_rows += s["output"]
                    dropped += s["dropped"]
                    if s["schema"]:
                        raw = bytes.fromhex(s["schema"])
                        if raw not in schemas:
                            schemas[raw] = pa.ipc.read_schema(pa.py_buffer(raw))
                    for idx, st in (s["stats"] or {}).items():
                        acc = per_stage[int(idx)]
                        acc["quarantined"] += st["quarantined"]
                        acc["dropped"] += st["dropped"]
                        for name, v in st["stats"].items():
                            acc["stats"][name] = acc["stats"].get(name, 0) + v
                    q = summary["quarantine"][0].as_py()
                    if q is not None:
                        quarantined.append(_from_ipc(q))
                else:
                    if row["shard"] in shard_data:
                        raise RuntimeError(f"shard {row['shard']} was written in pieces")
                    shard_data[row["shard"]] = row
                    pseudonym_key_id = pseudonym_key_id or row["key_id"]
    except Exception as exc:
        err = _find_privatize_error(exc)
        if err is not None:
            raise type(err)(_message(err)) from None
        raise

    qrows = concat(quarantined) if quarantined else None
    if qrows is not None:
        qrows = qrows.sort_by([(c, "ascending") for c in ORDER_COLUMNS])
    if opts.strict and qrows is not None and qrows.num_rows:
        check_strict(qrows, stage_names, [f.name for f in files])

    # the output schema: the in-process runner concatenates every final batch
    # (permissive promotion) before it splits off the output rows
    unified = pa.unify_schemas(list(schemas.values()), promote_options="permissive") if schemas else None
    target = None
    if unified is not None:
        target = prepare_output(unified.empty_table(), meta_keys=spec.output.meta_keys, pseudonym_key=None).schema
    entries = []
    for i in range(spec.output.num_shards):
        if i in shard_data:
            row = shard_data.pop(i)
            data, rows = row["data"], row["rows"]
            if target is not None and pa.ipc.read_schema(pa.py_buffer(row["schema"])) != target:
                # a shard whose rows lacked a column other batches have: same rows, the
                # run's schema (rare; written here rather than in the task)
                import pyarrow.parquet as pq

                if data is None:
                    data = writer.shard_path(i).read_bytes()
                data = shard_bytes(_conform(pq.read_table(pa.BufferReader(data)), target))
            elif data is None:  # written in place by a task on this node
                entries.append(writer.adopt_shard(i, rows, row["size"], row["sha256"]))
                continue
        else:
            empty = target.empty_table() if target is not None else pa.table({"doc_id": pa.array([], pa.string())})
            data, rows = shard_bytes(empty), 0
        entries.append(writer.put_shard(i, data, rows))

    nq = write_quarantine(qrows if qrows is not None else _no_rows(), quarantine_path(writer.output_dir),
                          stage_names)

    # per-stage counts and timings from the info rows
    # a GlobalStage's seconds: its keys and decisions (in tasks), then its apply batches
    decided = [_get(r) if r is not None else None for r in decided]
    timings = [{"records_in": 0, "records_out": 0, "seconds": d["seconds"] if d else 0.0} for d in decided]
    for i, d in enumerate(decided):
        if d is not None:
            log.info("stage %d %s: %d decision(s), %.2fs on keys and decisions", i, protos[i].kind,
                     d["decisions"], d["seconds"])
    key_ids: dict[str, str] = {}
    input_records = 0
    seen_stage = set()
    for info in infos:
        i = info["stage"]
        if i == READ_STAGE:
            input_records += info["rows"]
            continue
        seen_stage.add(i)
        timings[i]["records_in"] += info["in"]
        timings[i]["records_out"] += info["out"]
        timings[i]["seconds"] += info["seconds"]
        for name, kid in (info.get("key_ids") or {}).items():
            key_ids[f"stages.{i}.{name}"] = kid
    for t in timings:
        t["seconds"] = round(t["seconds"], 4)
    for ref, proto in zip(refs, protos):
        if ref.index not in seen_stage and proto.needs_setup:
            # no live row reached this stage: ask a worker which keys it would use
            task = _task(_stage_key_ids, num_cpus=budget.task_cpus)
            for name, kid in _get(task.remote(ref)).items():
                key_ids[f"stages.{ref.index}.{name}"] = kid
    key_ids = {k: key_ids[k] for k in sorted(key_ids, key=lambda k: (int(k.split(".")[1]), k))}
    if spec.output.pseudonym_key:
        if pseudonym_key_id is None:
            task = _task(_pseudonym_key_id, num_cpus=budget.task_cpus)
            pseudonym_key_id = _get(task.remote(spec.output.pseudonym_key, spec_dir, run))
        key_ids["output.pseudonym_key"] = pseudonym_key_id
    for i, t in enumerate(timings):
        log.info("stage %d %s: %d -> %d records, %.2fs in workers", i, protos[i].kind, t["records_in"],
                 t["records_out"], t["seconds"])
    return build_manifest(spec, [p.kind for p in protos], per_stage, timings, key_ids,
                          input_records=input_records, output_records=output_rows,
                          quarantined=qrows.num_rows if qrows is not None else 0, dropped=dropped,
                          shards=entries, quarantine=str(quarantine_path(writer.output_dir)) if nq else None,
                          quarantine_records=nq, files=[f.path for f in files], runner="ray")


def _no_rows() -> pa.Table:
    return pa.table({"doc_id": pa.array([], pa.string()), QUARANTINE: pa.array([], pa.string()),
                     "text": pa.array([], pa.string()), "_src": pa.array([], pa.int32()),
                     "_line": pa.array([], pa.int64())})
