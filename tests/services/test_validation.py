"""Upload validation: the problem and the line, the same from the exact and fast paths."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services import validation as V
from services.errors import CorpusInvalid, UnsupportedFormat


def _jsonl(n: int, bad_at: dict[int, bytes] | None = None) -> bytes:
    lines = [json.dumps({"id": f"d{i}", "text": f"document number {i} " * 3, "meta": {"k": i}}).encode()
             for i in range(1, n + 1)]
    for i, raw in (bad_at or {}).items():
        lines[i - 1] = raw
    return b"\n".join(lines) + b"\n"


@pytest.fixture(params=["exact", "fast"])
def path_kind(request, monkeypatch):
    """Run each case through privatize.records directly, and through the fast path with
    the exact fallback reading small pieces (so line offsets across pieces count)."""
    if request.param == "fast":
        monkeypatch.setattr(V, "EXACT_LIMIT", 0)
        monkeypatch.setattr(V, "PIECE", 4096)
        monkeypatch.setattr(V, "BLOCK", 1024)
    return request.param


def _validate(tmp_path, data: bytes, fmt: str = "jsonl", name: str = "c.jsonl"):
    p = tmp_path / name
    p.write_bytes(data)
    return V.validate_corpus(p, fmt, tmp_path)


def test_good_jsonl_counts_records(tmp_path, path_kind):
    data = _jsonl(500)
    data = data.replace(b'\n{"id": "d7"', b'\n\n   \n{"id": "d7"')  # blank lines are not records
    assert _validate(tmp_path, data).records == 500


@pytest.mark.parametrize("line,raw,problem", [
    (1, b'{"id": "x", "text": "ok"', "invalid JSON"),
    (321, b'{"text": 5}', "text is not a string"),
    (400, b'{"body": "no text"}', "no text field"),
    (444, b'{"text": "   "}', "text is empty"),
    (499, b'[1, 2]', "line is not a JSON object"),
    (250, b'{"text": "caf\xe9"}', "line is not UTF-8"),
    # issue 23: non-standard JSON, lone surrogates, deep nesting, numbers past a double;
    # Arrow's reader (the fast path) takes NaN, Inf and any nesting: the exact path decides
    (123, b'{"text": "a", "x": NaN}', "invalid JSON: NaN is not JSON"),
    (124, b'{"text": "a", "x": [Infinity]}', "invalid JSON: Infinity is not JSON"),
    (125, b'{"text": "a", "x": -Infinity}', "invalid JSON: -Infinity is not JSON"),
    (126, b'{"text": "a", "x": Inf}', "invalid JSON: Expecting value"),
    (127, b'{"text": "\\ud800"}', "lone surrogate (\\ud800)"),
    (128, b'{"text": "a", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}", "nested deeper than 100 levels"),
    (129, b'{"text": "a", "x": ' + b"[{}," * 101 + b"1" + b"]" * 101 + b"}", "nested deeper than 100 levels"),
    (130, b'{"text": "a", "x": 1e999}', "a number is out of range"),
    (131, b'{"text": "a"} {"text": "b"}', "invalid JSON: Extra data"),
    (132, b'{"text":\n"a"}', "invalid JSON"),
    (133, b'\xef\xbb\xbf{"text": "a"}', "invalid JSON: Unexpected UTF-8 BOM"),
])
def test_bad_jsonl_names_line_and_problem(tmp_path, path_kind, line, raw, problem):
    with pytest.raises(CorpusInvalid) as ei:
        _validate(tmp_path, _jsonl(500, {line: raw}))
    assert ei.value.extra["line"] == line, ei.value.message
    assert ei.value.message.startswith(f"line {line}: ") and problem in ei.value.message


def test_fast_path_screen_lets_strings_through(tmp_path, monkeypatch):
    """``NaN``, ``Inf`` and brackets inside strings are text: no fallback, exact counts."""
    monkeypatch.setattr(V, "EXACT_LIMIT", 0)
    monkeypatch.setattr(V, "_exact_jsonl", lambda *a: pytest.fail("the exact path should not be needed"))
    data = _jsonl(300) + b"".join(json.dumps({"text": t}, ensure_ascii=False).encode() + b"\n" for t in
                                  ["NaN and Information", "[[[[" * 10, "Infinity and NaN", "\ufeffBOM inside"])
    assert _validate(tmp_path, data).records == 304


def test_jsonl_that_is_not_jsonl(tmp_path, path_kind):
    with pytest.raises(CorpusInvalid, match=r"^line 1: not a JSONL file"):
        _validate(tmp_path, b"just some words\nand more\n")
    with pytest.raises(CorpusInvalid, match="file is empty"):
        _validate(tmp_path, b"")


def test_messages_carry_no_server_path(tmp_path, path_kind):
    with pytest.raises(CorpusInvalid) as ei:
        _validate(tmp_path, b"\n\n")
    assert str(tmp_path) not in ei.value.message


def test_text_files(tmp_path):
    assert _validate(tmp_path, "one\n\n two \nthree".encode(), "text", "c.txt").records == 3
    with pytest.raises(CorpusInvalid, match=r"^line 3: not UTF-8 \(byte 3 of the line\)"):
        _validate(tmp_path, b"one\ntwo\nthr\xff\n", "text", "c.txt")
    with pytest.raises(CorpusInvalid, match="file is empty"):
        _validate(tmp_path, b" \n\t\n", "text", "c.txt")


def test_utf8_check_across_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "BLOCK", 7)
    p = tmp_path / "t.txt"
    p.write_bytes("héllo wörld\nñ\n".encode() * 50 + b"bad \xc3\n")
    with pytest.raises(CorpusInvalid, match=r"^line 101: "):
        V.check_utf8(p)


@pytest.mark.parametrize("limit", [1 << 30, 0])
def test_parquet(tmp_path, monkeypatch, limit):
    monkeypatch.setattr(V, "EXACT_LIMIT", limit)
    pq.write_table(pa.table({"text": ["a", "b", "c"], "id": ["1", "2", "3"]}), tmp_path / "ok.parquet",
                   row_group_size=2)
    assert V.validate_corpus(tmp_path / "ok.parquet", "parquet", tmp_path).records == 3
    pq.write_table(pa.table({"text": ["a", "b", " "]}), tmp_path / "blank.parquet", row_group_size=2)
    with pytest.raises(CorpusInvalid, match=r"^row 3: text is empty"):
        V.validate_corpus(tmp_path / "blank.parquet", "parquet", tmp_path)
    pq.write_table(pa.table({"body": ["a"]}), tmp_path / "nocol.parquet")
    with pytest.raises(CorpusInvalid, match="no 'text' column"):
        V.validate_corpus(tmp_path / "nocol.parquet", "parquet", tmp_path)
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(CorpusInvalid, match="not a readable Parquet file"):
        V.validate_corpus(tmp_path / "junk.parquet", "parquet", tmp_path)


def test_format_from_name_or_parameter():
    assert V.format_for(None, "x.jsonl") == "jsonl"
    assert V.format_for(None, "x.ndjson") == "jsonl"
    assert V.format_for(None, "x.TXT") == "text"
    assert V.format_for("parquet", "x.jsonl") == "parquet"
    with pytest.raises(UnsupportedFormat):
        V.format_for(None, "x.csv")
    with pytest.raises(UnsupportedFormat):
        V.format_for("xml", None)


def test_fast_path_rereads_lines_longer_than_a_block(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "EXACT_LIMIT", 0)
    monkeypatch.setattr(V, "JSON_BLOCK", 256)
    monkeypatch.setattr(V, "_exact_jsonl", lambda *a: pytest.fail("the exact path should not be needed"))
    data = _jsonl(50) + json.dumps({"text": "long " * 2000}).encode() + b"\n"
    assert _validate(tmp_path, data).records == 51


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "é", "€", "𝄞", "\n", " ", "{}", "\xff", "\xc3"]), max_size=60),
       st.lists(st.integers(1, 7), min_size=1, max_size=30))
def test_utf8_checker_agrees_with_a_whole_decode(pieces, cuts):
    """Fed in arbitrary chunks (splitting characters and lines), the checker finds the
    first bad byte where decoding the whole stream does, as (line, byte of the line)."""
    data = b"".join(p.encode("latin-1") if p in ("\xff", "\xc3") else p.encode() for p in pieces)
    ck = V.Utf8Checker()
    i, k = 0, 0
    while i < len(data):
        n = cuts[k % len(cuts)]
        ck.feed(data[i:i + n])
        i, k = i + n, k + 1
    ck.finish()
    try:
        data.decode("utf-8")
        expected = None
    except UnicodeDecodeError as exc:
        nl = data.rfind(b"\n", 0, exc.start)
        expected = (data.count(b"\n", 0, exc.start) + 1, exc.start - (nl + 1))
    assert ck.error == expected
    assert ck.any_text == bool(data.strip()) or expected is not None


_SCREEN_PIECES = [b"{", b"[", b"}", b"]", b"\n", b" ", b"\t", b"\r", b":", b",", b"-", b"NaN", b"Inf", b"N", b"aN",
                  b"In", b"f", b"\xef", b"\xbb", b"\xbf", b"\xef\xbb\xbf", b'"x"', b"[" * 60, b"{" * 50]


def _screen_reference(data: bytes) -> int | None:
    """What the screen must say, from the whole file at once."""
    compact = data.translate(None, b" \t\r\x0b\x0c")
    lines = data.split(b"\n")
    if (compact.startswith(b"\xef\xbb\xbf") or b"\n\xef\xbb\xbf" in compact
            or re.search(rb"[:\[,]-?(?:NaN|Inf)", compact)
            or any(ln.count(b"[") + ln.count(b"{") > V.MAX_JSON_DEPTH for ln in lines)):
        return None
    return sum(1 for ln in lines if ln.strip())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_SCREEN_PIECES), max_size=50), st.lists(st.integers(1, 9), min_size=1, max_size=20))
def test_jsonl_screen_agrees_with_a_whole_file_look(pieces, cuts):
    """Fed in arbitrary chunks (splitting tokens, BOMs and lines), the screen says what
    a look at the whole file says: the non-blank line count, or None."""
    data = b"".join(pieces)
    sc = V.JsonlScreen()
    i, k = 0, 0
    while i < len(data):
        n = cuts[k % len(cuts)]
        sc.feed(data[i:i + n])
        i, k = i + n, k + 1
    sc.finish()
    assert sc.result() == _screen_reference(data)


@pytest.mark.parametrize("bad, line, lax", [
    (b'{"text": "a", "x": NaN}', 40, True),
    (b'{"text": "a", "x": ' + b"[" * 200 + b"]" * 200 + b"}", 3, True),
    (b'{"text": "a"}{"text": "b"}', 77, False),  # Arrow reads 101 records from 100 lines
    (None, None, False)])
def test_an_upload_is_screened_as_it_arrives(tmp_path, monkeypatch, bad, line, lax):
    """The upload's sink screens a large JSONL file chunk by chunk (from its first byte,
    once it is past EXACT_LIMIT); the fast path takes the screen's word."""
    from services.corpora import _Sink

    monkeypatch.setattr(V, "EXACT_LIMIT", 1000)
    monkeypatch.setattr(V, "screen_jsonl", lambda p: pytest.fail("the upload's screen should be used"))
    data = _jsonl(100, {line: bad} if bad else None)
    sink = _Sink(tmp_path / "up.jsonl", "jsonl")
    for i in range(0, len(data), 333):
        sink.write(data[i:i + 333])
    sink.close()
    assert sink.screen is not None and sink.screen.lax == lax
    if bad is None:
        assert V.validate_corpus(sink.path, "jsonl", tmp_path, utf8=sink.utf8, screen=sink.screen).records == 100
        return
    with pytest.raises(CorpusInvalid) as ei:
        V.validate_corpus(sink.path, "jsonl", tmp_path, utf8=sink.utf8, screen=sink.screen)
    assert ei.value.extra["line"] == line and ei.value.message.startswith(f"line {line}: invalid JSON")
    small = _Sink(tmp_path / "small.jsonl", "jsonl")
    small.write(b'{"text": "a"}\n')
    small.close()
    assert small.screen is None  # a small file takes the exact path: nothing to screen
