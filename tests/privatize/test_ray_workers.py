"""The Ray runner's pieces that run without Ray: the CPU budget per node, the worker
caches, byte-range scans, shard writes, decide tasks and the decision router they
build."""

import numpy as np
import pyarrow as pa
import pytest

from privatize.routing import ORDER_KEY, Router, pack_order


def test_cpu_budget_leaves_a_task_slot_beside_every_actor_on_every_node():
    """Fixed-size actor pools all start: every pool's actors on a node plus one task must
    fit *that node*, or the plan deadlocks (a redact + encrypt_text recipe on 2 CPUs did;
    budgeted on cluster totals, two one-CPU nodes left 0.25 CPU per node for 0.5-CPU
    tasks: the CRT recipe with redaction never finished)."""
    from privatize.ray.cluster import Budget

    for nodes in ([0.5], [1], [1.5], [2], [3], [4], [8], [16], [64], [1, 1], [1, 1, 1], [2, 1], [4, 2, 1], [8, 8]):
        for pools in (1, 2, 3, 4):
            b = Budget.for_nodes(nodes, pools)
            assert b.actor_cpus > 0 and b.task_cpus > 0
            per_node = b.max_actors // len(nodes)
            assert b.max_actors == per_node * len(nodes)
            for cpus in nodes:  # each node holds its share of every pool, and one task beside them
                assert pools * per_node * b.actor_cpus + b.task_cpus <= cpus + 1e-9, (nodes, pools, b)
        # no actors: a task takes a whole CPU (at most the smallest node's)
        assert Budget.for_nodes(nodes, 0).task_cpus == min(1.0, min(nodes))
    # the case that hung: two one-CPU nodes, one redaction pool
    b = Budget.for_nodes([1, 1], 1)
    assert b.max_actors == 2 and b.actor_cpus + b.task_cpus <= 1.0


def test_a_pool_starts_no_more_actors_than_the_blocks_it_will_see():
    """A tiny corpus is one block: a second redaction actor would load spaCy for nothing
    (and Ray Data tears a pool down when its input ends while an actor still starts)."""
    from privatize.ray.cluster import Budget

    b = Budget.for_nodes([4], 1)
    assert b.max_actors == 4
    assert [b.pool_size(n) for n in (None, 0, 1, 3, 4, 9)] == [4, 1, 1, 3, 4, 4]
    compute = b.map_args(True, 1)["compute"]
    assert (compute.min_size, compute.max_size) == (1, 4)  # it may grow when work waits
    assert b.map_args(False, 1) == {"num_cpus": b.task_cpus}


def test_embedded_ray_keeps_a_worker_for_everything_that_runs_at_once():
    """Ray kills idle workers above ``num_workers_soft_limit`` after a second; below the
    plan's concurrency that restarts workers (1.5 s of imports each) all through a run."""
    from privatize.ray.cluster import Budget, local_init_args

    for cpus in (0.5, 1, 1.5, 2, 3, 4, 8, 16):
        limit = local_init_args(cpus)["_system_config"]["num_workers_soft_limit"]
        for pools in (0, 1, 2):
            b = Budget.for_nodes([cpus], pools)
            tasks_at_once = int(cpus / b.task_cpus + 1e-9)
            assert limit >= pools * b.max_actors + tasks_at_once, (cpus, pools, limit)
    assert local_init_args(1)["_system_config"]["num_workers_soft_limit"] == 6  # 4 quarter-CPU tasks + 2 actors


def test_small_files_are_cut_so_every_slot_gets_work():
    """One 1.4 MB file was one block: one redaction actor did all the work."""
    from privatize.ray.reads import MIN_RANGE_BYTES, range_bytes_for

    size = len(b'{"text": "x"}\n' * 100_000)  # one 1.4 MB file
    assert range_bytes_for(size, 64 << 20, 2) == -(-size // 4)
    assert range_bytes_for(size, 64 << 20, 1000) == MIN_RANGE_BYTES
    assert range_bytes_for(size, 100_000, 1) == 100_000  # never above the option


def test_worker_cache_sets_a_stage_up_once_per_run_and_forgets_old_runs(monkeypatch):
    """Cheap-setup stages run as plain tasks: a worker process sets each up once per run
    and keeps what it set up (key-derived state) for its two latest runs only."""
    from privatize.ray import workers
    from privatize.spec import parse_spec

    monkeypatch.setattr(workers, "_LOCAL", {})
    monkeypatch.setattr(workers, "_RUNS", __import__("collections").OrderedDict())
    setups = []

    class Counting:
        def setup(self):
            setups.append(1)

    settings = parse_spec({"stages": [{"kind": "split"}]}).stages[0]

    def ref(run):
        r = workers.StageRef(settings, None, 0, run)
        monkeypatch.setattr(workers.StageRef, "build", lambda self: Counting())
        return r

    first = workers.ready_stage(ref("run-a"))
    assert workers.ready_stage(ref("run-a")) is first and len(setups) == 1
    other = workers.ready_stage(ref("run-b"))
    assert other is not first and len(setups) == 2
    workers.ready_stage(ref("run-c"))  # a third run: run-a's entries go
    assert {k[0] for k in workers._LOCAL} == {"run-b", "run-c"}
    assert workers.ready_stage(ref("run-a")) is not first and len(setups) == 4


def test_only_stages_with_a_heavy_setup_get_actor_pools():
    from privatize.stages import registered_kinds

    heavy = {kind for kind, (_, cls) in registered_kinds().items() if cls.heavy_setup}
    # a spaCy model, a transformer, an LLM client and its cache; encrypt_text only resolves a key
    assert heavy == {"redact", "refill", "synthesize"}
    # mask decides per instance: its entity tagger loads spaCy, its word lists do not
    from privatize.stages.mask import Mask, MaskSettings

    assert Mask(MaskSettings(technique="entity_tagger")).heavy_setup is True
    assert Mask(MaskSettings(technique="allow_list")).heavy_setup is False
    # so does identifiers: its direct identifiers come from the redaction detector
    from privatize.stages.identifiers import Identifiers, IdentifiersSettings

    assert Identifiers(IdentifiersSettings()).heavy_setup is True
    assert Identifiers(IdentifiersSettings(direct="none")).heavy_setup is False


def test_range_scan_streams_in_small_chunks_and_matches_the_whole_range(tmp_path, monkeypatch):
    """``scan_range`` counts lines through a small buffer and stops the JSONL check at the
    first record; its answers equal those computed on the whole range at once."""
    from privatize import byteranges

    lines = [b"", b"  ", b"{not json", b"[1, 2]", b'{"id": "a", "text": "x"}', b"\xff\xfe", b'{"id": "b"}', b""]
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    monkeypatch.setattr(byteranges, "_SCAN_CHUNK", 5)
    size = len(data)
    whole = byteranges.scan_range(str(path), "jsonl", 0, size, size)
    assert whole["start"] == 0 and whole["end"] == size
    assert whole["newlines"] == data.count(b"\n") == 8
    assert whole["nonblank"] and whole["record"]
    assert whole["bad"] == (3, "invalid JSON: Expecting property name enclosed in double quotes")
    # a range starting mid-line begins at the next line; one of blank lines only has no record
    start = data.index(b"[1, 2]") - 2
    part = byteranges.scan_range(str(path), "jsonl", start, size, size)
    assert part["start"] == data.index(b"[1, 2]") and part["newlines"] == 5
    assert part["record"] and part["bad"] == (1, "not a JSON object")
    blank = byteranges.scan_range(str(path), "jsonl", 0, 3, size)
    assert blank == {"start": 0, "end": 4, "newlines": 2, "nonblank": False, "record": False, "bad": None}
    tail = byteranges.scan_range(str(path), "jsonl", data.index(b"\xff"), size, size)
    assert tail["record"] and tail["bad"] == (1, "not UTF-8")


def test_shard_writer_in_place_and_by_bytes_give_the_same_shard(tmp_path, monkeypatch):
    """A write task on the driver's node writes the shard file itself and returns its
    size and SHA-256; elsewhere it returns the bytes. Same shard either way."""
    import hashlib

    from privatize.ray.final import ShardWriter
    from privatize.spec import parse_spec

    rows = pa.table({"doc_id": ["b", "a", "c"], "text": ["two", "one", "three"],
                     "_src": pa.array([0, 0, 0], pa.int32()), "_line": pa.array([2, 1, 3], pa.int64()),
                     "_seg": pa.array([0, 0, 0], pa.int32())})
    output = parse_spec({"stages": [{"kind": "split"}], "output": {"num_shards": 2}}).output
    paths = [str(tmp_path / "s0.parquet"), str(tmp_path / "s1.parquet")]
    w = ShardWriter(output, None, "run", driver_node="node", paths=paths)
    monkeypatch.setattr(ShardWriter, "_on_driver_node", lambda self: False)
    sent = w.write(1, rows)
    assert sent.data and sent.size is None and not (tmp_path / "s1.parquet").exists()
    monkeypatch.setattr(ShardWriter, "_on_driver_node", lambda self: True)
    placed = w.write(1, rows)
    assert placed.data is None
    on_disk = (tmp_path / "s1.parquet").read_bytes()
    assert on_disk == sent.data
    assert placed.size == len(on_disk) and placed.sha256 == hashlib.sha256(on_disk).hexdigest()
    assert placed.rows == sent.rows == 3
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "s1.parquet")["doc_id"].to_pylist() == ["a", "b", "c"]


def _routed(rows):
    """Routed decisions as decide tasks return them: dedup_hit and the row's packed order."""
    src, line, seg, ids = zip(*rows)
    return pa.table({"dedup_hit": [True] * len(ids),
                     ORDER_KEY: pa.array(pack_order(np.array(src), np.array(line), np.array(seg)))})


def _live(src, line, seg, ids):
    return pa.table({"doc_id": ids, "_src": pa.array(src, pa.int32()), "_line": pa.array(line, pa.int64()),
                     "_seg": pa.array(seg, pa.int32())})


def test_pack_order_sorts_in_the_global_order_and_refuses_overflow():
    src, line, seg = np.array([0, 0, 1, 1]), np.array([5, 5, 0, 2]), np.array([0, 3, 9, 0])
    key = pack_order(src, line, seg)
    assert list(np.argsort(key)) == list(np.lexsort((seg, line, src)))
    assert pack_order(np.array([0]), np.array([1 << 32]), np.array([0])) is None
    assert pack_order(np.array([1 << 16]), np.array([0]), np.array([0])) is None


def test_router_aligns_decisions_to_a_batch_s_rows():
    # decisions for rows in two batches, given out of order (as partitions return them)
    router = Router([_routed([(1, 7, 2, "b#2"), (0, 3, 0, "a#0")]), _routed([(0, 3, 4, "a#4"), (1, 7, 0, "b#0")])])
    got = router.for_batch(_live([0] * 4, [3] * 4, [1, 2, 3, 4], ["a#1", "a#2", "a#3", "a#4"]))
    assert got["dedup_hit"].to_pylist() == [None, None, None, True]
    got = router.for_batch(_live([1, 1, 1], [7, 7, 7], [0, 1, 2], ["b#0", "b#1", "b#2"]))
    assert got["dedup_hit"].to_pylist() == [True, None, True]
    assert router.for_batch(_live([], [], [], [])).num_rows == 0


def test_router_without_packable_orders_gives_the_same_answer():
    big = 1 << 33
    t = pa.table({"dedup_hit": [True, True], "_src": pa.array([0, 0], pa.int64()),
                  "_line": pa.array([big, 1], pa.int64()), "_seg": pa.array([0, 0], pa.int64())})
    router = Router([t, _routed([(0, 5, 0, "w")])])
    assert router.by_tuple is not None
    got = router.for_batch(_live([0, 0, 0, 0], [big, 1, 2, 5], [0, 0, 0, 0], ["x", "y", "z", "w"]))
    assert got["dedup_hit"].to_pylist() == [True, True, None, True]
    # rows whose order does not pack, against decisions that all pack
    packed = Router([_routed([(0, 1, 0, "y")])])
    got = packed.for_batch(_live([0, 0], [big, 1], [0, 0], ["x", "y"]))
    assert got["dedup_hit"].to_pylist() == [None, True]


def test_a_stage_that_expands_rows_without_numbering_them_is_refused():
    """Decisions find their rows by the order columns, so they must name one row each:
    two split stages in a row (which the spec refuses) would put "p#0#0" and "p#1#0" both
    at (0, 1, 0); a stage that does so is stopped where it makes the rows."""
    from privatize.execution import check_unique_order, run_stage_batch
    from privatize.stage import Stage

    class Twice(Stage):
        kind = "twice"

        def process_batch(self, batch):
            return pa.concat_tables([batch, batch])

    batch = _live([0, 0], [1, 2], [0, 0], ["a", "b"])
    with pytest.raises(ValueError, match="twice: two rows share their order columns"):
        run_stage_batch(Twice(), 0, batch)
    check_unique_order(_live([0, 0, 1], [1, 1, 0], [0, 1, 0], ["a", "b", "c"]), "ok")  # in order: one pass
    check_unique_order(_live([1, 0, 0], [0, 1, 1], [0, 1, 0], ["c", "b", "a"]), "ok")  # out of order
    with pytest.raises(ValueError, match="share their order"):
        check_unique_order(_live([1, 0, 1], [0, 1, 0], [0, 1, 0], ["c", "b", "a"]), "x")
    big = 1 << 33  # order values that do not pack take the other path, same answer
    check_unique_order(_live([0, 0], [big, big], [0, 1], ["a", "b"]), "ok")
    with pytest.raises(ValueError, match="share their order"):
        check_unique_order(_live([0, 0], [big, big], [1, 1], ["a", "b"]), "x")


def test_router_refuses_two_decisions_for_one_row():
    with pytest.raises(ValueError, match="two decisions for one row"):
        Router([_routed([(0, 1, 0, "a")]), _routed([(0, 1, 0, "a")])])


def test_decide_group_orders_each_partition_once_and_names_the_partitions_it_decided():
    """Keyed rows that reach a decide task out of the global order (blocks finish in any
    order) get the decisions the in-process runner gives: the later copy of each text is
    the hit, whichever piece it came in."""
    from privatize.execution import key_rows, run_global_stage
    from privatize.ray.shuffle import collect_decisions, decide_group
    from privatize.ray.workers import StageRef, ready_stage
    from privatize.spec import parse_spec

    spec = parse_spec({"version": 1, "stages": [{"kind": "dedup", "method": "sha1", "unit": "document"}]})
    ref = StageRef(spec.stages[0], None, 0, "test-run")
    texts = ["alpha one", "beta two", "alpha one", "gamma three", "beta two", "alpha one"]
    blocks = [pa.table({"doc_id": [f"d{i}" for i in range(a, a + 2)], "text": texts[a:a + 2],
                        "_src": pa.array([0, 0], pa.int32()), "_line": pa.array([a + 1, a + 2], pa.int64()),
                        "_seg": pa.array([0, 0], pa.int32())}) for a in (0, 2, 4)]
    keyed = [key_rows(ready_stage(ref), b) for b in blocks]
    out = decide_group(ref, keyed[2], keyed[0], keyed[1])  # the last block first
    assert out.parts == sorted(set(int(p) for k in keyed for p in k["_part"].to_pylist()))
    assert out.seconds > 0
    routed = pa.concat_tables(out.tables)
    assert routed.num_rows == 3
    # each decision carries its row's packed order
    lines = {f"d{i}": i + 1 for i in range(6)}
    assert sorted(routed[ORDER_KEY].to_pylist()) == sorted(
        int(pack_order(np.array([0]), np.array([lines[d]]), np.array([0]))[0]) for d in ("d2", "d4", "d5"))
    router, stats = collect_decisions(ref, 1, out, 0.25)
    assert stats.decisions == 3 and stats.seconds >= 0.25
    # the in-process runner marks the same rows
    inproc = run_global_stage(ready_stage(ref), 0, blocks)
    hits = [d for t in inproc for d, h in zip(t["doc_id"].to_pylist(), t["dedup_hit"].to_pylist()) if h]
    assert sorted(hits) == ["d2", "d4", "d5"]
    assert [router.for_batch(b)["dedup_hit"].to_pylist() for b in blocks] == [[None, None], [True, None],
                                                                              [True, True]]


def test_collect_decisions_refuses_a_partition_decided_twice():
    from privatize.ray.shuffle import Decided, collect_decisions
    from privatize.ray.workers import StageRef
    from privatize.spec import parse_spec

    spec = parse_spec({"version": 1, "stages": [{"kind": "dedup", "method": "sha1", "unit": "document"}]})
    ref = StageRef(spec.stages[0], None, 0, "test-run")
    with pytest.raises(RuntimeError, match="decided in pieces"):
        collect_decisions(ref, 2, Decided([_routed([(0, 9, 0, "b")])], [1, 3]), Decided([], [3]))
    router, stats = collect_decisions(ref, 0)  # nothing keyed: the stage's own empty decisions
    assert stats.decisions == 0 and "dedup_hit" in router.values.column_names


def test_a_broadcast_stage_s_decisions_are_one_table_in_partition_order():
    """A broadcast stage (identifiers) decides sets: every batch gets every partition's
    table, in partition order whatever order the decide tasks finished in, and the
    partitions' statistics summed; a partition decided twice is an error."""
    from privatize.routing import Broadcast

    def part(keys):
        return pa.table({"key": pa.array(keys, pa.string())})

    b = Broadcast([(9, part(["z"]), {"terms": 1}), (2, part(["a", "b"]), {"terms": 2, "ids": 1}), (5, part([]), {})])
    assert b.values["key"].to_pylist() == ["a", "b", "z"] and b.num_decisions == 3
    assert b.stats == {"terms": 3, "ids": 1}
    live = _live([0], [1], [0], ["x"])
    assert b.for_batch(live) is b.for_batch(_live([0], [2], [0], ["y"])) is b.values
    assert Broadcast([]).num_decisions == 0
    with pytest.raises(ValueError, match="decided twice"):
        Broadcast([(1, part(["a"]), {}), (1, part(["b"]), {})])


def test_a_broadcast_decide_task_reads_one_partition_at_a_time():
    """The identifiers stage's keyed rows split by group (each group's piece sorted by hash
    partition) and decided partition by partition give the in-process runner's common
    terms and statistics; pieces that reach the task unsorted are sorted there."""
    from privatize.execution import decide_global_stage
    from privatize.ray.shuffle import collect_decisions, decide_group, split_by_group
    from privatize.ray.workers import StageRef, ready_stage
    from privatize.spec import parse_spec

    spec = parse_spec({"version": 1, "stages": [{"kind": "identifiers", "direct": "none", "max_n": 2}]})
    ref = StageRef(spec.stages[0], None, 0, "test-run-broadcast")
    texts = ["the red fox runs", "a red fox sleeps here", "the blue sky", "blue sky falls on the fox",
             "green fox runs far", "the sky is red"]
    blocks = [pa.table({"doc_id": [f"d{i}" for i in range(a, a + 2)], "individual_id": [f"p{i}" for i in range(a, a + 2)],
                        "text": texts[a:a + 2], "_src": pa.array([0, 0], pa.int32()),
                        "_line": pa.array([a + 1, a + 2], pa.int64()), "_seg": pa.array([0, 0], pa.int32())})
              for a in (0, 2, 4)]
    expected = decide_global_stage(ready_stage(ref), blocks)
    for by_part in (True, False):
        pieces = [split_by_group(b, 2, ref, by_part, None) for b in blocks]
        if by_part:
            for piece in (p for ps in pieces for p in ps[:2]):
                part = piece["_part"].to_numpy()
                assert (part[1:] >= part[:-1]).all()
        decided = [decide_group(ref, *[p[g] for p in pieces]) for g in range(2)]
        router, stats = collect_decisions(ref, 2, *decided, *[p[2] for p in pieces])
        assert sorted(router.values["key"].to_pylist()) == sorted(expected.values["key"].to_pylist())
        assert router.stats == expected.stats and stats.decisions == expected.num_decisions > 0
