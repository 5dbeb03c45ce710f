"""The Ray runner's decision lookup, without Ray: a batch gets exactly the decisions whose
rows it holds, with their positions among its live rows; values that do not pack fall
back to the doc_id lookup with the same answer."""

import numpy as np
import pyarrow as pa

from privatize.ray_runner import DecisionLookup, index_by_order, pack_order
from privatize.stage import QUARANTINE, ROW


def _batch(src, line, seg, ids, quarantined=()):
    return pa.table({"doc_id": ids, "_src": pa.array(src, pa.int32()), "_line": pa.array(line, pa.int64()),
                     "_seg": pa.array(seg, pa.int32()),
                     QUARANTINE: [("bad" if i in quarantined else None) for i in range(len(ids))]})


def _decisions(rows):
    src, line, seg, ids = zip(*rows)
    return pa.table({"doc_id": list(ids), "dedup_hit": [True] * len(ids),
                     "_k_src": pa.array(src, pa.int64()), "_k_line": pa.array(line, pa.int64()),
                     "_k_seg": pa.array(seg, pa.int64())})


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
    assert "_k" not in idx.column_names and "_k_line" not in idx.column_names
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


def test_embedded_ray_keeps_a_worker_for_everything_that_runs_at_once():
    """Ray kills idle workers above ``num_workers_soft_limit`` after a second; below the
    plan's concurrency that restarts workers (1.5 s of imports each) all through a run."""
    from privatize.ray_runner import _Budget, local_init_args

    for cpus in (0.5, 1, 1.5, 2, 3, 4, 8, 16):
        limit = local_init_args(cpus)["_system_config"]["num_workers_soft_limit"]
        for pools in (0, 1, 2):
            b = _Budget.for_cluster(cpus, max(pools, 1))
            tasks_at_once = int(cpus / b.task_cpus + 1e-9)
            assert limit >= pools * b.max_actors + tasks_at_once, (cpus, pools, limit)
    assert local_init_args(1)["_system_config"]["num_workers_soft_limit"] == 6  # 4 quarter-CPU tasks + 2 actors
