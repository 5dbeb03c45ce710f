import pyarrow as pa
import pyarrow.compute as pc
import pytest

from privatize.execution import (DROP, DSTAGE, QSTAGE, QUARANTINE, UniqueIds, concat, partition_of,
                                 run_global_stage, run_stage_batch, split_marked)
from privatize.stage import DECISION_ROW, NUM_PARTITIONS, Stage
from privatize.stages.dedup import Dedup, DedupSettings


class _Upper(Stage):
    """A minimal stage for exercising the execution helpers: upper-cases text, and
    quarantines (unchanged) a row whose text is "bad"."""

    kind = "_upper_test"

    def __init__(self):
        super().__init__(None)
        self.seen = 0

    def process_batch(self, batch):
        self.seen += batch.num_rows
        bad = pc.equal(batch["text"], "bad")
        text = pc.if_else(bad, batch["text"], pc.utf8_upper(batch["text"]))
        out = batch.set_column(batch.schema.get_field_index("text"), "text", text)
        out = out.append_column("_quarantine", pc.if_else(bad, "cannot", pa.scalar(None, pa.string())))
        return out.append_column("_stat.n", pa.array([1] * batch.num_rows))


def _rows(ids, texts, src=0):
    n = len(ids)
    return pa.table({"doc_id": ids, "text": texts, "_src": pa.array([src] * n, pa.int32()),
                     "_line": pa.array(range(1, n + 1), pa.int64()), "_seg": pa.array([0] * n, pa.int32())})


def test_marked_rows_pass_untouched_and_stats_are_namespaced():
    b = _rows(["a", "b", "c"], ["x", "bad", "y"])
    stage = _Upper()
    out = run_stage_batch(stage, 3, b)
    assert stage.seen == 3
    d = {r["doc_id"]: r for r in out.to_pylist()}
    assert d["a"]["text"] == "X" and d["b"]["_quarantine"] == "cannot" and d["b"][QSTAGE] == 3
    assert d["a"][QSTAGE] is None and d["a"]["_stat.3.n"] == 1
    # a second stage does not see the quarantined row, and keeps its original stage tag
    stage2 = _Upper()
    out2 = run_stage_batch(stage2, 4, out)
    assert stage2.seen == 2
    d2 = {r["doc_id"]: r for r in out2.to_pylist()}
    assert d2["b"][QSTAGE] == 3 and d2["b"]["text"] == "bad"
    assert d2["a"]["text"] == "X" and d2["c"]["text"] == "Y" and d2["a"]["_stat.4.n"] == 1 and d2["a"]["_stat.3.n"] == 1


@pytest.mark.parametrize("marks", [
    [None, None, "q", None, "d"],  # interleaved: filtered
    [None, None, None, "q", "d"],  # a tail (the Ray runner's info rows): sliced
    [None] * 5,
    ["q", "d", "q", "d", "q"],
])
def test_split_marked_keeps_every_row_once_in_order(marks):
    b = _rows(list("abcde"), list("vwxyz"))
    b = b.append_column(QUARANTINE, pa.array([m if m == "q" else None for m in marks], pa.string()))
    b = b.append_column(DROP, pa.array([m if m == "d" else None for m in marks], pa.string()))
    live, marked = split_marked(b)
    assert live["doc_id"].to_pylist() == [i for i, m in zip("abcde", marks) if m is None]
    want = [i for i, m in zip("abcde", marks) if m is not None]
    assert (marked["doc_id"].to_pylist() if marked is not None else []) == want
    assert live.schema == b.schema


def test_partition_is_stable_and_in_range():
    keys = pa.array([b"alpha", b"beta", None, b"alpha"])
    p = partition_of(keys)
    assert p[0] == p[3] and p[2] == -1 and 0 <= p[1] < NUM_PARTITIONS
    # fixed value: blake2b-64 little-endian of b"alpha" mod 64, computed independently
    import hashlib
    assert p[0] == int.from_bytes(hashlib.blake2b(b"alpha", digest_size=8).digest(), "little") % NUM_PARTITIONS


def test_unique_ids_quarantines_later_duplicates_in_global_order_any_batching():
    a = _rows(["d1", "d2", "d1"], ["t1", "t2", "t3"], src=0)
    b = _rows(["d2", "d3"], ["t4", "t5"], src=1)
    whole = concat([a, b])
    expected = {("d1", 0, 3), ("d2", 1, 1)}  # (doc_id, src, line) of the rows to quarantine
    for size in (1, 2, 5):
        batches = [whole.slice(i, size) for i in range(0, whole.num_rows, size)]
        out = concat(run_global_stage(UniqueIds(), -1, batches))
        got = {(r["doc_id"], r["_src"], r["_line"]) for r in out.to_pylist() if r.get("_quarantine")}
        assert got == expected, size
        assert out.num_rows == 5 and DSTAGE not in out.column_names


def test_partition_of_digest_keys_uses_their_first_bytes():
    import hashlib

    digests = [hashlib.sha1(str(i).encode()).digest() for i in range(50)]
    keys = pa.array(digests + [None], pa.binary(20))
    p = partition_of(keys)
    assert p[-1] == -1
    assert list(p[:-1]) == [int.from_bytes(d[:8], "little") % NUM_PARTITIONS for d in digests]
    assert list(partition_of(keys.slice(10, 5))) == list(p[10:15])


def _dedup_batches(texts, size):
    rows = _rows([f"d{i}" for i in range(len(texts))], texts)
    return [rows.slice(i, size) for i in range(0, rows.num_rows, size)]


def _masked(batches):
    return {r["doc_id"] for b in batches for r in b.to_pylist() if r["dedup_hit"]}


def test_global_stage_routes_the_same_in_and_out_of_the_global_order():
    texts = ["a", "b", "a", "c", "b", "a", "d", "c"]
    expected = {"d2", "d4", "d5", "d7"}
    batches = _dedup_batches(texts, 3)
    assert _masked(run_global_stage(Dedup(DedupSettings()), 1, batches)) == expected
    # batches out of the global order: each partition is then sorted by the order columns
    assert _masked(run_global_stage(Dedup(DedupSettings()), 1, batches[::-1])) == expected


def test_global_stage_rejects_a_decision_for_a_row_outside_its_partition_or_twice():
    class Stray(Dedup):
        def decide(self, partition):
            out = super().decide(partition)
            return out.set_column(out.schema.get_field_index(DECISION_ROW), DECISION_ROW,
                                  pc.add(out[DECISION_ROW], 10_000))

    class Twice(Dedup):
        def decide(self, partition):
            out = super().decide(partition)
            return pa.concat_tables([out, out])

    with pytest.raises(ValueError, match="not in its partition"):
        run_global_stage(Stray(DedupSettings()), 1, _dedup_batches(["a", "a"], 1))
    with pytest.raises(ValueError, match="two decisions for one row"):
        run_global_stage(Twice(DedupSettings()), 1, _dedup_batches(["a", "a"], 1))
