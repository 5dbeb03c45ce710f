"""Vectorised sentence segmentation over an Arrow string array (the UTF-8 buffer of a
whole batch at once), so splitting costs NumPy passes, not Python per sentence.

Rules (rule-based, for prose): a sentence ends at ``.``, ``!`` or ``?`` (plus further
punctuation and closing quotes or brackets) followed by ASCII whitespace and then a
capital letter, digit, opening quote or bracket, unless the word before a period is a
known abbreviation ("Mr.", "e.g.", "U.S.") or a single capital (an initial). A blank
line always ends a segment; a single newline does not (prose is often hard-wrapped).
Segments carry no surrounding whitespace.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st mt vs etc e.g i.e u.s u.k no vol fig inc ltd co corp jan feb mar apr jun jul aug sep
sept oct nov dec gen col lt sgt capt rev hon gov sen rep dept est approx
""".split())
_MAX_ABBR = max(map(len, ABBREVIATIONS))
_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[ord("A"):ord("Z") + 1] += 32
_LEADERS = np.array([ord(c) for c in "\"'(["], np.uint8)
_ABBR_CODES = np.array([sum(ord(c) << (8 * k) for k, c in enumerate(a)) for a in ABBREVIATIONS], np.uint64)
ASCII_WS = " \t\n\r\x0b\x0c"

_WS = np.zeros(256, bool)
_WS[[ord(c) for c in ASCII_WS]] = True
_PUNCT = np.zeros(256, bool)
_PUNCT[[ord(c) for c in ".!?"]] = True
# after the punctuation: more punctuation, closing quotes/brackets (ASCII, and the bytes
# of UTF-8 ’ ” which are E2 80 99 / E2 80 9D)
_CLOSER = _PUNCT.copy()
_CLOSER[[ord(c) for c in "\"')]"] + [0xE2, 0x80, 0x99, 0x9D]] = True
# what may start the next sentence: capital, digit, opening quote/bracket (and ‘ “: E2)
_OPENER = np.zeros(256, bool)
_OPENER[[ord(c) for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\"'(["] + [0xE2]] = True


def _next_in(sorted_pos: np.ndarray, at: np.ndarray, default: int) -> np.ndarray:
    i = np.searchsorted(sorted_pos, at)
    out = np.full(len(at), default, dtype=np.int64)
    ok = i < len(sorted_pos)
    out[ok] = sorted_pos[i[ok]]
    return out


def _prev_in(sorted_pos: np.ndarray, at: np.ndarray, default: int) -> np.ndarray:
    i = np.searchsorted(sorted_pos, at) - 1
    out = np.full(len(at), default, dtype=np.int64)
    ok = i >= 0
    out[ok] = sorted_pos[i[ok]]
    return out


def segment_sentences(arr: pa.Array, unit: str = "sentence"):
    """Segments of every record of ``arr`` (a string array without nulls).

    Returns ``(record, start, end, texts)``: the record index of each segment, its
    code-point offsets into the record, and the segment texts as an Arrow array. ``unit``
    is ``sentence`` or ``paragraph`` (blank lines only)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    arr = arr.cast(pa.large_string()) if False else arr.cast(pa.string())
    n_rec = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset:arr.offset + n_rec + 1].astype(np.int64)
    base = int(offsets[0])
    data_all = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    b = data_all[base:int(offsets[-1])]
    rel = offsets - base
    n = len(b)
    ws = _WS[b]
    nonws = np.flatnonzero(~ws)
    rec_start, rec_end = rel[:-1], rel[1:]

    gap_s, gap_e = [], []
    if unit == "sentence" and n:
        p = np.flatnonzero(_PUNCT[b])
        e = p + 1
        for _ in range(8):  # runs of punctuation and closing quotes
            more = e < n
            more[more] = _CLOSER[b[e[more]]]
            if not more.any():
                break
            e[more] += 1
        keep = e < n
        keep[keep] = ws[e[keep]]
        p, e = p[keep], e[keep]
        nxt = _next_in(nonws, e, n)
        rec = np.searchsorted(rec_start, p, side="right") - 1
        keep = (nxt < rec_end[rec])
        keep[keep] = _OPENER[b[nxt[keep]]]
        p, e, nxt = p[keep], e[keep], nxt[keep]
        # abbreviations and initials: the word before a period
        if len(p):
            word_start = np.maximum(_prev_in(np.flatnonzero(ws), p, -1) + 1, rec_start[np.searchsorted(rec_start, p, side="right") - 1])
            wlen = p - word_start
            is_dot = b[p] == ord(".")
            initial = is_dot & (wlen == 1) & (b[np.maximum(p - 1, 0)] >= ord("A")) & (b[np.maximum(p - 1, 0)] <= ord("Z"))
            # the lower-cased word (without a leading quote or bracket) packed into an
            # integer, compared with the abbreviations packed the same way
            opener = np.isin(b[np.minimum(word_start, n - 1)], _LEADERS) & (wlen > 1)
            ws0 = word_start + opener
            wl = p - ws0
            cand = is_dot & (wl >= 1) & (wl <= _MAX_ABBR)
            code = np.zeros(len(p), np.uint64)
            for k in range(_MAX_ABBR):
                m = cand & (k < wl)
                code[m] |= _LOWER[b[ws0[m] + k]].astype(np.uint64) << np.uint64(8 * k)
            abbr = initial | (cand & np.isin(code, _ABBR_CODES))
            gap_s.append(e[~abbr])
            gap_e.append(nxt[~abbr])
    if n:
        # blank lines: a newline whose next non-whitespace comes after another newline
        nl = np.flatnonzero(b == ord("\n"))
        if len(nl) > 1:
            nxt_nonws = _next_in(nonws, nl, n)
            nl_next = nl[1:]
            blank = nl_next < nxt_nonws[:-1]
            first_nl = nl[:-1][blank]
            gap_s.append(_prev_in(nonws, first_nl, -1) + 1)
            gap_e.append(nxt_nonws[:-1][blank])
    # record boundaries are cuts too: trailing whitespace of one record, leading of the next
    starts_content = _next_in(nonws, rec_start, n)
    gap_s.append(rec_start)
    gap_e.append(np.maximum(starts_content, rec_start))
    gs = np.concatenate(gap_s) if gap_s else np.zeros(0, np.int64)
    ge = np.concatenate(gap_e) if gap_e else np.zeros(0, np.int64)
    order = np.lexsort((-ge, gs))
    gs, ge = gs[order], ge[order]
    # merge overlapping gaps
    if len(gs):
        reach = np.maximum.accumulate(ge)
        new = np.ones(len(gs), bool)
        new[1:] = gs[1:] > reach[:-1]
        grp = np.cumsum(new) - 1
        ms = gs[new]
        me = np.zeros(new.sum(), np.int64)
        np.maximum.at(me, grp, ge)
        gs, ge = ms, me
    # a segment runs from the end of one gap to the start of the next (or the buffer end)
    seg_s = ge
    seg_next = np.append(gs[1:], n)
    nonempty = seg_s < seg_next
    nonempty[nonempty] = ~ws[seg_s[nonempty]]
    seg_s, seg_next = seg_s[nonempty], seg_next[nonempty]
    if not len(seg_s):
        empty = pa.array([], pa.string())
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), empty
    # texts: contiguous views from each segment start to the next, trailing whitespace trimmed
    offs = np.append(seg_s, seg_next[-1]) + base
    raw_view = pa.StringArray.from_buffers(len(seg_s), pa.py_buffer(offs.astype(np.int32).tobytes()),
                                           arr.buffers()[2])
    # the span up to the next segment includes the gap: cut it back to seg_next first
    texts = pc.utf8_rtrim(raw_view, characters=ASCII_WS)
    rec = np.searchsorted(rec_start, seg_s, side="right") - 1
    # byte offsets -> code-point offsets within the record
    cont = np.flatnonzero((b & 0xC0) == 0x80) if (b > 0x7F).any() else np.zeros(0, np.int64)
    before = np.searchsorted(cont, seg_s) - np.searchsorted(cont, rec_start[rec])
    start = seg_s - rec_start[rec] - before
    end = start + pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    return rec, start, end, texts
