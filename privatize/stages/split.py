"""``split``: documents into segment records, the data points of CRT (paper 004, A.6).

Each segment becomes a record with ``doc_id = <parent>#<n>`` (n from 0), ``parent_id``,
``start`` and ``end`` (code-point offsets into the parent text: ``parent[start:end]`` is
the segment exactly) and the order column ``_seg = n``; ``individual_id``, ``meta``,
``_src``, ``_line`` and any other column are copied from the parent.

Segmentation rules (rule-based, ASCII whitespace ``[ \\t\\n\\r\\v\\f]`` only). A *gap* is
a maximal run of whitespace inside a document, with text on both sides; segments are
the text between gaps, so a segment never starts or ends with whitespace and empty
segments do not exist. Which gaps cut depends on ``unit``:

* ``line``: every gap holding a newline (dialogue turns ``SYS: ...`` / ``USR: ...``).
* ``paragraph``: every gap holding two or more newlines (a blank line).
* ``sentence`` (default): paragraph cuts, plus a gap after sentence-final punctuation:
  ``.``, ``!`` or ``?``, then any further ``.!?``, closing quotes or brackets
  (``" ' ) ]`` and the curly ``’ ”``), then the gap, then a capital letter (ASCII or
  Latin-1 ``À-Þ``), a digit, or an opening quote or bracket (``" ' ( [ “ ‘``). A period
  does not end a sentence after a single capital letter (an initial: "J. R. R.
  Tolkien") or after a word in :data:`ABBREVIATIONS` ("Mr.", "e.g.", "U.S.", "St.",
  "etc."), nor after a word in :data:`NUMBER_ABBREVIATIONS` when a digit follows
  ("No. 5", "Vol. 2", "Sept. 3"). A single newline does *not* cut a sentence (prose is
  often hard-wrapped); use ``unit: line`` where each line is a data point.

A document with no segment (empty or whitespace only) is dropped with ``_drop`` =
"empty after split": there is nothing in it to train on or to leak.

With ``doc_style``, each segment carries its document's style in ``doc_style`` (see
:class:`SplitSettings`).

Statistics: ``_stat.segments`` (1 per segment row) and ``_stat.expanded`` (segments - 1,
on the first segment row of each document), so the manifest reconciles records in and
out. Per-row statistics of earlier stages (``_stat.*`` columns) stay on the first
segment row only, so they are not counted once per segment.

The work is vectorised over the UTF-8 buffer of the whole batch (NumPy passes over the
bytes, then over the few candidate positions); no Python runs per segment.
"""

from __future__ import annotations

import logging
import re
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from privatize.settings import Before, Once, StageSettings
from privatize.stage import DROP, STAT_PREFIX, Stage, register_stage

log = logging.getLogger(__name__)

ABBREVIATIONS = frozenset("""
mr mrs ms mx dr prof sr jr st mt ft vs etc e.g i.e cf u.s u.k inc ltd co corp gen col lt sgt capt cmdr
rev hon gov sen rep dept est approx
""".split())
"""Words (lower case, without the final period) after which a period never ends a sentence."""

NUMBER_ABBREVIATIONS = frozenset("no nos vol vols fig figs pp art ch sec jan feb mar apr jun jul aug sep sept oct nov dec"
                                 .split())
"""Words after which a period ends no sentence when a digit follows ("No. 5"), but may
end one otherwise ("No. He left.")."""

DROP_EMPTY = "empty after split"
ASCII_WS = " \t\n\r\x0b\x0c"
_MAX_WORD = max(map(len, ABBREVIATIONS | NUMBER_ABBREVIATIONS))
_WINDOW = 8  # bytes looked at before a period: a leading quote, the word, the byte before
if _MAX_WORD > _WINDOW - 2:  # pragma: no cover - a guard for whoever edits the lists
    raise ImportError("abbreviations longer than 6 letters do not fit the 8-byte window")


def _table(chars: str | bytes) -> np.ndarray:
    t = np.zeros(256, bool)
    t[list(chars.encode() if isinstance(chars, str) else chars)] = True
    return t


_WS = _table(ASCII_WS)
_HWS = _table(ASCII_WS.replace("\n", ""))  # whitespace other than a newline
_CLOSE1 = _table(".!?\"')]")  # single-byte closers (and more punctuation)
_OPEN1 = _table("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\"'([")
_LEADERS = _table("\"'([")  # stripped from the front of the word before a period
_UPPER = _table("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_DIGIT = _table("0123456789")


def _is_ws(b: np.ndarray) -> np.ndarray:
    """``_WS[b]`` by comparisons (space, or 9-13 through uint8 wrap-around): on many
    bytes much faster than a table."""
    return (b == 32) | (b - 9 < 5)


def _lower(b: np.ndarray) -> np.ndarray:
    """ASCII capitals to lower case (they differ in bit 5 only), other bytes as they are."""
    return b | ((b - 65 < 26).view(np.uint8) << 5)


_ALL_BYTES = np.arange(256, dtype=np.uint8)
if (_is_ws(_ALL_BYTES) != _WS).any() or bytes(_lower(_ALL_BYTES)) != bytes(range(256)).lower():
    raise ImportError("_is_ws / _lower disagree with their tables")  # pragma: no cover


def _pack(word: str) -> int:
    """A word right-aligned in 8 bytes, zero-padded on the left, read as little-endian
    uint64: how :func:`_sentence_gaps` packs the word before a period."""
    raw = word.encode("ascii").rjust(_WINDOW, b"\0")
    return int.from_bytes(raw, "little")


_ABBR = np.array(sorted(_pack(w) for w in ABBREVIATIONS), np.uint64)
_NUM_ABBR = np.array(sorted(_pack(w) for w in NUMBER_ABBREVIATIONS), np.uint64)
# run of word bytes at the end of an 8-byte window, from the bit mask of its whitespace
# (bit k: byte k is whitespace); _GATHER_BITS multiplies the 0/1 bytes of a window read
# as uint64 into that mask in the top byte (every partial product at its own bit)
_GATHER_BITS = np.uint64(0x0102040810204080)
_RUN_LEN = np.array([_WINDOW if v == 0 else _WINDOW - 1 - (v.bit_length() - 1) for v in range(256)], np.int64)
# the top L bytes of a little-endian uint64 (where a right-aligned word of L bytes lies)
_HIGH_BYTES = np.array([((1 << (8 * k)) - 1) << (8 * (_WINDOW - k)) for k in range(_WINDOW + 1)], np.uint64)
_CLOSER_RUN = re.compile(rb"(?:[.!?\"')\]]|\xe2\x80[\x99\x9d])*")


class SplitSettings(StageSettings):
    kind: Literal["split"] = "split"
    order_rules = (Once("split appears twice"),
                   Before(("redact", "encrypt_text"), "split must come before redact and encrypt_text"))
    unit: Literal["sentence", "line", "paragraph"] = "sentence"
    doc_style: bool = False
    """Record each document's style (:func:`privatize.redaction.styles.detect_style` on
    the whole document: ``clinical``, ``legal``, ``chat``, ``general``) on its segments as
    a ``doc_style`` column, which ``redact`` with ``style: auto`` then uses instead of
    judging each segment alone (a lone sentence of a nursing note rarely looks clinical,
    and the clinical rules are what keep shorthand such as ``ABD SOFT`` or ``MAE`` from
    reading as names). The CRT recipe sets it."""


# ---- scanning helpers: vectorised over many positions at once ---------------------------

def _in(table: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``table[values]`` for a 256-entry table and bytes; ``np.take`` is the faster gather."""
    return np.take(table, values)


def _skip_fwd(b: np.ndarray, pos: np.ndarray, stop: np.ndarray, table: np.ndarray, steps: int = 16) -> np.ndarray:
    """For each i, the first ``q >= pos[i]`` with ``q == stop[i]`` or ``not table[b[q]]``.
    Most positions do not move: one pass over all of them, then the few that do move are
    walked as short arrays of their own (index, position, stop)."""
    pos = pos.astype(np.int64, copy=True)
    if not len(b):
        return pos
    act = np.flatnonzero((pos < stop) & _in(table, b[np.minimum(pos, len(b) - 1)]))
    q, s = pos[act] + 1, stop[act]
    for _ in range(steps):
        more = q < s
        more[more] = _in(table, b[q[more]])
        pos[act[~more]] = q[~more]
        act, q, s = act[more], q[more] + 1, s[more]
        if not len(act):
            return pos
    for i, at, end in zip(act.tolist(), q.tolist(), s.tolist()):  # long runs (rare): growing windows
        w = 256
        while at < end:
            hit = np.flatnonzero(~table[b[at:min(at + w, end)]])
            if len(hit):
                at += int(hit[0])
                break
            at, w = min(at + w, end), w * 4
        pos[i] = at
    return pos


def _skip_bwd(b: np.ndarray, pos: np.ndarray, start: np.ndarray, table: np.ndarray, steps: int = 16) -> np.ndarray:
    """For each i, the least ``q <= pos[i]`` such that ``q >= start[i]`` and every byte of
    ``b[q:pos[i]]`` is in ``table`` (walked as :func:`_skip_fwd` walks)."""
    pos = pos.astype(np.int64, copy=True)
    if not len(b):
        return pos
    act = np.flatnonzero((pos > start) & _in(table, b[np.maximum(pos, 1) - 1]))
    q, s = pos[act] - 1, start[act]
    for _ in range(steps):
        more = q > s
        more[more] = _in(table, b[q[more] - 1])
        pos[act[~more]] = q[~more]
        act, q, s = act[more], q[more] - 1, s[more]
        if not len(act):
            return pos
    for i, at, begin in zip(act.tolist(), q.tolist(), s.tolist()):
        w = 256
        while at > begin:
            lo = max(at - w, begin)
            miss = np.flatnonzero(~table[b[lo:at]])
            if len(miss):
                at = lo + int(miss[-1]) + 1
                break
            at, w = lo, w * 4
        pos[i] = at
    return pos


def _closer_run_end(b: np.ndarray, p: np.ndarray, stop: np.ndarray, steps: int = 16) -> np.ndarray:
    """End of the run of closers (``.!?"')]`` and ``’ ”``) that starts right after each
    punctuation mark ``p`` (sorted). Candidates whose runs meet are merged as they go, so
    a long run of punctuation is walked once."""
    e = p + 1
    act = np.flatnonzero(e < stop)
    n = len(b)
    for _ in range(steps):
        if not len(act):
            break  # (not return: merged candidates still take their ends below)
        # a later candidate that an earlier one has reached ends where the earlier one does
        if len(act) > 1:
            reached = np.zeros(len(act), bool)
            reached[1:] = p[act[1:]] < e[act[:-1]]
            if reached.any():
                e[act[reached]] = -1  # settled below, from the earlier candidate
                act = act[~reached]
        x = e[act]
        one = _in(_CLOSE1, b[x])
        three = ~one & (b[x] == 0xE2) & (x + 2 < stop[act])
        if three.any():
            y = x[three]
            three[three] = (b[y + 1] == 0x80) & ((b[np.minimum(y + 2, n - 1)] == 0x99) | (b[np.minimum(y + 2, n - 1)] == 0x9D))
        e[act[one]] += 1
        e[act[three]] += 3
        act = act[one | three]
        act = act[e[act] < stop[act]]
    if len(act):
        buf = memoryview(b)
        for i in act.tolist():
            m = _CLOSER_RUN.match(buf, int(e[i]), int(stop[i]))
            e[i] = m.end()
    # merged candidates take the end of the candidate before them
    unset = e < 0
    if unset.any():
        idx = np.where(unset, 0, np.arange(len(e)))
        np.maximum.accumulate(idx, out=idx)
        e = e[idx]
    return e


def _record_of(rec_start: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The record of each position of ``pos`` (sorted): the last record starting at or
    before it (empty records share a start with the next). A search per record, not per
    position."""
    return np.repeat(np.arange(len(rec_start)), np.diff(np.searchsorted(pos, rec_start), append=len(pos)))


def _bytes_before(b: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``b[pos-8:pos]`` for each position as a (n, 8) uint8 matrix (zeros before the
    buffer start), gathered 8 bytes at a time through an unaligned uint64 view."""
    out = np.zeros((len(pos), _WINDOW), np.uint8)
    if len(b) >= _WINDOW:
        u64 = np.ndarray(shape=(len(b) - _WINDOW + 1,), dtype="<u8", buffer=b, strides=(1,))
        out.view("<u8")[:, 0] = u64[np.maximum(pos - _WINDOW, 0)]
    for i in np.flatnonzero(pos < _WINDOW).tolist():  # at most the first few bytes of a batch
        q = int(pos[i])
        out[i] = 0
        out[i, _WINDOW - q:] = b[:q]
    return out


def _sentence_gaps(b, rec_start, rec_end):
    """(start, end) of the gaps that end a sentence."""
    n = len(b)
    p = np.flatnonzero((b == 46) | (b == 33) | (b == 63))
    if not len(p):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    r = _record_of(rec_start, p)
    stop = rec_end[r]
    # the end of the closing run: most marks are followed by a space, a letter or the end
    e = p + 1
    nb = b[np.minimum(e, n - 1)]
    run = (e < stop) & (_in(_CLOSE1, nb) | (nb == 0xE2))
    if run.any():
        e[run] = _closer_run_end(b, p[run], stop[run])
    # one candidate per run: the first mark (the marks of a run share their end)
    first = np.ones(len(p), bool)
    first[1:] = e[1:] != e[:-1]
    ok = first & (e < stop)
    ok[ok] = _in(_WS, b[e[ok]])
    p, e, r, stop = p[ok], e[ok], r[ok], stop[ok]
    nxt = _skip_fwd(b, e + 1, stop, _WS)
    ok = nxt < stop
    x = nxt[ok]
    bx = b[x]
    opener = _in(_OPEN1, bx)
    hi = np.flatnonzero(bx >= 0xC3)
    if len(hi):  # “ ‘ (E2 80 9C / 98) and Latin-1 capitals À-Þ but not × (C3 80-9E, not 97)
        y, s = x[hi], stop[ok][hi]
        y1, y2 = b[np.minimum(y + 1, n - 1)], b[np.minimum(y + 2, n - 1)]
        curly = (bx[hi] == 0xE2) & (y + 2 < s) & (y1 == 0x80) & ((y2 == 0x9C) | (y2 == 0x98))
        latin = (bx[hi] == 0xC3) & (y + 1 < s) & (y1 >= 0x80) & (y1 <= 0x9E) & (y1 != 0x97)
        opener[hi] = curly | latin
    ok[ok] = opener
    p, e, r, nxt = p[ok], e[ok], r[ok], nxt[ok]
    # abbreviations and initials: the word before a period, from the last whitespace (or
    # the record start) within the window; a leading quote or bracket is not part of it
    dot = np.flatnonzero(b[p] == 46)
    if len(dot):
        pd = p[dot]
        rs = rec_start[r[dot]]
        w = _bytes_before(b, pd)
        near = np.flatnonzero(pd - rs < _WINDOW)
        if len(near):  # bytes before the record start count as whitespace
            sub = w[near]
            sub[(pd[near, None] + np.arange(-_WINDOW, 0)) < rs[near, None]] = 32
            w[near] = sub
        ws_mask = (_is_ws(w).view("<u8").ravel() * _GATHER_BITS) >> np.uint64(56)
        run_len = _RUN_LEN[ws_mask]  # word bytes before pd
        lead = (run_len > 1) & (run_len < _WINDOW) & \
            _in(_LEADERS, w[np.arange(len(pd)), np.clip(_WINDOW - run_len, 0, _WINDOW - 1)])
        wl = run_len - lead
        short = (run_len < _WINDOW) & (wl >= 1) & (wl <= _MAX_WORD)
        code = _lower(w).view("<u8").ravel() & _HIGH_BYTES[wl]
        initial = (wl == 1) & _in(_UPPER, w[:, -1])
        abbr = initial | (short & np.isin(code, _ABBR))
        abbr |= short & np.isin(code, _NUM_ABBR) & _in(_DIGIT, b[nxt[dot]])
        keep = np.ones(len(p), bool)
        keep[dot[abbr]] = False
        e, nxt = e[keep], nxt[keep]
    return e, nxt


def _newline_gaps(b, rec_start, rec_end, min_newlines: int):
    """(start, end) of whitespace runs holding at least ``min_newlines`` newlines."""
    nl = np.flatnonzero(b == 10)
    if not len(nl):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    r = _record_of(rec_start, nl)
    stop = rec_end[r]
    after = _skip_fwd(b, nl + 1, stop, _HWS)
    cont = after < stop
    cont[cont] = b[after[cont]] == 10  # the run goes on to the next newline
    last = np.flatnonzero(~cont)  # last newline of each run
    first = np.r_[0, last[:-1] + 1]
    many = (last - first + 1) >= min_newlines
    first, last = first[many], last[many]
    start = _skip_bwd(b, nl[first], rec_start[r[first]], _HWS)
    end = _skip_fwd(b, after[last], stop[last], _WS)
    return start, end


def segment_bytes(arr: pa.Array, unit: str = "sentence"):
    """Segments of every string of ``arr`` (no nulls; ``string`` type).

    Returns ``(record, start, end, byte_start, byte_end)``: the index of each segment's
    record, its code-point offsets into the record, and its byte offsets into the data
    buffer of ``arr``; segments come in record order, then position."""
    if unit not in ("line", "paragraph", "sentence"):
        raise ValueError(f"unknown split unit {unit!r}")
    n_rec = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset:arr.offset + n_rec + 1].astype(np.int64)
    data = arr.buffers()[2]
    base = int(offsets[0]) if n_rec else 0
    b = np.frombuffer(data, np.uint8)[base:int(offsets[-1])] if data is not None and n_rec else np.zeros(0, np.uint8)
    rec_start, rec_end = offsets[:-1] - base, offsets[1:] - base
    # the content of each record: without leading and trailing whitespace
    cs = _skip_fwd(b, rec_start, rec_end, _WS)
    ce = _skip_bwd(b, rec_end, cs, _WS)
    s, e = _newline_gaps(b, rec_start, rec_end, 1 if unit == "line" else 2)
    gap_s, gap_e = [s], [e]
    if unit == "sentence":
        s, e = _sentence_gaps(b, rec_start, rec_end)
        gap_s.append(s)
        gap_e.append(e)
    # every gap is a maximal whitespace run, so two gaps are equal or disjoint: keep one
    # of each (each list is sorted, so the stable sort is a merge)
    gs, ge = np.concatenate(gap_s), np.concatenate(gap_e)
    order = np.argsort(gs, kind="stable")
    gs, ge = gs[order], ge[order]
    new = np.ones(len(gs), bool)
    new[1:] = gs[1:] != gs[:-1]
    gs, ge = gs[new], ge[new]
    # only inner gaps (text on both sides) cut
    r = _record_of(rec_start, gs)
    inner = (gs > cs[r]) & (ge < ce[r])
    gs, ge = gs[inner], ge[inner]
    nonempty = cs < ce
    seg_s = np.sort(np.concatenate([cs[nonempty], ge]), kind="stable")
    seg_e = np.sort(np.concatenate([ce[nonempty], gs]), kind="stable")
    rec = _record_of(rec_start, seg_s)
    start, end = seg_s - rec_start[rec], seg_e - rec_start[rec]
    if len(seg_s) and not pc.all(pc.string_is_ascii(arr)).as_py():
        start, end = _code_points(arr, base, rec, rec_start, seg_s, seg_e)
    return rec, start, end, seg_s + base, seg_e + base


def _code_points(arr, base, rec, rec_start, seg_s, seg_e):
    """Code-point offsets of segments within their records. Only ASCII whitespace lies
    between a record's segments, so a segment starts at its byte offset less the extra
    bytes (UTF-8 bytes - code points) of the segments before it in its record; each
    segment's code points come from Arrow's UTF-8 length of a view alternating segments
    and gaps."""
    n = len(seg_s)
    offs = np.empty(2 * n, np.int64)
    offs[0::2], offs[1::2] = seg_s, seg_e
    view = pa.StringArray.from_buffers(2 * n - 1, pa.py_buffer((offs + base).astype(np.int32)), arr.buffers()[2])
    length = pc.utf8_length(view).to_numpy(zero_copy_only=False)[0::2].astype(np.int64)
    extra = seg_e - seg_s - length
    before = np.cumsum(extra) - extra  # extra bytes before each segment, from the buffer start
    first = np.flatnonzero(np.r_[True, rec[1:] != rec[:-1]])  # first segment of each record
    before -= np.repeat(before[first], np.diff(first, append=n))
    start = seg_s - rec_start[rec] - before
    return start, start + length


def _texts(arr: pa.Array, byte_start: np.ndarray, byte_end: np.ndarray) -> pa.Array:
    """The segment strings: a zero-copy view of the buffer that alternates segments and
    the gaps between them, of which the segments are taken."""
    if not len(byte_start):
        return pa.array([], pa.string())
    offs = np.empty(2 * len(byte_start), np.int64)
    offs[0::2], offs[1::2] = byte_start, byte_end
    view = pa.StringArray.from_buffers(len(offs) - 1, pa.py_buffer(offs.astype(np.int32)), arr.buffers()[2])
    return view.take(pa.array(np.arange(0, len(offs), 2, dtype=np.int64)))


def segment_spans(text: str, unit: str = "sentence") -> list[tuple[int, int]]:
    """Code-point spans of the segments of one text (the rules of this module)."""
    _, start, end, _, _ = segment_bytes(pa.array([text], pa.string()), unit)
    return list(zip(start.tolist(), end.tolist()))


def sentence_spans(text: str) -> list[tuple[int, int]]:
    return segment_spans(text, "sentence")


def line_spans(text: str) -> list[tuple[int, int]]:
    return segment_spans(text, "line")


def paragraph_spans(text: str) -> list[tuple[int, int]]:
    return segment_spans(text, "paragraph")


_DIGITS = pa.array([str(i) for i in range(1024)], pa.string())


def _numbers(count: int) -> pa.Array:
    """The decimal strings "0".."count-1" (segment numbers of doc ids)."""
    if count <= len(_DIGITS):
        return _DIGITS
    return pc.cast(pa.array(np.arange(count, dtype=np.int64)), pa.string())


def _take_rows(table: pa.Table, idx: pa.Array) -> pa.Table:
    """``table.take(idx)``, but a column of nulls only (often ``individual_id`` or
    ``meta``) is made anew: there is nothing in it to copy."""
    cols = [pa.nulls(len(idx), c.type) if c.null_count == len(c) else c.take(idx) for c in table.columns]
    return pa.Table.from_arrays(cols, schema=table.schema)


@register_stage("split", SplitSettings)
class Split(Stage):
    def process_batch(self, batch: pa.Table) -> pa.Table:
        text = batch["text"]
        text = text.chunk(0) if text.num_chunks == 1 else text.combine_chunks()  # (combine_chunks copies)
        if not pa.types.is_string(text.type):
            text = text.cast(pa.string())
        if text.null_count:
            text = pc.fill_null(text, "")
        rec, starts, ends, bs, be = segment_bytes(text, self.settings.unit)
        n_seg = len(rec)
        counts = np.bincount(rec, minlength=batch.num_rows)
        empty = np.flatnonzero(counts == 0)
        n_empty = len(empty)
        first_row = np.cumsum(counts) - counts
        seg_no = np.arange(n_seg, dtype=np.int64) - first_row[rec]
        is_first = np.r_[seg_no == 0, np.ones(n_empty, bool)]
        idx = pa.array(np.concatenate([rec, empty]).astype(np.int64))

        parents = batch["doc_id"].combine_chunks().cast(pa.string()).take(idx)
        seg_str = _numbers(int(seg_no.max()) + 1 if n_seg else 0).take(pa.array(seg_no))
        seg_ids = pc.binary_join_element_wise(parents.slice(0, n_seg), seg_str, "#")
        rows = _take_rows(batch.drop_columns(["doc_id", "text", "_seg"]), idx)
        # statistics of earlier stages stay on one row per document
        for i, name in enumerate(rows.column_names):
            if name.startswith(STAT_PREFIX):
                rows = rows.set_column(i, name, pc.if_else(pa.array(is_first), rows[name],
                                                           pa.scalar(0, rows.schema.field(i).type)))
        zeros64 = np.zeros(n_empty, np.int64)
        seg_texts = _texts(text, bs, be)
        if n_empty:  # empty documents ride along (dropped), after the segments
            seg_ids = pa.concat_arrays([seg_ids, parents.slice(n_seg)])
            seg_texts = pa.concat_arrays([seg_texts, text.take(pa.array(empty, pa.int64()))])
        cols = {
            "doc_id": seg_ids,
            "text": seg_texts,
            "_seg": pa.array(np.r_[seg_no, zeros64].astype(np.int32)),
            "parent_id": parents,
            "start": pa.array(np.r_[starts, zeros64]),
            "end": pa.array(np.r_[ends, zeros64]),
            DROP: pc.if_else(pa.array(np.r_[np.zeros(n_seg, bool), np.ones(n_empty, bool)]), DROP_EMPTY,
                             pa.scalar(None, pa.string())) if n_empty else pa.nulls(n_seg, pa.string()),
            "_stat.segments": pa.array(np.r_[np.ones(n_seg, np.int64), zeros64]),
            "_stat.expanded": pa.array(np.r_[np.where(seg_no == 0, counts[rec] - 1, 0), zeros64]),
        }
        if self.settings.doc_style:
            from privatize.redaction.styles import detect_style

            doc_styles = pa.array([detect_style(t) for t in text.to_pylist()], pa.string())
            cols["doc_style"] = doc_styles.take(idx)
        for name, values in cols.items():
            rows = rows.append_column(name, values)
        if n_empty:
            log.debug("split: %d segments from %d documents, %d empty", n_seg, batch.num_rows, n_empty)
        return rows
