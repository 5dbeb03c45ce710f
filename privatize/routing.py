"""Routing a GlobalStage's decisions to the rows they are for: the one mechanism both
runners use.

``decide(partition)`` returns its decisions with the position in ``partition`` of the row
each is for (the column :data:`DECISION_ROW`; see :class:`privatize.stage.GlobalStage`).
The runner turns a position into the row's identity, its order columns (``_src``,
``_line``, ``_seg``: unique per row, checked where a stage expands rows:
:func:`privatize.execution.check_unique_order`), with :func:`routed`; a
:class:`Router` built from every partition's routed decisions then gives each batch of
``apply`` a table *aligned to its live rows*: row ``i`` holds the decision for live row
``i``, nulls where there is none.

The order columns are packed into one ``uint64`` (:func:`pack_order`) wherever they fit
(16, 32 and 16 bits): the router then sorts the keys once and a batch finds its rows by
binary search within the stretch of the global order it covers. Where they do not fit (over 65,535 input files, say) it looks rows up in a
dictionary of order tuples: slower, the same answer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from privatize.stage import DECISION_ROW, ORDER_COLUMNS, add_stats

ORDER_KEY = "_k"
"""Routed decisions: the row's order columns packed (:func:`pack_order`)."""

_PACK = ((0, 16), (16, 32), (48, 16))  # (shift, bits) of _seg, _line, _src in the packed key


def pack_rows(src: np.ndarray, line: np.ndarray, seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, fits): (``_src``, ``_line``, ``_seg``) packed into one uint64 per row that
    sorts in the global order (16, 32 and 16 bits), and which rows' values fit (the key of
    a row that does not is meaningless)."""
    out = np.zeros(len(src), np.uint64)
    fits = np.ones(len(src), bool)
    for values, (shift, bits) in zip((seg, line, src), _PACK):
        v = values.astype(np.int64, copy=False)
        fits &= (v >= 0) & (v < (1 << bits))
        out |= (v.astype(np.uint64) & np.uint64((1 << bits) - 1)) << np.uint64(shift)
    return out, fits


def pack_order(src: np.ndarray, line: np.ndarray, seg: np.ndarray) -> np.ndarray | None:
    """:func:`pack_rows`' keys, or None where some value does not fit."""
    out, fits = pack_rows(src, line, seg)
    return out if fits.all() else None


def unpack_order(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inverse of :func:`pack_order`: (``_src``, ``_line``, ``_seg``)."""
    seg, line, src = ((key >> np.uint64(shift)) & np.uint64((1 << bits) - 1) for shift, bits in _PACK)
    return src.astype(np.int64), line.astype(np.int64), seg.astype(np.int64)


def packed_order(rows: pa.Table) -> np.ndarray | None:
    cols = [rows[c] for c in ORDER_COLUMNS]
    if any(c.null_count for c in cols):
        return None
    return pack_order(*(c.to_numpy() for c in cols))


def decision_positions(kind: str, decided: pa.Table, n: int) -> tuple[np.ndarray, pa.Table]:
    """(positions, decision values) of what ``decide`` returned for a partition of ``n``
    rows; a clear error for a stage that broke the contract."""
    if DECISION_ROW not in decided.column_names:
        raise ValueError(f"{kind}: decide() must return the column {DECISION_ROW!r} (each decision's row)")
    col = decided[DECISION_ROW]
    at = col.to_numpy() if not col.null_count else None
    if at is None or ((at < 0) | (at >= n)).any():
        raise ValueError(f"{kind}: decide() returned a decision for a row not in its partition")
    return at.astype(np.int64, copy=False), decided.drop_columns([DECISION_ROW])


def routed(kind: str, decided: pa.Table, partition: pa.Table, packed: np.ndarray | None = None) -> pa.Table:
    """``decide``'s result for ``partition`` -> decision values with their rows' identity
    (:data:`ORDER_KEY`, or the order columns). ``packed``: the partition's packed order,
    when the caller has it."""
    at, values = decision_positions(kind, decided, partition.num_rows)
    out = {c: values[c] for c in values.column_names}
    if packed is None:
        rows = partition.select(list(ORDER_COLUMNS)).take(pa.array(at))
        packed_rows = packed_order(rows)
        if packed_rows is None:
            return pa.table({**out, **{c: rows[c] for c in ORDER_COLUMNS}})
        return pa.table({**out, ORDER_KEY: pa.array(packed_rows)})
    return pa.table({**out, ORDER_KEY: pa.array(packed[at])})


class Broadcast:
    """The decisions of a broadcast GlobalStage (``GlobalStage.broadcast``): every
    partition's table, in partition order, and their statistics summed; :meth:`for_batch`
    gives every batch the whole table (the same object, so a stage may index it once)."""

    def __init__(self, parts: list[tuple[int, pa.Table, dict]]):
        parts = sorted(parts, key=lambda x: x[0])
        if len({p for p, _, _ in parts}) != len(parts):
            raise ValueError("a hash partition was decided twice")
        tables = [t for _, t, _ in parts if t.num_rows]
        self.values = pa.concat_tables(tables).combine_chunks() if tables else pa.table({})
        self.stats: dict = {}
        for _, _, st in parts:
            add_stats(self.stats, {k: int(v) for k, v in st.items()})

    @property
    def num_decisions(self) -> int:
        return self.values.num_rows

    def for_batch(self, live: pa.Table) -> pa.Table:
        return self.values


class Router:
    """Every routed decision of one GlobalStage run, indexed once; :meth:`for_batch`
    gives a batch's live rows their decisions, aligned. ``empty``: makes the decision
    columns (``decide`` over no rows), called only for a run without decisions."""

    def __init__(self, tables: list[pa.Table], empty: Callable[[], pa.Table] | None = None):
        tables = [t for t in tables if t.num_rows]
        self.keys = np.zeros(0, np.uint64)
        self.by_tuple: dict | None = None
        if not tables:
            if empty is None:
                raise ValueError("a router without decisions needs the decision columns (decide over no rows)")
            none = empty()
            self.values = none.drop_columns([c for c in none.column_names if c == DECISION_ROW]).slice(0, 0)
            return
        if all(ORDER_KEY in t.column_names for t in tables):
            key = np.concatenate([t[ORDER_KEY].to_numpy() for t in tables])
            order = np.argsort(key, kind="stable")  # timsort: one sorted run per partition
            self.keys = key[order]
            if len(key) > 1 and (self.keys[1:] == self.keys[:-1]).any():
                raise ValueError(_TWICE)
            table = pa.concat_tables([t.drop_columns([ORDER_KEY]) for t in tables], promote_options="permissive")
            table = pa.table({c: table[c].take(pa.array(order)).combine_chunks() for c in table.column_names})
        else:
            table = pa.concat_tables([_with_order_columns(t) for t in tables], promote_options="permissive")
            self.by_tuple = {}
            for i, k in enumerate(zip(*(table[c].to_pylist() for c in ORDER_COLUMNS))):
                if k in self.by_tuple:
                    raise ValueError(_TWICE)
                self.by_tuple[k] = i
            table = table.drop_columns(list(ORDER_COLUMNS))
        self.values = table

    @property
    def num_decisions(self) -> int:
        return self.values.num_rows

    def for_batch(self, live: pa.Table) -> pa.Table:
        """Decisions aligned to ``live`` (rows no earlier stage marked)."""
        at = np.full(live.num_rows, -1, np.int64)
        if self.values.num_rows and live.num_rows:
            row, dec = self._lookup_tuples(live) if self.by_tuple is not None else self._lookup_keys(live)
            at[row] = dec
        idx = pa.array(at, mask=at < 0)
        return pa.table({c: self.values[c].take(idx) for c in self.values.column_names})

    def _lookup_keys(self, live: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        # every decision's order packed, so a row whose order does not has none
        q, ok = pack_rows(*(live[c].to_numpy(zero_copy_only=False) for c in ORDER_COLUMNS))
        q = q[ok]
        if not len(q):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        # a batch covers a short stretch of the global order: search that stretch only
        lo = int(np.searchsorted(self.keys, q.min(), "left"))
        hi = int(np.searchsorted(self.keys, q.max(), "right"))
        if hi <= lo:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        near = self.keys[lo:hi]
        at = np.minimum(np.searchsorted(near, q), len(near) - 1)
        hit = np.flatnonzero(near[at] == q)
        return np.flatnonzero(ok)[hit], at[hit] + lo

    def _lookup_tuples(self, live: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        find = self.by_tuple.get
        found = [find(k, -1) for k in zip(*(live[c].to_pylist() for c in ORDER_COLUMNS))]
        dec = np.array(found, np.int64)
        row = np.flatnonzero(dec >= 0)
        return row, dec[row]


_TWICE = "two decisions for one row: decide() returned a position twice"


def _with_order_columns(t: pa.Table) -> pa.Table:
    if ORDER_KEY not in t.column_names:
        return t
    src, line, seg = unpack_order(t[ORDER_KEY].to_numpy())
    return pa.table({**{c: t[c] for c in t.column_names if c != ORDER_KEY},
                     "_src": pa.array(src), "_line": pa.array(line), "_seg": pa.array(seg)})
