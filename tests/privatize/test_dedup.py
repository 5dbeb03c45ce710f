import json

import pyarrow.parquet as pq
import pytest

from privatize.runner import run_pipeline
from privatize.spec import parse_spec

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
    m = run_pipeline(spec, corpus, tmp_path / name, batch_size=batch_size)
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
        st = m["stages"][1]["stats"]
        assert st["dedup_hits"] == 5
        assert st["masked_chars"] == sum(len(SEGMENTS[d]) for d in REPEATS)
        assert st["chars"] == sum(len(t) for t in SEGMENTS.values())
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


def test_document_unit_without_split(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["same", "other", "same", "same"]))
    spec = parse_spec({"stages": [{"kind": "dedup", "unit": "document"}], "output": {"num_shards": 1}})
    run_pipeline(spec, p, tmp_path / "o")
    rows = pq.read_table(tmp_path / "o" / "shards" / "part-00000-of-00001.parquet").to_pylist()
    assert {r["doc_id"]: r["text"] for r in rows} == {"c.jsonl:1": "same", "c.jsonl:2": "other",
                                                      "c.jsonl:3": "<MASK>", "c.jsonl:4": "<MASK>"}
