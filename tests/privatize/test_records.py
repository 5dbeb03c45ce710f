import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privatize.errors import InputError
from privatize.records import list_inputs, read_inputs


def _read(path, fmt="auto", per_line=False, batch_size=1024):
    files = list_inputs(path, fmt)
    return pa.concat_tables(list(read_inputs(files, batch_size, text_per_line=per_line))).to_pylist()


def test_jsonl_fields_ids_meta_and_order(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(
        json.dumps({"id": 7, "text": "first", "individual_id": "u1", "lang": "en"}) + "\n\n"
        + json.dumps({"text": "second"}) + "\n"
        + json.dumps({"doc_id": "x", "text": "third", "spans": [1, 2]}) + "\n",
        encoding="utf-8")
    rows = _read(p)
    assert [r["doc_id"] for r in rows] == ["7", "a.jsonl:3", "x"]
    assert [r["_line"] for r in rows] == [1, 3, 4]
    assert rows[0]["individual_id"] == "u1" and json.loads(rows[0]["meta"]) == {"lang": "en"}
    assert rows[1]["meta"] is None and json.loads(rows[2]["meta"]) == {"spans": [1, 2]}
    assert all(r["_quarantine"] is None for r in rows)


def test_record_level_problems_are_quarantined_with_reasons(tmp_path):
    p = tmp_path / "b.jsonl"
    p.write_bytes(b'{"text": "ok"}\n{"text": "bad \xff utf8"}\n{not json}\n[1,2]\n{"text": ""}\n{"id": 1}\n'
                  b'{"text": 5}\n')
    rows = _read(p)
    reasons = [r["_quarantine"] for r in rows]
    assert reasons[0] is None
    assert reasons[1].startswith("line is not UTF-8")
    assert reasons[2].startswith("invalid JSON")
    assert reasons[3] == "line is not a JSON object"
    assert reasons[4] == "text is empty"
    assert reasons[5] == "no text field"
    assert reasons[6] == "text is not a string"


@pytest.mark.parametrize("content, msg", [
    (b"", "file is empty"),
    (b"   \n\n", "file is empty"),
    (b"just some prose\nmore prose\n", "a.jsonl:1: not a JSONL file"),
])
def test_file_level_problems_raise_one_line_naming_file_and_line(tmp_path, content, msg):
    p = tmp_path / "a.jsonl"
    p.write_bytes(content)
    with pytest.raises(InputError) as e:
        _read(p)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_missing_and_unknown_inputs(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        list_inputs(tmp_path / "nope")
    (tmp_path / "x.bin").write_bytes(b"x")
    with pytest.raises(InputError, match="unknown input format"):
        list_inputs(tmp_path / "x.bin")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no input files"):
        list_inputs(empty)


def test_text_file_per_document_and_line_per_document(tmp_path):
    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    (d / "b.txt").write_text("Beta doc.\nSecond line.\n", encoding="utf-8")
    (d / "sub" / "a.txt").write_text("Alpha.\n", encoding="utf-8")
    (d / "a.txt").write_text("Zero.\n\nTwo.\n", encoding="utf-8")
    rows = _read(d)
    assert [(r["doc_id"], r["_src"]) for r in rows] == [("a.txt", 0), ("b.txt", 1), ("sub/a.txt", 2)]
    assert rows[1]["text"] == "Beta doc.\nSecond line.\n"
    lines = _read(d, per_line=True)
    assert [(r["doc_id"], r["text"]) for r in lines] == [
        ("a.txt:1", "Zero."), ("a.txt:3", "Two."), ("b.txt:1", "Beta doc."), ("b.txt:2", "Second line."),
        ("sub/a.txt:1", "Alpha.")]


def test_text_file_not_utf8_is_file_level(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(b"ok\nbad \xfe here\n")
    with pytest.raises(InputError, match=r"a.txt:2: file is not UTF-8"):
        _read(p)


def test_parquet_input(tmp_path):
    p = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["one", None], "source": ["s1", "s2"]}), p)
    rows = _read(p)
    assert rows[0]["doc_id"] == "a" and json.loads(rows[0]["meta"]) == {"source": "s1"}
    assert rows[1]["_quarantine"] == "no text field"
    bad = tmp_path / "d.parquet"
    pq.write_table(pa.table({"body": ["x"]}), bad)
    with pytest.raises(InputError, match="no 'text' column"):
        _read(bad)


def test_batches_respect_batch_size(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text("".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(10)), encoding="utf-8")
    batches = list(read_inputs(list_inputs(p), 3))
    assert [b.num_rows for b in batches] == [3, 3, 3, 1]


NESTED = b"[" * 3000 + b"]" * 3000


@pytest.mark.parametrize("raw, reason", [
    (b'{"text": "a", "x": NaN}', "invalid JSON: NaN is not JSON"),
    (b'{"text": "a", "x": Infinity}', "invalid JSON: Infinity is not JSON"),
    (b'{"text": "a", "x": [1, -Infinity]}', "invalid JSON: -Infinity is not JSON"),
    (b'{"text": "\\ud800"}', "invalid JSON: string holds a lone surrogate (\\ud800)"),
    (b'{"text": "a", "id": "x\\udfff"}', "invalid JSON: string holds a lone surrogate (\\udfff)"),
    (b'{"text": "a", "\\udc00": 1}', "invalid JSON: string holds a lone surrogate (\\udc00)"),
    (b'{"text": "a", "x": ' + NESTED + b"}", "invalid JSON: nested deeper than 100 levels"),
    (b'{"text": "a", "x": ' + b"[" * 100 + b"]" * 100 + b"}", "invalid JSON: nested deeper than 100 levels"),
    (b'{"text": "a", "id": ' + b"9" * 5000 + b"}", "invalid JSON: Exceeds the limit"),
    (b'{"text": "a", "x": 1e999}', "invalid JSON: a number is out of range"),
])
def test_lines_that_are_not_standard_json_or_not_unicode_are_quarantined(tmp_path, raw, reason):
    """NaN/Infinity, a lone surrogate (no UTF-8 text can carry it), deep nesting, a
    number past a double: the line is quarantined with its reason, kept as it was."""
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"text": "fine"}\n' + raw + b"\n")
    rows = _read(p)
    assert rows[0]["_quarantine"] is None
    assert rows[1]["_quarantine"].startswith(reason), rows[1]["_quarantine"]
    assert rows[1]["text"] == raw.decode() and rows[1]["_line"] == 2
    if "out of range" in reason:
        return  # a JSON object, read: only its value is refused
    p.write_bytes(raw + b"\n")  # no line is JSON: the file is not JSONL, and the message says why
    with pytest.raises(InputError, match=r"a.jsonl:1: not a JSONL file \(invalid JSON: "):
        _read(p)


def test_standard_json_at_the_edges_is_read(tmp_path):
    p = tmp_path / "a.jsonl"
    lines = [{"text": "\U0001d11e \ud83d\ude00".encode("utf-16", "surrogatepass").decode("utf-16")},
             {"text": "\\ud800 is six characters"}, {"text": "a", "x": [[[[1.5e308]]]], "n": 10 ** 300}]
    p.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
    p.write_text(p.read_text() + '{"text": "b", "x": ' + "[" * 99 + "]" * 99 + "}\n", encoding="utf-8")
    rows = _read(p)
    assert [r["_quarantine"] for r in rows] == [None] * 4
    assert rows[0]["text"] == "\U0001d11e \U0001f600" and rows[1]["text"] == "\\ud800 is six characters"
    assert json.loads(rows[2]["meta"]) == {"x": [[[[1.5e308]]]], "n": 10 ** 300}
