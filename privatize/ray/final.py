"""The final pass on Ray: as blocks of final rows stream out of the plan, a task per
block counts it (a :class:`~privatize.output.Tally`), keeps its quarantined rows and
splits its output rows by shard; then one task per shard gathers its pieces and writes
the shard (Ray Data's sort-based group-by moved every byte twice more: 0.6x the
in-process runner on the cipher-only spec). The driver merges the tallies and stores the
shards (:func:`finish`).

Each shard is written by :func:`privatize.output.write_shard` from the rows that belong
to it, sorted as the in-process runner sorts them, so the shards are byte-identical.
A write task on the driver's node writes its shard file in place (the run's temporary
directory); elsewhere it returns the bytes for the driver to store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from privatize import allocator
from privatize.execution import QSTAGE, READ_STAGE, concat
from privatize.output import (OutputWriter, Tally, prepare_output, sha256_file, shard_bytes, shard_of, write_shard)
from privatize.ray import cluster
from privatize.ray.workers import pseudonym_key, take_infos
from privatize.spec import OutputSettings
from privatize.stage import ORDER_COLUMNS, QUARANTINE


@dataclass
class BlockSummary:
    """One block of final rows, counted: its tally, quarantined rows and schema."""

    tally: Tally
    quarantined: pa.Table | None
    schema: pa.Schema | None


@dataclass
class WrittenShard:
    """A shard a write task produced: its bytes (``data``), or, written in place on the
    driver's node (``data`` None), its size and SHA-256."""

    shard: int
    rows: int
    schema: pa.Schema
    key_id: str | None
    data: bytes | None = None
    size: int | None = None
    sha256: str | None = None


class FinalPass:
    """A block of final rows -> its :class:`BlockSummary` and its output rows by shard
    (each block's own schema: the write task concatenates them as the in-process runner
    does)."""

    def __init__(self, num_stages: int, num_shards: int):
        self.num_stages = num_stages
        self.num_shards = num_shards

    def split(self, batch: pa.Table) -> tuple[BlockSummary, dict[int, pa.Table]]:
        rows, infos = take_infos(batch)
        tally = Tally(self.num_stages)
        for info in infos:
            if info.stage == READ_STAGE:
                tally.input_records += info.records_in
            else:
                tally.add_timing(info.stage, info.records_in, info.records_out, info.seconds)
                tally.key_ids.update({f"stages.{info.stage}.{k}": v for k, v in info.key_ids.items()})
        per_shard: dict[int, pa.Table] = {}
        quarantined = None
        if not rows.num_rows:
            return BlockSummary(tally, None, None), per_shard
        schema = rows.schema
        out, q, _ = tally.add_final_rows(rows)
        if q.num_rows:
            quarantined = q.select([c for c in ("doc_id", QUARANTINE, QSTAGE, "text", *ORDER_COLUMNS)
                                    if c in q.column_names])
        if out.num_rows:
            out = out.select([c for c in out.column_names if not c.startswith("_") or c in ORDER_COLUMNS])
            shard = shard_of(out["doc_id"], self.num_shards)
            for i in np.unique(shard):
                per_shard[int(i)] = out.filter(pa.array(shard == i))
        return BlockSummary(tally, quarantined, schema), per_shard


def sort_shard_rows(rows: pa.Table) -> pa.Table:
    """Rows of one shard in the output order: by ``doc_id`` (ties, which only a corpus
    with clashing ids can have, in the global order)."""
    keys = [("doc_id", "ascending")] + [(c, "ascending") for c in ORDER_COLUMNS if c in rows.column_names]
    return rows.take(pc.sort_indices(rows, sort_keys=keys))


class ShardWriter:
    """All rows of one shard -> the shard. The pseudonym key is resolved here, on the
    worker. A task on the driver's node writes the shard file in place (``paths``: the
    output's shard files before the commit); elsewhere it returns the bytes (sending a
    1 GB output through the object store to the driver cost 12% of a one-core run)."""

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

    def write(self, shard: int, rows: pa.Table) -> WrittenShard:
        key, key_id = pseudonym_key(self.output.pseudonym_key, self.base_dir, self.run)
        table = prepare_output(sort_shard_rows(rows), meta_keys=self.output.meta_keys, pseudonym_key=key)
        if self._on_driver_node():
            # straight into the file in the run's temporary directory, as in-process (built
            # in memory first, the bytes were copied twice more: 1.4 s of a 1 GB cipher run)
            path = Path(self.paths[shard])
            write_shard(table, path)
            return WrittenShard(shard, table.num_rows, table.schema, key_id, size=path.stat().st_size,
                                sha256=sha256_file(path))
        return WrittenShard(shard, table.num_rows, table.schema, key_id, data=shard_bytes(table))


def final_split(block: pa.Table, final: FinalPass, bounds: tuple[int, int] | None):
    """One block of final rows -> ``num_shards + 1`` objects: the block's summary, then
    each shard's output rows (an empty table where the block has none)."""
    allocator.tune()
    summary, per_shard = final.split(cluster.in_bounds(block, bounds))
    return (summary, *(per_shard.get(s, pa.table({})) for s in range(final.num_shards)))


def write_shard_task(writer: ShardWriter, shard: int, *pieces: pa.Table) -> WrittenShard | None:
    """Every piece of one shard -> the written shard (None: no rows)."""
    allocator.tune()
    rows = [p for p in pieces if p.num_rows]
    return writer.write(shard, concat(rows)) if rows else None


class LiveSummaries:
    """The final pass's block summaries as they finish, counted into the run's progress
    figures (:class:`privatize.progress.RunProgress`): records read and each stage's records
    in and out, for every block through all of the stages so far."""

    def __init__(self, figures, guard=None):
        self.figures, self.guard = figures, guard
        self.pending: list = []

    def add(self, refs) -> None:
        self.pending.append(refs[0])
        self.poll(0)

    def poll(self, timeout: float) -> None:
        import ray

        if not self.pending:
            return
        ready, self.pending = ray.wait(self.pending, num_returns=len(self.pending), timeout=timeout)
        if not ready:
            return
        if self.guard is not None:
            self.guard.tick()
        for s in cluster.get(ready, self.guard):
            t = s.tally
            self.figures.add_block(t.input_records,
                                   {i: st.records_in for i, st in t.stages.items() if i != READ_STAGE},
                                   {i: st.records_out for i, st in t.stages.items() if i != READ_STAGE})

    def drain(self) -> None:
        while self.pending:
            self.poll(1.0)


def write_shards(ds, final: FinalPass, writer: ShardWriter, task_cpus: float, guard=None, figures=None):
    """Start the final pass and the shard writes; yields the block summaries, then the
    written shards. ``figures`` (a ``RunProgress``) counts the blocks as they finish."""
    n = final.num_shards
    write = cluster.task(write_shard_task, num_cpus=task_cpus)
    live = LiveSummaries(figures, guard) if figures is not None else None
    pieces = cluster.block_pieces(ds, final_split, n + 1, task_cpus, final, guard=guard,
                                  on_piece=None if live is None else live.add)
    summaries = [p[0] for p in pieces]
    shard_refs = [write.remote(writer, s, *[p[s + 1] for p in pieces]) for s in range(n)]
    del pieces
    if live is not None:
        live.drain()
    yield from cluster.get(summaries, guard)
    for ref in shard_refs:
        written = cluster.get(ref, guard)
        if written is not None:
            yield written


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    cols = [table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
            for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def finish(results, writer: OutputWriter, output: OutputSettings, num_stages: int):
    """Merge the summaries and store the shards as they arrive: (tally, quarantined rows in
    the global order or None, shard entries for the manifest)."""
    tally = Tally(num_stages)
    schemas: list[pa.Schema] = []
    quarantined: list[pa.Table] = []
    shards: dict[int, WrittenShard] = {}
    for r in results:
        if isinstance(r, BlockSummary):
            tally.merge(r.tally)
            if r.schema is not None and not any(r.schema.equals(s) for s in schemas):
                schemas.append(r.schema)
            if r.quarantined is not None:
                quarantined.append(r.quarantined)
        else:
            if r.shard in shards:
                raise RuntimeError(f"shard {r.shard} was written in pieces")
            shards[r.shard] = r
            if r.key_id:
                tally.key_ids["output.pseudonym_key"] = r.key_id
    qrows = concat(quarantined).sort_by([(c, "ascending") for c in ORDER_COLUMNS]) if quarantined else None
    # the output schema: the in-process runner concatenates every final batch
    # (permissive promotion) before it splits off the output rows
    target = None
    if schemas:
        unified = pa.unify_schemas(schemas, promote_options="permissive")
        target = prepare_output(unified.empty_table(), meta_keys=output.meta_keys, pseudonym_key=None).schema
    return tally, qrows, [_store(writer, i, shards.get(i), target) for i in range(output.num_shards)]


def _store(writer: OutputWriter, i: int, w: WrittenShard | None, target: pa.Schema | None) -> dict:
    """The manifest entry of shard ``i``, stored (or adopted where a task wrote it in place)."""
    if w is None:
        empty = target.empty_table() if target is not None else pa.table({"doc_id": pa.array([], pa.string())})
        return writer.put_shard(i, shard_bytes(empty), 0)
    if target is not None and not w.schema.equals(target):
        # a shard whose rows lacked a column other batches have: same rows, the run's
        # schema (rare; written here rather than in the task)
        data = w.data if w.data is not None else writer.shard_path(i).read_bytes()
        return writer.put_shard(i, shard_bytes(_conform(pq.read_table(pa.BufferReader(data)), target)), w.rows)
    if w.data is None:  # written in place by a task on this node
        return writer.adopt_shard(i, w.rows, w.size, w.sha256)
    return writer.put_shard(i, w.data, w.rows)
