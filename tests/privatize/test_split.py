import pyarrow as pa
import pytest

from privatize.stages.split import Split, SplitSettings, line_spans, paragraph_spans, sentence_spans


def test_sentences_hand_checked():
    t = ('Mr. Smith went to Washington. He said "Hi!" Then he left.\n'
         "The U.S. is big. J. R. R. Tolkien wrote it.\n\nNew paragraph here? Yes. 3 apples.")
    assert [t[a:b] for a, b in sentence_spans(t)] == [
        "Mr. Smith went to Washington.", 'He said "Hi!"', "Then he left.", "The U.S. is big.",
        "J. R. R. Tolkien wrote it.", "New paragraph here?", "Yes.", "3 apples."]


def test_lines_and_paragraphs():
    t = "SYS: Hello\nUSR: hi there  \n\n  \nSYS: bye\n"
    assert [t[a:b] for a, b in line_spans(t)] == ["SYS: Hello", "USR: hi there", "SYS: bye"]
    assert [t[a:b] for a, b in paragraph_spans(t)] == ["SYS: Hello\nUSR: hi there", "SYS: bye"]


@pytest.mark.parametrize("unit", ["sentence", "line", "paragraph"])
def test_stage_records_offsets_ids_and_expansion(unit):
    texts = ["One. Two here.\nThree!\n\nFour?", "   ", "Single"]
    batch = pa.table({"doc_id": ["a", "b", "c"], "text": texts, "individual_id": ["u", None, "v"],
                      "meta": [None, None, None], "_src": pa.array([0, 0, 1], pa.int32()),
                      "_line": pa.array([1, 2, 1], pa.int64()), "_seg": pa.array([0, 0, 0], pa.int32())})
    out = Split(SplitSettings(unit=unit)).process_batch(batch).to_pylist()
    segs = [r for r in out if r["_drop"] is None]
    dropped = [r for r in out if r["_drop"] is not None]
    assert [r["doc_id"] for r in dropped] == ["b"] and dropped[0]["_drop"] == "empty after split"
    for r in segs:
        parent = texts[["a", "b", "c"].index(r["parent_id"])]
        assert parent[r["start"]:r["end"]] == r["text"]
        assert r["doc_id"] == f"{r['parent_id']}#{r['_seg']}"
    a = [r for r in segs if r["parent_id"] == "a"]
    assert sum(r["_stat.expanded"] for r in segs) == len(segs) - 2  # two parents with segments
    assert a[0]["individual_id"] == "u" and a[-1]["_line"] == 1
    expected = {"sentence": 4, "line": 3, "paragraph": 2}[unit]
    assert len(a) == expected
