"""Reading on Ray: one read task per file, or per byte range of a large JSONL or
line-per-record text file (cut at line starts by :func:`privatize.records.scan_range`,
run as tasks, their first line numbers found by counting newlines)."""

from __future__ import annotations

import os
import time
from functools import partial

from privatize import allocator
from privatize.errors import InputError
from privatize.execution import READ_STAGE, finish_stage_output
from privatize.ray import cluster
from privatize.ray.cluster import StallGuard, windowed
from privatize.ray.workers import BatchInfo, with_info
from privatize.byteranges import ReadPiece, read_piece_tables, scan_range
from privatize.records import InputFile, not_jsonl_error

MIN_RANGE_BYTES = 64 << 10
"""The smallest byte range :func:`range_bytes_for` cuts a file into."""


def scan_task(path: str, fmt: str, nominal_start: int, nominal_end: int, size: int) -> dict:
    allocator.tune()
    return scan_range(path, fmt, nominal_start, nominal_end, size)


def read_piece(piece: ReadPiece, batch_size: int, text_per_line: bool):
    """Blocks of the internal schema for one piece; the last carries the piece's
    :class:`~privatize.ray.workers.BatchInfo` (rows read)."""
    allocator.tune()
    t0 = time.perf_counter()
    rows = 0
    pending = None
    for t in read_piece_tables(piece, batch_size, text_per_line):
        if pending is not None:
            yield pending
        pending = finish_stage_output(t, READ_STAGE)
        rows += t.num_rows
    yield with_info(pending, BatchInfo(READ_STAGE, records_in=rows, seconds=time.perf_counter() - t0))


def range_bytes_for(splittable_bytes: int, largest: int, slots: int) -> int:
    """Byte ranges small enough that every slot (an actor, or a task's CPU) gets about two
    pieces of the splittable input, never above ``largest`` nor below
    :data:`MIN_RANGE_BYTES` (one 1.4 MB file was one block: one redaction actor did all
    the work while the other waited)."""
    return min(largest, max(MIN_RANGE_BYTES, -(-splittable_bytes // (2 * max(1, slots)))))


def plan_reads(files: list[InputFile], *, text_per_line: bool, largest_range: int, slots: int, task_cpus: float,
               scheduling: dict, window: int = 1, guard: StallGuard | None = None) -> list[ReadPiece]:
    """One piece per file; JSONL and line-per-record text files in byte ranges
    (:func:`range_bytes_for`) cut at line starts, their first line numbers found by
    counting newlines in parallel (``window`` at a time)."""
    pieces: list[ReadPiece] = []
    scans = []
    scan = cluster.task(scan_task, num_cpus=task_cpus, **scheduling)
    sizes = []
    for f in files:
        try:
            sizes.append(os.path.getsize(f.path))
        except OSError as exc:
            raise InputError(f"{f.path}: cannot read: {exc.strerror or exc}") from None
    splittable = [f.format == "jsonl" or (f.format == "text" and text_per_line) for f in files]
    range_bytes = range_bytes_for(sum(n for n, ok in zip(sizes, splittable) if ok), largest_range, slots)
    for f, size, can_split in zip(files, sizes, splittable):
        if not can_split or size <= range_bytes:
            pieces.append(ReadPiece(f))
            continue
        bounds = list(range(0, size, range_bytes)) + [size]
        scans.append((f, len(pieces), [(f.path, f.format, a, b, size) for a, b in zip(bounds, bounds[1:])]))
        pieces.append(None)  # placeholder, filled in below
    done = iter(windowed(scan, [args for _, _, jobs in scans for args in jobs], window, guard))
    out: list[ReadPiece] = []
    filled: dict[int, list[ReadPiece]] = {}
    for f, slot, jobs in scans:
        results = [next(done) for _ in jobs]
        if not any(r["nonblank"] for r in results):
            raise InputError(f"{f.path}: file is empty")
        line = 1
        ranges = []
        first_bad = None
        for r in results:
            if r["bad"] is not None and first_bad is None:
                first_bad = (line + r["bad"][0] - 1, r["bad"][1])
            if r["end"] > r["start"]:
                ranges.append(ReadPiece(f, r["start"], r["end"], line))
            line += r["newlines"]
        if f.format == "jsonl" and not any(r["record"] for r in results):
            raise not_jsonl_error(f, first_bad)
        filled[slot] = ranges
    for i, p in enumerate(pieces):
        out.extend(filled[i] if p is None else [p])
    return out


def input_datasource(pieces: list[ReadPiece], batch_size: int, text_per_line: bool, *, on_driver_node: bool):
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class PrivatizeInputDatasource(Datasource):
        def get_name(self) -> str:
            return "ReadInputs"

        @property
        def supports_distributed_reads(self) -> bool:
            return not on_driver_node  # Ray then reads on the driver's node

        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return [ReadTask(partial(read_piece, p, batch_size, text_per_line),
                             BlockMetadata(num_rows=None, size_bytes=None, input_files=[p.file.path],
                                           exec_stats=None))
                    for p in pieces]

    return PrivatizeInputDatasource()

