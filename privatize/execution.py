"""What every runner does around a stage, in one place.

Both the in-process runner and the Ray runner call these functions, so a stage behaves
the same wherever it runs: rows already quarantined or dropped pass a stage untouched,
per-row statistics are namespaced by stage position, and a ``GlobalStage`` is driven
through the same keys / partition / decide / apply steps.
"""

from __future__ import annotations

import hashlib
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from privatize.routing import Broadcast, Router, packed_order, routed
from privatize.stage import (DECISION_ROW, DROP, NUM_PARTITIONS, ORDER_COLUMNS, QUARANTINE, STAT_PREFIX,
                             GlobalStage, Stage, add_stats, set_column)

QSTAGE = "_qstage"  # which stage quarantined a row (-1: reading)
DSTAGE = "_dstage"  # which stage dropped a row
READ_STAGE = -1


def marked_mask(batch: pa.Table) -> pa.ChunkedArray | None:
    """Which rows an earlier stage quarantined or dropped (None: the batch has neither column)."""
    masks = [pc.is_valid(batch[c]) for c in (QUARANTINE, DROP) if c in batch.column_names]
    if not masks:
        return None
    m = masks[0]
    for other in masks[1:]:
        m = pc.or_(m, other)
    return m


def split_by_mask(batch: pa.Table, mask: pa.Array | pa.ChunkedArray) -> tuple[pa.Table, pa.Table | None]:
    """(rows where ``mask`` is false, rows where it is true; None where there are none).
    Rows masked as the batch's tail are sliced off, not copied: the Ray runner appends
    its info rows, and run_stage_batch / apply_global_batch put the rows earlier stages
    marked after the rest (filtering copied every block to drop one row)."""
    k = pc.sum(mask).as_py() or 0
    if not k:
        return batch, None
    rest = batch.num_rows - k
    if pc.all(mask.slice(rest)).as_py():
        return batch.slice(0, rest), batch.slice(rest)
    return batch.filter(pc.invert(mask)), batch.filter(mask)


def split_marked(batch: pa.Table) -> tuple[pa.Table, pa.Table | None]:
    """(live rows, rows an earlier stage quarantined or dropped)."""
    m = marked_mask(batch)
    return (batch, None) if m is None else split_by_mask(batch, m)


def _tag(batch: pa.Table, index: int, reason_col: str, stage_col: str) -> pa.Table:
    if reason_col not in batch.column_names:
        return batch
    tagged = pc.if_else(pc.is_valid(batch[reason_col]), pa.scalar(index, pa.int32()), pa.scalar(None, pa.int32()))
    if stage_col in batch.column_names:
        tagged = pc.coalesce(batch[stage_col], tagged)
        return batch.set_column(batch.schema.get_field_index(stage_col), stage_col, tagged)
    return batch.append_column(stage_col, tagged)


def finish_stage_output(out: pa.Table, index: int) -> pa.Table:
    """Namespace fresh ``_stat.<name>`` columns as ``_stat.<index>.<name>`` and record
    which stage quarantined or dropped a row."""
    names = []
    for n in out.column_names:
        if n.startswith(STAT_PREFIX) and not n[len(STAT_PREFIX):].split(".", 1)[0].lstrip("-").isdigit():
            n = f"{STAT_PREFIX}{index}.{n[len(STAT_PREFIX):]}"
        names.append(n)
    out = out.rename_columns(names)
    out = _tag(out, index, QUARANTINE, QSTAGE)
    return _tag(out, index, DROP, DSTAGE)


def concat(tables: list[pa.Table]) -> pa.Table:
    tables = [t for t in tables if t is not None]
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


def run_stage_batch(stage: Stage, index: int, batch: pa.Table) -> pa.Table:
    """Run a per-batch stage on the live rows of ``batch``; marked rows pass through."""
    live, marked = split_marked(batch)
    out = stage.process_batch(_clear_marks(live)) if live.num_rows else live
    if out.num_rows > live.num_rows:
        check_unique_order(out, stage.kind)
    return concat([finish_stage_output(out, index), marked])


def check_unique_order(rows: pa.Table, kind: str) -> None:
    """The order columns name one row each (readers give every record its own ``_src``,
    ``_line``; a stage that expands a record numbers the pieces in ``_seg``): decisions of
    a GlobalStage find their rows by them (:mod:`privatize.routing`). Checked where rows
    are made; an expansion in the global order (``split``'s) costs one pass."""
    packed = packed_order(rows)
    if packed is not None:
        if len(packed) < 2 or (packed[1:] > packed[:-1]).all():
            return
        packed.sort()
        clash = bool((packed[1:] == packed[:-1]).any())
    else:
        keys = rows.select(list(ORDER_COLUMNS))
        clash = keys.group_by(list(ORDER_COLUMNS)).aggregate([]).num_rows < keys.num_rows
    if clash:
        raise ValueError(f"{kind}: two rows share their order columns (_src, _line, _seg); a stage that "
                         "expands a record must number its pieces in _seg")


def _clear_marks(live: pa.Table) -> pa.Table:
    """Live rows carry no reasons; drop the (all-null) reserved columns so a stage can
    simply append its own ``_quarantine`` / ``_drop``."""
    present = [c for c in (QUARANTINE, DROP, QSTAGE, DSTAGE) if c in live.column_names]
    return live.drop_columns(present) if present else live


# ---- GlobalStage ----------------------------------------------------------------------

def partition_of(keys: pa.Array) -> np.ndarray:
    """A stable partition number in [0, NUM_PARTITIONS) per key (-1 for null keys).
    Independent of process, platform and Python's hash seed: keys that are digests
    (fixed-size binary of 8 bytes or more) by their first 8 bytes, others by BLAKE2b."""
    out = np.full(len(keys), -1, dtype=np.int64)
    if pa.types.is_fixed_size_binary(keys.type) and keys.type.byte_width >= 8:
        # keys that are already digests (SHA-1 of a segment): their first 8 bytes
        width = keys.type.byte_width
        data = np.frombuffer(keys.buffers()[1], dtype=np.uint8)[keys.offset * width:(keys.offset + len(keys)) * width]
        first = data.reshape(-1, width)[:, :8].copy().view("<u8").ravel()
        out[:] = (first % NUM_PARTITIONS).astype(np.int64)
        if keys.null_count:
            out[np.asarray(keys.is_null())] = -1
        return out
    for i, k in enumerate(keys.to_pylist()):
        if k is None:
            continue
        if isinstance(k, str):
            k = k.encode("utf-8")
        out[i] = int.from_bytes(hashlib.blake2b(k, digest_size=8).digest(), "little") % NUM_PARTITIONS
    return out


def key_rows(stage: GlobalStage, batch: pa.Table) -> pa.Table:
    """The keyed rows of one batch's live rows: doc_id, key, order columns, the columns
    ``keys`` added (when it returned a table), and the partition ``_part``; a broadcast
    stage's own keyed rows and ``_part``."""
    live, _ = split_marked(batch)
    keys = stage.keys(live)
    if stage.broadcast:  # keyed rows of the stage's own, aligned to no row
        if not isinstance(keys, pa.Table) or "key" not in keys.column_names:
            raise TypeError(f"{stage.kind}: keys() of a broadcast stage must return a table with a column 'key'")
        key = keys["key"].combine_chunks() if isinstance(keys["key"], pa.ChunkedArray) else keys["key"]
        return keys.append_column("_part", pa.array(partition_of(key)))
    extra: dict = {}
    if isinstance(keys, pa.Table):
        extra = {c: keys[c] for c in keys.column_names if c != "key"}
        keys = keys["key"]
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    part = partition_of(keys)
    t = pa.table({"doc_id": live["doc_id"], "key": keys, **{c: live[c] for c in ORDER_COLUMNS}, **extra,
                  "_part": pa.array(part)})
    return t.filter(pc.greater_equal(t["_part"], 0)) if keys.null_count else t  # -1: a null key


def decide_columns(keyed: pa.Table) -> list[str]:
    """The columns of keyed rows that ``decide`` sees: all but the partition."""
    return [c for c in keyed.column_names if c != "_part"]


def sort_partition(partition: pa.Table) -> pa.Table:
    return partition.sort_by([(c, "ascending") for c in ORDER_COLUMNS])


def decide_partition(stage: GlobalStage, partition: pa.Table, packed: np.ndarray | None = None) -> pa.Table:
    """``decide`` over the keyed rows of one hash partition, in the global order, and its
    decisions routed to their rows (:func:`privatize.routing.routed`)."""
    rows = partition.select(decide_columns(partition))
    return routed(stage.kind, stage.decide(rows), rows, packed)


def no_decisions(stage: GlobalStage) -> pa.Table:
    """The decision columns of ``stage`` (``decide`` over no rows)."""
    empty = pa.table({"doc_id": pa.array([], pa.string()), "key": pa.array([], pa.binary()),
                      **{c: pa.array([], pa.int64()) for c in ORDER_COLUMNS}})
    return stage.decide(empty)


def apply_global_batch(stage: GlobalStage, index: int, batch: pa.Table, router: Router) -> pa.Table:
    """``apply`` on the live rows of ``batch`` with their decisions, aligned."""
    live, marked = split_marked(batch)
    out = stage.apply(_clear_marks(live), router.for_batch(live)) if live.num_rows else live
    return concat([finish_stage_output(out, index), marked])


def _in_global_order(keyed: pa.Table) -> bool:
    """Whether the keyed rows already come in the global order, as the runner reads and
    splits them: each partition, a stable subsequence, then needs no sort of its own."""
    cols = [keyed[c] for c in ORDER_COLUMNS]
    if keyed.num_rows < 2 or any(c.null_count for c in cols):
        return keyed.num_rows < 2
    ahead = np.zeros(keyed.num_rows - 1, bool)  # the row is after the one before it
    tie = np.ones(keyed.num_rows - 1, bool)  # ... or equal to it so far
    for c in cols:
        v = c.to_numpy()
        ahead |= tie & (v[1:] > v[:-1])
        tie &= v[1:] == v[:-1]
    return bool((ahead | tie).all())


def _take(table: pa.Table, indices: np.ndarray) -> pa.Table:
    """``table.take`` column by column (a table's take of chunked columns is slower)."""
    idx = pa.array(indices)
    return pa.table({name: table[name].take(idx) for name in table.column_names})


def decide_broadcast(stage: GlobalStage, part: int, rows: pa.Table) -> tuple[int, pa.Table, dict]:
    """``decide`` of a broadcast stage over one hash partition's keyed rows."""
    table, stats = stage.decide(rows.select(decide_columns(rows)))
    return part, table, stats


def decide_global_stage(stage: GlobalStage, batches: list[pa.Table]) -> "Router | Broadcast":
    """In process, the first two steps of a GlobalStage over all batches of the corpus:
    keys, the keyed rows grouped by hash partition (a radix sort on one byte), ``decide``
    per partition in the global order; returns the :class:`~privatize.routing.Router`
    (a broadcast stage's :class:`~privatize.routing.Broadcast`) the Ray runner also builds."""
    keyed = concat([key_rows(stage, b) for b in batches]) if batches else None
    groups: list[tuple[int, pa.Table]] = []
    in_order = True
    if keyed is not None and keyed.num_rows:
        parts = keyed["_part"].to_numpy().astype(np.uint8)
        order = np.argsort(parts, kind="stable")
        in_order = stage.broadcast or _in_global_order(keyed)
        keyed = _take(keyed.select(decide_columns(keyed)), order)
        bounds = np.searchsorted(parts[order], np.arange(NUM_PARTITIONS + 1))
        groups = [(p, keyed.slice(int(bounds[p]), int(bounds[p + 1] - bounds[p])))
                  for p in range(NUM_PARTITIONS) if bounds[p + 1] > bounds[p]]
    if stage.broadcast:  # no global order needed: the decisions are sets
        return Broadcast([decide_broadcast(stage, p, rows) for p, rows in groups])
    tables = [decide_partition(stage, rows if in_order else sort_partition(rows)) for _, rows in groups]
    return Router(tables, partial(no_decisions, stage))


def run_global_stage(stage: GlobalStage, index: int, batches: list[pa.Table],
                     stats: dict | None = None) -> list[pa.Table]:
    """In-process execution of a GlobalStage over all batches of the corpus:
    :func:`decide_global_stage`, then ``apply`` per batch through its router. A broadcast
    stage's decision statistics are added to ``stats`` (the stage's in the manifest)."""
    router = decide_global_stage(stage, batches)
    if stats is not None:
        add_stats(stats, getattr(router, "stats", {}))
    return [apply_global_batch(stage, index, b, router) for b in batches]


class UniqueIds(GlobalStage):
    """Built in, before every pipeline: the second and later records with the same
    ``doc_id`` (in the global order) are quarantined."""

    kind = "_unique_ids"

    def keys(self, batch: pa.Table) -> pa.Array:
        return pc.cast(batch["doc_id"], pa.binary())

    def decide(self, partition: pa.Table) -> pa.Table:
        """A decision for every row whose ``doc_id`` repeats: where the id was first seen."""
        ids = partition["doc_id"]
        counts = pc.value_counts(ids)
        repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
        rows = np.flatnonzero(pc.is_in(ids, value_set=repeated).to_numpy(zero_copy_only=False)) \
            if len(repeated) else np.zeros(0, np.int64)
        first: dict[str, tuple[int, int]] = {}
        src, line = [], []
        idx = pa.array(rows)
        for d, s, ln in zip(ids.take(idx).to_pylist(), partition["_src"].take(idx).to_pylist(),
                            partition["_line"].take(idx).to_pylist()):
            f = first.setdefault(d, (s, ln))
            src.append(f[0])
            line.append(f[1])
        return pa.table({DECISION_ROW: pa.array(rows, pa.int64()), "first_src": pa.array(src, pa.int64()),
                         "first_line": pa.array(line, pa.int64())})

    def apply(self, batch: pa.Table, decisions: pa.Table) -> pa.Table:
        if decisions["first_src"].null_count == batch.num_rows:
            return batch
        reasons = [None if fs is None or (fs, fl) == (s, ln) else f"duplicate doc_id (first seen in input {fs} line {fl})"
                   for fs, fl, s, ln in zip(decisions["first_src"].to_pylist(), decisions["first_line"].to_pylist(),
                                            batch["_src"].to_pylist(), batch["_line"].to_pylist())]
        if not any(reasons):
            return batch
        return set_column(batch, QUARANTINE, pa.array(reasons, pa.string()))
