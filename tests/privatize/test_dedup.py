import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privatize import run
from privatize.errors import SpecError
from privatize.spec import parse_spec
from privatize.stage import DECISION_ROW, NUM_PARTITIONS, ORDER_COLUMNS
from privatize.stages.dedup import Dedup, DedupSettings, first_occurrences
from privatize.stages.split import Split, SplitSettings

A = [{"id": "a1", "text": "The sky is blue today. I like tea. The sky is blue today."},
     {"id": "a2", "text": "Hello there friend. I like tea."}]
B = [{"id": "b1", "text": "I like tea. Something new here."},
     {"id": "b2", "text": "Hello there friend. The sky is blue today."}]

# By hand: the global order is a.jsonl before b.jsonl, then line, then segment.
SEGMENTS = {
    "a1#0": "The sky is blue today.", "a1#1": "I like tea.", "a1#2": "The sky is blue today.",
    "a2#0": "Hello there friend.", "a2#1": "I like tea.",
    "b1#0": "I like tea.", "b1#1": "Something new here.",
    "b2#0": "Hello there friend.", "b2#1": "The sky is blue today.",
}
REPEATS = {"a1#2", "a2#1", "b1#0", "b2#0", "b2#1"}
REPEATS_MIN12 = {"a1#2", "b2#0", "b2#1"}  # "I like tea." (11 chars) is left alone


@pytest.fixture()
def corpus(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    # b.jsonl written first: order comes from sorted paths, not creation or listing order
    (d / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in B))
    (d / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in A))
    return d


def _run(tmp_path, corpus, name, batch_size=1000, **dedup):
    spec = parse_spec({"stages": [{"kind": "split"}, {"kind": "dedup", **dedup}, {"kind": "split_private"}],
                       "output": {"num_shards": 3}})
    m = run(spec, corpus, tmp_path / name, batch_size=batch_size)
    rows = {r["doc_id"]: r for p in sorted((tmp_path / name / "shards").glob("*.parquet"))
            for r in pq.read_table(p).to_pylist()}
    return m, rows


@pytest.mark.parametrize("method", ["sha1", "bloom"])
def test_masks_from_second_occurrence_in_global_order_any_batch_size(tmp_path, corpus, method):
    shards = set()
    for bs in (1, 7, 1000):
        m, rows = _run(tmp_path, corpus, f"o{bs}{method}", bs, method=method)
        assert set(rows) == set(SEGMENTS)
        for doc_id, text in SEGMENTS.items():
            r = rows[doc_id]
            assert r["text"] == ("<MASK>" if doc_id in REPEATS else text), (bs, doc_id)
            assert r["dedup_hit"] == (doc_id in REPEATS)
            assert r["private"] == (doc_id in REPEATS)
        shards.add(tuple(s["sha256"] for s in m["shards"]))
        st_ = m["stages"][1]["stats"]
        assert st_["dedup_hits"] == 5
        assert st_["masked_chars"] == sum(len(SEGMENTS[d]) for d in REPEATS)
        assert st_["chars"] == sum(len(t) for t in SEGMENTS.values())
        assert m["stages"][0]["stats"] == {"segments": 9, "expanded": 5}
        assert m["stages"][2]["stats"] == {"private": 5, "public": 4}
        assert all(s["reconciled"] for s in m["stages"])
    assert len(shards) == 1


def test_min_length_and_drop(tmp_path, corpus):
    _, rows = _run(tmp_path, corpus, "min", min_length=12)
    assert {d for d, r in rows.items() if r["dedup_hit"]} == REPEATS_MIN12
    m, rows = _run(tmp_path, corpus, "drop", action="drop")
    assert set(rows) == set(SEGMENTS) - REPEATS
    assert all(r["text"] == SEGMENTS[d] for d, r in rows.items())
    assert m["counts"]["dropped"] == 5 and m["stages"][1]["dropped"] == 5
    assert m["stages"][1]["records_in"] == 9 and m["stages"][1]["records_out"] == 4
    assert m["stages"][1]["stats"]["masked_chars"] == sum(len(SEGMENTS[d]) for d in REPEATS)


def test_document_unit_without_split(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["same", "other", "same", "same"]))
    spec = parse_spec({"stages": [{"kind": "dedup", "unit": "document"}], "output": {"num_shards": 1}})
    run(spec, p, tmp_path / "o")
    rows = pq.read_table(tmp_path / "o" / "shards" / "part-00000-of-00001.parquet").to_pylist()
    assert {r["doc_id"]: r["text"] for r in rows} == {"c.jsonl:1": "same", "c.jsonl:2": "other",
                                                      "c.jsonl:3": "<MASK>", "c.jsonl:4": "<MASK>"}


# ---- a small driver of our own: keys / decide / apply called directly ------------------

def _documents(files: dict[str, list[dict]]) -> pa.Table:
    rows = [{"doc_id": r["id"], "text": r["text"], "individual_id": None, "meta": None, "_src": src,
             "_line": line, "_seg": 0}
            for src, name in enumerate(sorted(files)) for line, r in enumerate(files[name], start=1)]
    schema = pa.schema([("doc_id", pa.string()), ("text", pa.string()), ("individual_id", pa.string()),
                        ("meta", pa.string()), ("_src", pa.int32()), ("_line", pa.int64()), ("_seg", pa.int32())])
    return pa.Table.from_pylist(rows, schema=schema)


def drive(stage: Dedup, batches: list[pa.Table], partition_of=None) -> list[pa.Table]:
    """The GlobalStage contract by hand: keys per batch, any partitioning that sends equal
    keys together, each partition sorted by the global order, apply per batch with the
    decisions of its rows."""
    keyed = []
    for b in batches:
        k = stage.keys(b)
        assert len(k) == b.num_rows
        t = pa.table({"doc_id": b["doc_id"], "key": k, **{c: b[c] for c in ORDER_COLUMNS}})
        keyed.append(t.filter(pc.is_valid(t["key"])))
    allk = pa.concat_tables(keyed)
    part = np.array([partition_of(k) if partition_of else k[-1] % NUM_PARTITIONS
                     for k in allk["key"].to_pylist()], dtype=np.int64)
    hit_of = {}  # doc_id -> its decision (segment ids are unique here)
    for p in np.unique(part):
        sub = allk.filter(pa.array(part == p)).sort_by([(c, "ascending") for c in ORDER_COLUMNS])
        dec = stage.decide(sub)
        hit_of.update(zip(sub["doc_id"].take(dec[DECISION_ROW]).to_pylist(), dec["dedup_hit"].to_pylist()))
    # apply gets its decisions aligned to the batch's rows, nulls where there is none
    return [stage.apply(b, pa.table({"dedup_hit": pa.array([hit_of.get(d) for d in b["doc_id"].to_pylist()],
                                                           pa.bool_())})) for b in batches]


def _in_batches(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(i, size) for i in range(0, table.num_rows, size)]


@pytest.mark.parametrize("batch_size", [1, 7, 1000])
@pytest.mark.parametrize("method", ["sha1", "bloom"])
def test_driver_gives_the_hand_computed_masks_for_any_batch_size(batch_size, method):
    docs = _documents({"a.jsonl": A, "b.jsonl": B})
    segs = pa.concat_tables([Split(SplitSettings()).process_batch(b) for b in _in_batches(docs, 3)])
    out = pa.concat_tables(drive(Dedup(DedupSettings(method=method)), _in_batches(segs, batch_size)))
    got = dict(zip(out["doc_id"].to_pylist(), out["text"].to_pylist()))
    assert got == {d: "<MASK>" if d in REPEATS else t for d, t in SEGMENTS.items()}
    assert dict(zip(out["doc_id"].to_pylist(), out["dedup_hit"].to_pylist())) == {d: d in REPEATS for d in SEGMENTS}
    assert pc.sum(out["_stat.masked_chars"]).as_py() == sum(len(SEGMENTS[d]) for d in REPEATS)


def test_first_occurrence_follows_the_order_columns_not_ids_or_rows():
    stage = Dedup(DedupSettings())
    key = hashlib.sha1(b"x").digest()
    # already sorted by (_src, _line, _seg) as the contract says: "z#0" comes first
    part = pa.table({"doc_id": ["z#0", "m#3", "a#0"], "key": pa.array([key] * 3, pa.binary(20)),
                     "_src": [0, 1, 1], "_line": [9, 1, 2], "_seg": [0, 3, 0]})
    assert sorted(part["doc_id"].take(stage.decide(part)[DECISION_ROW]).to_pylist()) == ["a#0", "m#3"]


def test_first_occurrences_is_exact_when_digests_share_their_first_eight_bytes():
    prefix = bytes(8)
    d = [prefix + bytes([1] * 12), prefix + bytes([2] * 12), prefix + bytes([1] * 12), prefix + bytes([2] * 12),
         bytes([9] * 20), prefix + bytes([3] * 12)]
    mat = np.frombuffer(b"".join(d), np.uint8).reshape(-1, 20)
    assert first_occurrences(mat).tolist() == [True, True, False, False, True, True]
    assert first_occurrences(mat[:0]).tolist() == [] and first_occurrences(mat[:1]).tolist() == [True]


def test_keys_are_sha1_of_the_utf8_text_and_null_when_not_taking_part():
    b = pa.table({"doc_id": ["a", "b", "c", "d", "e", "f"], "text": ["Grüße.", "short", None, "<MASK>", "Grüße.", ""]})
    keys = Dedup(DedupSettings(min_length=6)).keys(b).to_pylist()
    g = hashlib.sha1("Grüße.".encode()).digest()
    assert keys == [g, None, None, None, g, None]
    assert Dedup(DedupSettings()).keys(b).to_pylist()[5] is None  # empty text never takes part


def test_skip_clean_keys_only_what_a_policy_flagged():
    """``skip_clean``: a record both of redact's policies passed takes no part; a flagged
    one does however short it is; a missing verdict (null) is not clean."""
    b = pa.table({"doc_id": list("abcde"), "text": ["Hi.", "Hi.", "ID 12", "ID 12", "Bye now."],
                  "pi_hit": [False, False, True, False, None], "pi_c_hit": [False, False, True, True, None]})
    keys = Dedup(DedupSettings(skip_clean=True)).keys(b).to_pylist()
    h = hashlib.sha1(b"ID 12").digest()
    assert keys == [None, None, h, h, hashlib.sha1(b"Bye now.").digest()]
    assert Dedup(DedupSettings()).keys(b).to_pylist()[0] == hashlib.sha1(b"Hi.").digest()
    with pytest.raises(SpecError, match=r"dedup: skip_clean needs the flag column\(s\) \['pi_hit', 'pi_c_hit'\]"):
        Dedup(DedupSettings(skip_clean=True)).keys(b.drop_columns(["pi_hit", "pi_c_hit"]))


@pytest.mark.parametrize("stages, msg", [
    ([{"kind": "split"}, {"kind": "dedup", "skip_clean": True}], "stages.1: dedup with skip_clean reads the flags"),
    ([{"kind": "split"}, {"kind": "dedup", "skip_clean": True}, {"kind": "redact"}],
     "stages.1: dedup with skip_clean reads the flags"),
    ([{"kind": "split"}, {"kind": "redact"}, {"kind": "dedup"}], "stages.2: dedup after redact creates false"),
    ([{"kind": "split"}, {"kind": "redact"}, {"kind": "dedup", "skip_clean": True}], None),
])
def test_skip_clean_goes_after_redact_and_plain_dedup_before(stages, msg):
    pytest.importorskip("privatize.stages.redact")
    spec = {"version": 1, "stages": stages}
    if msg is None:
        assert parse_spec(spec).stages[2].skip_clean
        return
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert msg in str(e.value)


def test_normalisation_modes():
    texts = ["Hello  world.", " Hello world.\n", "hello WORLD.", "Hello\u00a0world."]
    for mode, hits in [("none", [False, False, False, False]), ("whitespace", [False, True, False, True]),
                       ("whitespace_case", [False, True, True, True])]:
        out = pa.concat_tables(drive(Dedup(DedupSettings(normalize=mode)), [_segments(texts)]))
        assert out["dedup_hit"].to_pylist() == hits, mode
        # normalisation decides what counts as equal; it never changes the text kept
        assert [t for t, h in zip(out["text"].to_pylist(), hits) if not h] == [t for t, h in zip(texts, hits) if not h]


def _segments(texts: list[str], src: int = 0) -> pa.Table:
    n = len(texts)
    return pa.table({"doc_id": [f"s{src}-{i}" for i in range(n)], "text": pa.array(texts, pa.string()),
                     "_src": pa.array([src] * n, pa.int32()), "_line": pa.array(range(n), pa.int64()),
                     "_seg": pa.array([0] * n, pa.int32())})


def test_bloom_never_misses_a_duplicate_and_its_false_positives_are_real():
    rng = np.random.default_rng(7)
    vocab = [f"Sentence number {i} of the corpus." for i in range(3000)]
    texts = [vocab[i] for i in rng.integers(0, len(vocab), 6000)]
    batches = [_segments(texts[i:i + 500], src=i) for i in range(0, len(texts), 500)]
    exact = pa.concat_tables(drive(Dedup(DedupSettings()), batches))["dedup_hit"].to_numpy(zero_copy_only=False)
    # a filter far too small (64 items in all): many false positives, still no miss
    tiny = pa.concat_tables(drive(Dedup(DedupSettings(method="bloom", bloom_capacity=64, bloom_fp_rate=0.01)),
                                  batches))["dedup_hit"].to_numpy(zero_copy_only=False)
    assert (tiny | ~exact).all()  # every exact duplicate is a Bloom hit
    assert (tiny & ~exact).sum() > 100  # and the test can tell the two apart
    sized = pa.concat_tables(drive(Dedup(DedupSettings(method="bloom", bloom_capacity=100_000, bloom_fp_rate=1e-6)),
                                   batches))["dedup_hit"].to_numpy(zero_copy_only=False)
    assert (sized == exact).all()


def test_apply_counts_code_points_and_marks_only_decided_rows():
    stage = Dedup(DedupSettings())
    b = _segments(["Grüße aus Köln.", "Hi.", None])
    # decisions aligned to the batch's rows: a hit for row 0, none for the others
    out = stage.apply(b, pa.table({"dedup_hit": pa.array([True, None, None], pa.bool_())}))
    assert out["text"].to_pylist() == ["<MASK>", "Hi.", None]
    assert out["dedup_hit"].to_pylist() == [True, False, False]
    assert out["_stat.masked_chars"].to_pylist() == [15, 0, 0]
    assert out["_stat.chars"].to_pylist() == [15, 3, 0]
    assert out["_stat.dedup_hits"].to_pylist() == [1, 0, 0]
    none = stage.apply(b, pa.table({"dedup_hit": pa.nulls(3, pa.bool_())}))
    assert none["dedup_hit"].to_pylist() == [False] * 3 and none["text"].equals(b["text"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["A.", "B b.", "Ccc c.", "Dd.", "<MASK>", "Grüße."]), max_size=60),
       st.integers(1, 25), st.integers(0, 5), st.sampled_from(["sha1", "bloom"]))
def test_dedup_keeps_each_distinct_text_once_and_is_idempotent(texts, batch_size, min_length, method):
    stage = Dedup(DedupSettings(method=method, min_length=min_length))
    batches = _in_batches(_segments(texts), batch_size)
    once = pa.concat_tables(drive(stage, batches)) if batches else None
    if once is None:
        return
    kept = once["text"].to_pylist()
    taking_part = [len(t) >= min_length and t != "<MASK>" for t in texts]
    # each text that takes part survives exactly at its first occurrence
    expected, seen = [], set()
    for t, part in zip(texts, taking_part):
        expected.append("<MASK>" if part and t in seen else t)
        seen.add(t)
    assert kept == expected
    twice = pa.concat_tables(drive(stage, _in_batches(once.select(["doc_id", "text", *ORDER_COLUMNS]), batch_size)))
    assert twice["text"].to_pylist() == kept and not any(twice["dedup_hit"].to_pylist())
