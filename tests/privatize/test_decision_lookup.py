"""The Ray runner's decision lookup, without Ray: a batch gets exactly the decisions whose
rows it holds, with their positions among its live rows; values that do not pack fall
back to the doc_id lookup with the same answer."""

import numpy as np
import pyarrow as pa

from privatize.ray_runner import ORDER_HASH, DecisionLookup, index_by_order, pack_order
from privatize.stage import QUARANTINE, ROW


def _batch(src, line, seg, ids, quarantined=()):
    return pa.table({"doc_id": ids, "_src": pa.array(src, pa.int32()), "_line": pa.array(line, pa.int64()),
                     "_seg": pa.array(seg, pa.int32()),
                     QUARANTINE: [("bad" if i in quarantined else None) for i in range(len(ids))]})


def _decisions(rows):
    """Decisions as the decide tasks return them: each with its row's packed order, or
    null where that row's order did not pack."""
    src, line, seg, ids = zip(*rows)
    packed = [None if (k := pack_order(np.array([s]), np.array([ln]), np.array([g]))) is None else int(k[0])
              for s, ln, g in zip(src, line, seg)]
    return pa.table({"doc_id": list(ids), "dedup_hit": [True] * len(ids), ORDER_HASH: pa.array(packed, pa.uint64())})


def test_pack_order_sorts_in_the_global_order_and_refuses_overflow():
    src, line, seg = np.array([0, 0, 1, 1]), np.array([5, 5, 0, 2]), np.array([0, 3, 9, 0])
    key = pack_order(src, line, seg)
    assert list(np.argsort(key)) == list(np.lexsort((seg, line, src)))
    assert pack_order(np.array([0]), np.array([1 << 32]), np.array([0])) is None
    assert pack_order(np.array([1 << 16]), np.array([0]), np.array([0])) is None


def test_batch_gets_its_decisions_with_live_positions():
    # decisions for rows in two batches, given out of order (as partitions return them)
    dec = _decisions([(1, 7, 2, "b#2"), (0, 3, 0, "a#0"), (0, 3, 4, "a#4"), (1, 7, 0, "b#0")])
    lk = DecisionLookup(index_by_order(dec))
    assert lk.by_order
    # batch: a#0 (quarantined: not live), a#1, a#2, a#3, a#4 -> live rows a#1..a#4, a#0 absent
    b = _batch([0] * 5, [3] * 5, [0, 1, 2, 3, 4], ["a#0", "a#1", "a#2", "a#3", "a#4"], quarantined={0})
    got = lk.for_batch(b)
    assert got["doc_id"].to_pylist() == ["a#4"] and got[ROW].to_pylist() == [3]
    b2 = _batch([1, 1, 1], [7, 7, 7], [0, 1, 2], ["b#0", "b#1", "b#2"])
    got = lk.for_batch(b2)
    assert got["doc_id"].to_pylist() == ["b#0", "b#2"] and got[ROW].to_pylist() == [0, 2]


def test_unpackable_order_values_fall_back_to_doc_ids():
    big = 1 << 33
    dec = _decisions([(0, big, 0, "x"), (0, 1, 0, "y")])
    idx = index_by_order(dec)
    assert ORDER_HASH not in idx.column_names and "doc_id" in idx.column_names
    lk = DecisionLookup(idx)
    assert not lk.by_order
    got = lk.for_batch(_batch([0, 0, 0], [big, 1, 2], [0, 0, 0], ["x", "y", "z"]))
    assert sorted(got["doc_id"].to_pylist()) == ["x", "y"]


def test_cpu_budget_leaves_a_task_slot_beside_every_actor():
    """Fixed-size actor pools all start: every pool's actors plus one task must fit the
    cluster, or the plan deadlocks (a redact + encrypt_text recipe on 2 CPUs did)."""
    from privatize.ray_runner import _Budget

    for cpus in (0.5, 1, 1.5, 2, 3, 4, 8, 16, 64):
        for pools in (1, 2, 3, 4):
            b = _Budget.for_cluster(cpus, pools)
            assert b.actor_cpus > 0 and b.task_cpus > 0
            assert pools * b.max_actors * b.actor_cpus + b.task_cpus <= cpus + 1e-9, (cpus, pools, b)
        # no actors: a task takes a whole CPU (at most the cluster's)
        assert _Budget.for_cluster(cpus, 0).task_cpus == min(1.0, cpus)


def test_embedded_ray_keeps_a_worker_for_everything_that_runs_at_once():
    """Ray kills idle workers above ``num_workers_soft_limit`` after a second; below the
    plan's concurrency that restarts workers (1.5 s of imports each) all through a run."""
    from privatize.ray_runner import _Budget, local_init_args

    for cpus in (0.5, 1, 1.5, 2, 3, 4, 8, 16):
        limit = local_init_args(cpus)["_system_config"]["num_workers_soft_limit"]
        for pools in (0, 1, 2):
            b = _Budget.for_cluster(cpus, pools)
            tasks_at_once = int(cpus / b.task_cpus + 1e-9)
            assert limit >= pools * b.max_actors + tasks_at_once, (cpus, pools, limit)
    assert local_init_args(1)["_system_config"]["num_workers_soft_limit"] == 6  # 4 quarter-CPU tasks + 2 actors


def test_worker_cache_sets_a_stage_up_once_per_run_and_forgets_old_runs(monkeypatch):
    """Cheap-setup stages run as plain tasks: a worker process sets each up once per run
    and keeps what it set up (key-derived state) for its two latest runs only."""
    from privatize import ray_runner
    from privatize.spec import parse_spec

    monkeypatch.setattr(ray_runner, "_LOCAL", {})
    monkeypatch.setattr(ray_runner, "_RUNS", __import__("collections").OrderedDict())
    setups = []

    class Counting:
        def setup(self):
            setups.append(1)

    settings = parse_spec({"stages": [{"kind": "split"}]}).stages[0]

    def ref(run):
        r = ray_runner.StageRef(settings, None, 0, run)
        monkeypatch.setattr(ray_runner.StageRef, "build", lambda self: Counting())
        return r

    first = ray_runner.ready_stage(ref("run-a"))
    assert ray_runner.ready_stage(ref("run-a")) is first and len(setups) == 1
    other = ray_runner.ready_stage(ref("run-b"))
    assert other is not first and len(setups) == 2
    ray_runner.ready_stage(ref("run-c"))  # a third run: run-a's entries go
    assert {k[0] for k in ray_runner._LOCAL} == {"run-b", "run-c"}
    assert ray_runner.ready_stage(ref("run-a")) is not first and len(setups) == 4


def test_only_stages_with_a_heavy_setup_get_actor_pools():
    from privatize.stage import registered_kinds

    heavy = {kind for kind, (_, cls) in registered_kinds().items() if cls.heavy_setup}
    assert heavy == {"redact"}  # a spaCy model; encrypt_text only resolves a key


def test_range_scan_streams_in_small_chunks_and_matches_the_whole_range(tmp_path, monkeypatch):
    """``scan_range`` counts lines through a small buffer and stops the JSONL check at the
    first record; its answers equal those computed on the whole range at once."""
    from privatize import ray_runner

    lines = [b"", b"  ", b"{not json", b"[1, 2]", b'{"id": "a", "text": "x"}', b"\xff\xfe", b'{"id": "b"}', b""]
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    monkeypatch.setattr(ray_runner, "_SCAN_CHUNK", 5)
    size = len(data)
    whole = ray_runner.scan_range(str(path), "jsonl", 0, size, size)
    assert whole["start"] == 0 and whole["end"] == size
    assert whole["newlines"] == data.count(b"\n") == 8
    assert whole["nonblank"] and whole["record"]
    assert whole["bad"] == (3, "invalid JSON: Expecting property name enclosed in double quotes")
    # a range starting mid-line begins at the next line; one of blank lines only has no record
    start = data.index(b"[1, 2]") - 2
    part = ray_runner.scan_range(str(path), "jsonl", start, size, size)
    assert part["start"] == data.index(b"[1, 2]") and part["newlines"] == 5
    assert part["record"] and part["bad"] == (1, "not a JSON object")
    blank = ray_runner.scan_range(str(path), "jsonl", 0, 3, size)
    assert blank == {"start": 0, "end": 4, "newlines": 2, "nonblank": False, "record": False, "bad": None}
    tail = ray_runner.scan_range(str(path), "jsonl", data.index(b"\xff"), size, size)
    assert tail["record"] and tail["bad"] == (1, "not UTF-8")


def test_shard_writer_in_place_and_by_bytes_give_the_same_shard(tmp_path, monkeypatch):
    """A write task on the driver's node writes the shard file itself and returns its
    size and SHA-256; elsewhere it returns the bytes. Same shard either way."""
    import hashlib

    from privatize.ray_runner import ShardWriter
    from privatize.spec import parse_spec

    rows = pa.table({"doc_id": ["b", "a", "c"], "text": ["two", "one", "three"],
                     "_src": pa.array([0, 0, 0], pa.int32()), "_line": pa.array([2, 1, 3], pa.int64()),
                     "_seg": pa.array([0, 0, 0], pa.int32())})
    output = parse_spec({"stages": [{"kind": "split"}], "output": {"num_shards": 2}}).output
    paths = [str(tmp_path / "s0.parquet"), str(tmp_path / "s1.parquet")]
    w = ShardWriter(output, None, "run", driver_node="node", paths=paths)
    monkeypatch.setattr(ShardWriter, "_on_driver_node", lambda self: False)
    sent = w.write(1, rows).to_pylist()[0]
    assert sent["data"] and sent["size"] is None and not (tmp_path / "s1.parquet").exists()
    monkeypatch.setattr(ShardWriter, "_on_driver_node", lambda self: True)
    placed = w.write(1, rows).to_pylist()[0]
    assert placed["data"] is None
    on_disk = (tmp_path / "s1.parquet").read_bytes()
    assert on_disk == sent["data"]
    assert placed["size"] == len(on_disk) and placed["sha256"] == hashlib.sha256(on_disk).hexdigest()
    assert placed["rows"] == sent["rows"] == 3
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "s1.parquet")["doc_id"].to_pylist() == ["a", "b", "c"]


def test_rows_sharing_an_order_get_only_the_decision_with_their_id():
    # two split stages in a row renumber _seg: "p#0#0" and "p#1#0" both sit at (0, 1, 0)
    lk = DecisionLookup(index_by_order(_decisions([(0, 1, 0, "p#1#0")])))
    got = lk.for_batch(_batch([0, 0], [1, 1], [0, 0], ["p#0#0", "p#1#0"]))
    assert got["doc_id"].to_pylist() == ["p#1#0"] and got[ROW].to_pylist() == [1]


def test_decide_group_orders_each_partition_once_and_names_the_partitions_it_decided():
    """Keyed rows that reach a decide task out of the global order (blocks finish in any
    order) get the decisions the in-process runner gives: the later copy of each text is
    the hit, whichever piece it came in."""
    import json

    from privatize.execution import key_rows, run_global_stage
    from privatize.ray_runner import RUN_META, StageRef, collect_decisions, decide_group, ready_stage
    from privatize.spec import parse_spec

    spec = parse_spec({"version": 1, "stages": [{"kind": "dedup", "method": "sha1", "unit": "document"}]})
    ref = StageRef(spec.stages[0], None, 0, "test-run")
    texts = ["alpha one", "beta two", "alpha one", "gamma three", "beta two", "alpha one"]
    blocks = [pa.table({"doc_id": [f"d{i}" for i in range(a, a + 2)], "text": texts[a:a + 2],
                        "_src": pa.array([0, 0], pa.int32()), "_line": pa.array([a + 1, a + 2], pa.int64()),
                        "_seg": pa.array([0, 0], pa.int32())}) for a in (0, 2, 4)]
    keyed = [key_rows(ready_stage(ref), b) for b in blocks]
    out = decide_group(ref, keyed[2], keyed[0], keyed[1])  # the last block first
    meta = json.loads(out.schema.metadata[RUN_META])
    assert meta["parts"] == sorted(set(int(p) for k in keyed for p in k["_part"].to_pylist()))
    assert meta["seconds"] > 0
    assert sorted(out["doc_id"].to_pylist()) == ["d2", "d4", "d5"]
    # each decision carries its row's packed order
    lines = {f"d{i}": i + 1 for i in range(6)}
    assert sorted(out[ORDER_HASH].to_pylist()) == sorted(int(pack_order(np.array([0]), np.array([lines[d]]),
                                                                          np.array([0]))[0])
                                                         for d in ("d2", "d4", "d5"))
    # the in-process runner marks the same rows
    stage = ready_stage(ref)
    inproc = run_global_stage(stage, 0, blocks)
    hits = [d for t in inproc for d, h in zip(t["doc_id"].to_pylist(), t["dedup_hit"].to_pylist()) if h]
    assert sorted(hits) == ["d2", "d4", "d5"]


def test_collect_decisions_refuses_a_partition_decided_twice_and_indexes_the_rest():
    import json

    import pytest

    from privatize.ray_runner import RUN_META, StageRef, collect_decisions
    from privatize.spec import parse_spec

    spec = parse_spec({"version": 1, "stages": [{"kind": "dedup", "method": "sha1", "unit": "document"}]})
    ref = StageRef(spec.stages[0], None, 0, "test-run")

    def table(ids, lines, parts):
        t = pa.table({"doc_id": ids, "dedup_hit": [True] * len(ids),
                      ORDER_HASH: pa.array([int(pack_order(np.array([0]), np.array([ln]), np.array([0]))[0])
                                            for ln in lines], pa.uint64())})
        return t.replace_schema_metadata({RUN_META: json.dumps({"parts": parts, "seconds": 0.5}).encode()})

    decisions, stats = collect_decisions(ref, table(["b"], [9], [1, 3]), table(["a"], [2], [0]))
    assert decisions["dedup_hit"].to_pylist() == [True, True]
    assert decisions[ORDER_HASH].to_pylist() == sorted(decisions[ORDER_HASH].to_pylist())  # global order
    assert stats["decisions"] == 2 and stats["seconds"] >= 1.0
    with pytest.raises(RuntimeError, match="decided in pieces"):
        collect_decisions(ref, table(["b"], [9], [1, 3]), table(["a"], [2], [3]))
    empty, stats = collect_decisions(ref)  # nothing keyed: the stage's own empty decisions
    assert empty.num_rows == 0 and "dedup_hit" in empty.column_names and stats["decisions"] == 0
