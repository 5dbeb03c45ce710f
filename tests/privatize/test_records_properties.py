"""Property-based tests of the record readers (JSONL, text, Parquet): whatever the bytes,
they yield batches of the internal schema or raise one of ``privatize.errors``' own
types, never a stray ``UnicodeEncodeError``, ``RecursionError``, ``ArrowException``...

Inputs are built to reach the readers' edges: JSON-ish lines mixing valid values with
``NaN``/``Infinity``, lone surrogates, deep nesting, huge numbers and broken bytes;
arbitrary bytes; Parquet files of many column types (timestamps past year 9999 too)
and those files with bytes flipped.
"""

from __future__ import annotations

import io
import json
import string

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from privatize.errors import InputError, PrivatizeError
from privatize.records import INTERNAL_SCHEMA, InputFile, jsonl_has_record, parse_jsonl, read_inputs

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _drain(files, per_line=False, batch_size=7) -> tuple[list[pa.Table], PrivatizeError | None]:
    """Every batch the readers give, checked against the schema, and the PrivatizeError
    that ended them (one line), if one did; any other exception fails the test."""
    out = []
    try:
        for t in read_inputs(files, batch_size, text_per_line=per_line):
            assert t.schema == INTERNAL_SCHEMA
            t.validate(full=True)  # strings are valid UTF-8
            out.append(t)
    except PrivatizeError as exc:
        assert "\n" not in str(exc)
        return out, exc
    return out, None


# ---- JSONL --------------------------------------------------------------------------------

_strings = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF) | st.sampled_from(
    ["\ud800", "\udfff", "\ud83d", "\ude00", "\x00", "\n", '"', "\\"]), max_size=8)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | _strings,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(_strings, kids, max_size=3),
    max_leaves=12)
_records = st.fixed_dictionaries({}, optional={"text": _json_values, "id": _json_values, "doc_id": _json_values,
                                               "individual_id": _json_values}).flatmap(
    lambda d: st.dictionaries(_strings, _json_values, max_size=3).map(lambda extra: {**extra, **d}))


def _dump(obj, ascii_: bool) -> bytes:
    # allow_nan (the default) writes NaN/Infinity; ensure_ascii writes lone surrogates as
    # \\udXXX escapes; without it, they go out as the bytes of the code point (not UTF-8)
    s = json.dumps(obj, ensure_ascii=ascii_)
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass")


_fragments = st.sampled_from([b"{", b"}", b"[", b"]", b",", b":", b'"text"', b'"a"', b"NaN", b"-Infinity",
                              b"1e999", b"9" * 5000, b"\\ud800", b'"\\ud800"', b"\xff", b"\xed\xa0\x80",
                              b"[" * 1200, b"]" * 1200, b"\r", b" ", b"\xef\xbb\xbf", b"null", b"true"])
_lines = st.one_of(
    st.tuples(_records, st.booleans()).map(lambda t: _dump(*t)),
    st.lists(_fragments, max_size=12).map(b"".join),
    st.binary(max_size=40),
    st.integers(1, 1500).map(lambda n: b'{"text": "x", "m": ' + b"[" * n + b"]" * n + b"}"),
)


@SETTINGS
@given(st.lists(_lines, min_size=1, max_size=12), st.sampled_from([b"\n", b"\r\n"]), st.integers(1, 5))
@example([b'{"text":"\\ud800"}'], b"\n", 1)
@example([b'{"text":"a","x":' + b"[" * 3000 + b"]" * 3000 + b"}"], b"\n", 1)
@example([b'{"text":"a","x":NaN}', b'{"text":"b"}'], b"\n", 1)
def test_jsonl_reader_raises_only_its_own_errors(tmp_path_factory, lines, sep, batch_size):
    data = sep.join(lines) + sep
    p = tmp_path_factory.mktemp("j") / "c.jsonl"
    p.write_bytes(data)
    f = InputFile(str(p), p.name, "jsonl", 0)
    tables, error = _drain([f], batch_size=batch_size)
    has, _ = jsonl_has_record(iter(data.split(b"\n")))
    assert has == (error is None)  # the file-level check of a byte range says the same
    for r in pa.concat_tables(tables).to_pylist() if tables else []:
        if r["_quarantine"] is None:  # what goes on is standard JSON
            assert r["meta"] is None or isinstance(json.loads(r["meta"], parse_constant=pytest.fail), dict)
    # the range reader (a piece of a large file) never raises, and agrees record for record
    pieces = list(parse_jsonl(f, data, batch_size, whole_file=False))
    if error is None:
        assert [r for t in pieces for r in t.to_pylist()] == [r for t in tables for r in t.to_pylist()]


@SETTINGS
@given(st.binary(max_size=300))
def test_jsonl_reader_on_arbitrary_bytes(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("j") / "c.jsonl"
    p.write_bytes(data)
    _drain([InputFile(str(p), p.name, "jsonl", 0)])


# ---- text -----------------------------------------------------------------------------------

@SETTINGS
@given(st.one_of(st.binary(max_size=300), _strings.map(lambda s: s.encode("utf-8", "surrogatepass"))),
       st.booleans())
def test_text_reader_raises_only_its_own_errors(tmp_path_factory, data, per_line):
    p = tmp_path_factory.mktemp("t") / "c.txt"
    p.write_bytes(data)
    _drain([InputFile(str(p), p.name, "text", 0)], per_line=per_line)


# ---- Parquet --------------------------------------------------------------------------------

_int64 = st.integers(-(2**63), 2**63 - 1)
_column = st.sampled_from(["string", "int", "float", "binary", "bool", "null", "list", "struct", "ts_ms", "ts_ns",
                           "date", "decimal", "map", "large_string", "dict"])


def _array(kind: str, n: int, draw) -> pa.Array:
    opt = lambda s: st.one_of(st.none(), s)  # noqa: E731
    if kind == "string":
        return pa.array(draw(st.lists(opt(st.text(max_size=5)), min_size=n, max_size=n)), pa.string())
    if kind == "large_string":
        return pa.array(draw(st.lists(opt(st.text(max_size=5)), min_size=n, max_size=n)), pa.large_string())
    if kind == "dict":
        return pa.array(draw(st.lists(opt(st.sampled_from(["a", " ", ""])), min_size=n, max_size=n)),
                        pa.string()).dictionary_encode()
    if kind == "int":
        return pa.array(draw(st.lists(opt(_int64), min_size=n, max_size=n)), pa.int64())
    if kind == "float":
        return pa.array(draw(st.lists(opt(st.floats(allow_nan=True)), min_size=n, max_size=n)), pa.float64())
    if kind == "binary":
        return pa.array(draw(st.lists(opt(st.binary(max_size=5)), min_size=n, max_size=n)), pa.binary())
    if kind == "bool":
        return pa.array(draw(st.lists(opt(st.booleans()), min_size=n, max_size=n)), pa.bool_())
    if kind == "null":
        return pa.nulls(n)
    if kind == "list":
        return pa.array(draw(st.lists(opt(st.lists(st.integers(0, 9), max_size=3)), min_size=n, max_size=n)),
                        pa.list_(pa.int64()))
    if kind == "struct":
        return pa.array(draw(st.lists(opt(st.fixed_dictionaries({"a": opt(st.text(max_size=3))})),
                                      min_size=n, max_size=n)), pa.struct([("a", pa.string())]))
    if kind == "ts_ms":  # milliseconds: far past the years 1 to 9999 Python's datetime holds
        return pa.array(draw(st.lists(opt(_int64), min_size=n, max_size=n)), pa.int64()).cast(pa.timestamp("ms"))
    if kind == "ts_ns":
        return pa.array(draw(st.lists(opt(_int64), min_size=n, max_size=n)), pa.int64()).cast(pa.timestamp("ns"))
    if kind == "date":
        return pa.array(draw(st.lists(opt(st.integers(-(2**31), 2**31 - 1)), min_size=n, max_size=n)),
                        pa.int32()).cast(pa.date32())
    if kind == "decimal":
        return pa.array(draw(st.lists(opt(st.decimals(allow_nan=False, allow_infinity=False, places=2,
                                                      min_value=-10**6, max_value=10**6)),
                                      min_size=n, max_size=n)), pa.decimal128(12, 2))
    if kind == "map":
        return pa.array(draw(st.lists(opt(st.lists(st.tuples(st.text(max_size=2), st.integers(0, 9)), max_size=2)),
                                      min_size=n, max_size=n)), pa.map_(pa.string(), pa.int64()))
    raise AssertionError(kind)


@st.composite
def _tables(draw) -> pa.Table:
    n = draw(st.integers(0, 6))
    names = draw(st.lists(st.sampled_from(["text", "id", "doc_id", "individual_id", "m", "when", "x"]),
                          min_size=1, max_size=5, unique=True))
    return pa.table({name: _array(draw(_column), n, draw) for name in names})


def _parquet_bytes(table: pa.Table, row_group_size: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=max(1, row_group_size))
    return buf.getvalue()


@SETTINGS
@given(_tables(), st.integers(1, 4))
def test_parquet_reader_raises_only_its_own_errors(tmp_path_factory, table, row_group_size):
    p = tmp_path_factory.mktemp("p") / "c.parquet"
    p.write_bytes(_parquet_bytes(table, row_group_size))
    tables, error = _drain([InputFile(str(p), p.name, "parquet", 0)])
    if error is None:
        assert sum(t.num_rows for t in tables) == table.num_rows


@SETTINGS
@given(st.data())
def test_parquet_reader_on_damaged_files(tmp_path_factory, data):
    table = pa.table({"text": ["one", "two", "three"] * 4, "id": list(string.ascii_lowercase[:12]),
                      "m": [1.5] * 12})
    raw = bytearray(_parquet_bytes(table, 5))
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(raw))))
    p = tmp_path_factory.mktemp("p") / "c.parquet"
    p.write_bytes(bytes(raw[:cut] if cut is not None else raw))
    _drain([InputFile(str(p), p.name, "parquet", 0)])


def test_parquet_column_name_not_utf8_is_an_input_error(tmp_path):
    # the case the damaged-files property found: pyarrow raises UnicodeDecodeError
    # reading the schema of a footer whose column name is not UTF-8
    raw = bytearray(_parquet_bytes(pa.table({"text": ["a"], "idx": [1]}), 1))
    raw[raw.index(b"idx")] = 0x80
    p = tmp_path / "c.parquet"
    p.write_bytes(bytes(raw))
    tables, error = _drain([InputFile(str(p), p.name, "parquet", 0)])
    assert tables == [] and isinstance(error, InputError) and "not a readable Parquet file" in str(error)


@SETTINGS
@given(st.binary(max_size=300).map(lambda b: b"PAR1" + b + b"PAR1"))
def test_parquet_reader_on_arbitrary_bytes(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("p") / "c.parquet"
    p.write_bytes(data)
    _drain([InputFile(str(p), p.name, "parquet", 0)])
