"""Reading corpora into the one record format, as Arrow batches.

Inputs: JSONL (``text``; optional ``id``/``doc_id`` and ``individual_id``; every other
field goes into ``meta``), plain text (a file per document, or a line per document) and
Parquet (a ``text`` column and optionally the same others).

File-level problems (unreadable, empty, wrong format) raise :class:`InputError` with one
line naming the file (and line). Record-level problems (a line that is not UTF-8 or not
JSON, a record with no text) become rows with a ``_quarantine`` reason, so the runner
counts them and writes them to the quarantine, never to the output.

A JSONL line is JSON as RFC 8259 has it, and no more: ``NaN``, ``Infinity`` and
``-Infinity`` (which Python's parser takes by default) are invalid JSON; so is a line
nesting arrays and objects deeper than :data:`MAX_JSON_DEPTH`, a string holding a lone
surrogate (``"\\ud800"``: no UTF-8 text can carry it) and a number beyond a double's
range (``1e999``). Whatever the bytes, these readers raise nothing but
:mod:`privatize.errors` types.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from privatize.errors import InputError
from privatize.stage import QUARANTINE

log = logging.getLogger(__name__)

MAX_JSON_DEPTH = 100
"""Deepest nesting of arrays and objects a JSONL line may have (the record object is
depth 1); deeper lines are quarantined as invalid JSON."""

FORMATS = ("jsonl", "text", "parquet")
_EXT_FORMAT = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".txt": "text",
               ".text": "text", ".parquet": "parquet"}

INTERNAL_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("text", pa.string()),
        ("individual_id", pa.string()),
        ("meta", pa.string()),
        ("_src", pa.int32()),
        ("_line", pa.int64()),
        ("_seg", pa.int32()),
        (QUARANTINE, pa.string()),
    ]
)


@dataclass(frozen=True)
class InputFile:
    path: str  # as opened
    name: str  # relative to the input root: used in default doc ids
    format: str
    index: int  # position in the sorted list: the first order column


def list_inputs(path: str | os.PathLike, fmt: str = "auto") -> list[InputFile]:
    """Input files under ``path`` (a file or a directory), sorted by relative path."""
    root = Path(path)
    if not root.exists():
        raise InputError(f"{root}: no such file or directory")
    if root.is_file():
        files = [(root, root.name)]
    else:
        files = sorted(
            ((p, p.relative_to(root).as_posix()) for p in root.rglob("*")
             if p.is_file() and not p.name.startswith(".")),
            key=lambda t: t[1],
        )
        if fmt == "auto":
            files = [(p, n) for p, n in files if p.suffix.lower() in _EXT_FORMAT]
        if not files:
            raise InputError(f"{root}: directory holds no input files")
    out = []
    for i, (p, name) in enumerate(files):
        f = fmt if fmt != "auto" else _EXT_FORMAT.get(p.suffix.lower())
        if f is None:
            raise InputError(f"{p}: unknown input format (use --format jsonl|text|parquet)")
        if f not in FORMATS:
            raise InputError(f"{p}: unknown input format {f!r}")
        out.append(InputFile(str(p), name, f, i))
    return out


class _Builder:
    """Accumulates rows column-wise and emits Arrow batches of ``batch_size`` rows."""

    def __init__(self, src: int, batch_size: int):
        self.src = src
        self.batch_size = batch_size
        self._reset()

    def _reset(self) -> None:
        self.cols: dict[str, list] = {n: [] for n in INTERNAL_SCHEMA.names}

    def add(self, line: int, doc_id, text, individual_id=None, meta=None, reason=None):
        c = self.cols
        c["doc_id"].append(doc_id)
        c["text"].append(text)
        c["individual_id"].append(individual_id)
        c["meta"].append(meta)
        c["_src"].append(self.src)
        c["_line"].append(line)
        c["_seg"].append(0)
        c[QUARANTINE].append(reason)

    def __len__(self) -> int:
        return len(self.cols["doc_id"])

    def flush(self) -> pa.Table | None:
        if not len(self):
            return None
        table = pa.table(self.cols, schema=INTERNAL_SCHEMA)
        self._reset()
        return table


def _id_string(value) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (str, int)):
        s = str(value)
        return s if s else None
    return None


def _read_bytes(f: InputFile) -> bytes:
    try:
        with open(f.path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise InputError(f"{f.path}: cannot read: {exc.strerror or exc}") from None
    if not data.strip():
        raise InputError(f"{f.path}: file is empty")
    return data


def read_jsonl(f: InputFile, batch_size: int) -> Iterator[pa.Table]:
    yield from parse_jsonl(f, _read_bytes(f), batch_size)


def parse_jsonl(f: InputFile, data: bytes, batch_size: int, first_line: int = 1, *,
                whole_file: bool = True) -> Iterator[pa.Table]:
    """Records of JSONL ``data``, whose first line is line ``first_line`` of ``f``. With
    ``whole_file``, a file where no line is a JSON object is an :class:`InputError`; a
    runner that reads a file in byte ranges checks that over the whole file itself
    (:func:`jsonl_has_record`)."""
    b = _Builder(f.index, batch_size)
    parsed_any = False
    first_bad: tuple[int, str] | None = None
    for lineno, raw in enumerate(data.split(b"\n"), start=first_line):
        if not raw.strip():
            continue
        default_id = f"{f.name}:{lineno}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            b.add(lineno, default_id, raw.decode("utf-8", "replace"),
                  reason=f"line is not UTF-8 (byte {exc.start})")
            first_bad = first_bad or (lineno, "not UTF-8")
        else:
            try:
                obj = loads_line(line)
            except _BadLine as exc:
                b.add(lineno, default_id, line, reason=f"invalid JSON: {exc.detail}")
                first_bad = first_bad or (lineno, f"invalid JSON: {exc.msg}")
            else:
                if not isinstance(obj, dict):
                    b.add(lineno, default_id, line, reason="line is not a JSON object")
                    first_bad = first_bad or (lineno, "not a JSON object")
                else:
                    parsed_any = True
                    _add_object(b, lineno, default_id, obj, line)
        if len(b) >= batch_size:
            yield b.flush()
    if whole_file and not parsed_any:
        raise not_jsonl_error(f, first_bad)
    t = b.flush()
    if t is not None:
        yield t


def not_jsonl_error(f: InputFile, first_bad: tuple[int, str] | None) -> InputError:
    where, why = first_bad or (1, "no records")
    return InputError(f"{f.path}:{where}: not a JSONL file ({why})")


def jsonl_has_record(lines: Iterable[bytes], first_line: int = 1) -> tuple[bool, tuple[int, str] | None]:
    """(whether some line is a JSON object, the first bad line before it): the file-level
    check of :func:`parse_jsonl`, for the lines (without their newline) of one byte range
    of a file. Stops at the first record: pass an iterator to read no further."""
    first_bad: tuple[int, str] | None = None
    for lineno, raw in enumerate(lines, start=first_line):
        if not raw.strip():
            continue
        try:
            obj = loads_line(raw.decode("utf-8"))
        except UnicodeDecodeError:
            first_bad = first_bad or (lineno, "not UTF-8")
        except _BadLine as exc:
            first_bad = first_bad or (lineno, f"invalid JSON: {exc.msg}")
        else:
            if isinstance(obj, dict):
                return True, first_bad
            first_bad = first_bad or (lineno, "not a JSON object")
    return False, first_bad


class _BadLine(ValueError):
    """A JSONL line that is not (standard) JSON: ``msg`` for the file-level message,
    ``detail`` (with the column where known) for the quarantine reason."""

    def __init__(self, msg: str, detail: str | None = None):
        super().__init__(msg)
        self.msg = msg
        self.detail = detail or msg


def _refuse_constant(name: str):
    raise _BadLine(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def loads_line(line: str):
    """The JSON value of one JSONL line, or :class:`_BadLine` (a ``ValueError``) when it
    is not standard JSON: a syntax error, ``NaN``/``Infinity``, nesting deeper than
    :data:`MAX_JSON_DEPTH`, a lone surrogate in a string, an integer too long to
    convert."""
    try:
        obj = json.loads(line, parse_constant=_refuse_constant)
    except _BadLine:
        raise
    except json.JSONDecodeError as exc:
        raise _BadLine(exc.msg, f"{exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise _BadLine(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # an integer of more digits than int() converts
        raise _BadLine(str(exc).split(";")[0].split(":")[0] or "unreadable number") from None
    if line.count("[") + line.count("{") > MAX_JSON_DEPTH and _depth_over(obj, MAX_JSON_DEPTH):
        raise _BadLine(f"nested deeper than {MAX_JSON_DEPTH} levels")
    if _SURROGATE_ESCAPE.search(line):
        bad = _lone_surrogate(obj)
        if bad is not None:
            raise _BadLine(f"string holds a lone surrogate (\\u{bad:04x}), which no UTF-8 text can carry")
    return obj


def _depth_over(obj, limit: int) -> bool:
    """Whether arrays and objects nest deeper than ``limit`` in ``obj`` (iterative)."""
    stack = [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        if d > limit:
            return True
        stack.extend((c, d + 1) for c in v if isinstance(c, (dict, list)))
    return False


def _lone_surrogate(obj) -> int | None:
    """The first lone surrogate code point in any string (key or value) of ``obj``."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as exc:
                return ord(v[exc.start])
    return None


def _add_object(b: _Builder, lineno: int, default_id: str, obj: dict, raw_line: str, *,
                finite: bool = True) -> None:
    """One record of ``obj``; ``finite``: a number that is not a finite double (``1e999``
    overflows to infinity) quarantines the record, so ``meta`` stays standard JSON.
    Values JSON has no type for (a Parquet column of bytes, timestamps, decimals) go into
    ``meta`` as their ``str()``."""
    text = obj.get("text")
    raw_id = obj.get("doc_id", obj.get("id"))
    doc_id = _id_string(raw_id) if raw_id is not None else default_id
    ind = obj.get("individual_id")
    meta = {k: v for k, v in obj.items() if k not in ("text", "id", "doc_id", "individual_id")}
    try:
        meta_s = json.dumps(meta, ensure_ascii=False, sort_keys=True, allow_nan=not finite,
                            default=str) if meta else None
    except ValueError:
        b.add(lineno, default_id, raw_line, reason="invalid JSON: a number is out of range (not a finite double)")
        return
    reason = None
    if doc_id is None:
        reason, doc_id = "id is not a non-empty string or integer", default_id
    elif not isinstance(text, str):
        reason = "no text field" if text is None else "text is not a string"
    elif not text.strip():
        reason = "text is empty"
    elif ind is not None and _id_string(ind) is None:
        reason = "individual_id is not a non-empty string or integer"
    if reason:
        b.add(lineno, doc_id, raw_line, reason=reason)
    else:
        b.add(lineno, doc_id, text, _id_string(ind) if ind is not None else None, meta_s)


def read_text(f: InputFile, batch_size: int, per_line: bool) -> Iterator[pa.Table]:
    data = _read_bytes(f)
    b = _Builder(f.index, batch_size)
    if not per_line:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise InputError(f"{f.path}:{line}: file is not UTF-8 (byte {exc.start})") from None
        b.add(1, f.name, text)
        yield b.flush()
        return
    yield from parse_text_lines(f, data, batch_size)


def parse_text_lines(f: InputFile, data: bytes, batch_size: int, first_line: int = 1) -> Iterator[pa.Table]:
    """Records of plain text ``data``, one per non-blank line; the first line of ``data``
    is line ``first_line`` of ``f``."""
    b = _Builder(f.index, batch_size)
    for lineno, raw in enumerate(data.split(b"\n"), start=first_line):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue  # blank lines separate nothing and are not records
        try:
            b.add(lineno, f"{f.name}:{lineno}", raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            b.add(lineno, f"{f.name}:{lineno}", raw.decode("utf-8", "replace"),
                  reason=f"line is not UTF-8 (byte {exc.start})")
        if len(b) >= batch_size:
            yield b.flush()
    t = b.flush()
    if t is not None:
        yield t


def read_parquet(f: InputFile, batch_size: int) -> Iterator[pa.Table]:
    try:
        pf = pq.ParquetFile(f.path)
        names = pf.schema_arrow.names
    except (OSError, pa.ArrowException, UnicodeDecodeError) as exc:  # a column name that is not UTF-8
        raise InputError(f"{f.path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    if "text" not in names:
        raise InputError(f"{f.path}: Parquet file has no 'text' column")
    if pf.metadata.num_rows == 0:
        raise InputError(f"{f.path}: file is empty")
    row = 0
    b = _Builder(f.index, batch_size)
    batches = pf.iter_batches(batch_size=batch_size)
    while True:
        try:
            rb = next(batches, None)
            rows = rb.to_pylist() if rb is not None else None
        except (OSError, pa.ArrowException) as exc:  # a corrupt page
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(f"{f.path}:{row + 1}: not a readable Parquet file ({why})") from None
        except (ValueError, OverflowError, RecursionError) as exc:  # a timestamp past year 9999
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(f"{f.path}:{row + 1}: a value in the {batch_size} rows from here has no Python "
                             f"equivalent ({why})") from None
        if rows is None:
            break
        for obj in rows:
            row += 1
            try:
                raw = json.dumps(obj, default=str, ensure_ascii=False)
            except (ValueError, RecursionError):
                raise InputError(f"{f.path}:{row}: row nests too deeply to read") from None
            _add_object(b, row, f"{f.name}:{row}", obj, raw, finite=False)
        t = b.flush()
        if t is not None:
            yield t


def read_inputs(files: list[InputFile], batch_size: int = 1024, *, text_per_line: bool = False
                ) -> Iterator[pa.Table]:
    """Batches of the internal schema, in the global order (files sorted, then line)."""
    for f in files:
        if f.format == "jsonl":
            yield from read_jsonl(f, batch_size)
        elif f.format == "text":
            yield from read_text(f, batch_size, text_per_line)
        else:
            yield from read_parquet(f, batch_size)
