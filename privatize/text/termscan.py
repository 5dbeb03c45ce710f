"""Compiled kernels of the ``identifiers`` stage (numba): the word scan, the term digests,
and the exact counting of distinct individuals per term with open-addressing hash tables.
Each touches every character or term once, with no Python object per word: the graph
build's goal (20 MB/s per core, issue 22) is out of reach of a per-word Python loop and of
sort-based numpy passes alike.

The kernels compile on first use and are cached beside this file (``cache=True``: one
compilation per machine and code-point width, not per process or Ray worker).

Term identity: a word's digest is two 64-bit polynomial hashes (different odd bases,
Horner's rule over the normalised code points) each mixed with the word's length by a
SplitMix64 finaliser; an n-gram's digest combines its words' lanes word by word (order
matters). Two terms share a digest with odds about terms^2 / 2^128.
"""

from __future__ import annotations

import numba
import numpy as np

BASE1, BASE2 = 1_000_003, 0x100000001B3
"""The lanes' polynomial bases (odd)."""
_SEED = 0x632BE59BD9B4E019
_M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)
"""The lanes' multipliers when a word's length, or a term's next word, joins them."""


@numba.njit(inline="always")
def _fmix(x):
    x ^= x >> np.uint64(31)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(29)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    return x ^ (x >> np.uint64(32))


@numba.njit(inline="always")
def _combine(acc, word, m):
    """A term's digest lane extended by one word's lane (order matters)."""
    return _fmix((acc * m) ^ (word + np.uint64(_SEED)))


@numba.njit(cache=True, nogil=True)
def scan_words(cps, classes, normal, word_bit, inner_bit, end_bit):
    """The words of ``cps`` (code points): maximal runs of word characters (``classes``),
    with an inner character (apostrophe, hyphen) between two word characters joining
    them; their digests are of the normalised code points (``normal``: a table from code
    point to code point). Returns ``starts``, ``ends``, the two digest lanes and ``seg``,
    which grows by one wherever a sentence-end character lies between two words (terms
    never cross one)."""
    n = len(cps)
    cap = n // 2 + 1
    starts = np.empty(cap, np.int64)
    ends = np.empty(cap, np.int64)
    lane1 = np.empty(cap, np.uint64)
    lane2 = np.empty(cap, np.uint64)
    seg = np.empty(cap, np.int64)
    b1, b2 = np.uint64(BASE1), np.uint64(BASE2)
    count, segment, stopped, i = 0, 0, False, 0
    while i < n:
        c = classes[cps[i]]
        if c & word_bit:
            s = i
            x1 = np.uint64(0)
            x2 = np.uint64(0)
            while True:
                while i < n and classes[cps[i]] & word_bit:
                    v = np.uint64(normal[cps[i]])
                    x1 = x1 * b1 + v
                    x2 = x2 * b2 + v
                    i += 1
                if i + 1 < n and classes[cps[i]] & inner_bit and classes[cps[i + 1]] & word_bit:
                    v = np.uint64(normal[cps[i]])
                    x1 = x1 * b1 + v
                    x2 = x2 * b2 + v
                    i += 1
                    continue
                break
            if stopped and count:
                segment += 1
            stopped = False
            length = np.uint64(i - s)
            starts[count] = s
            ends[count] = i
            lane1[count] = _fmix(x1 * _M1 + length)
            lane2[count] = _fmix(x2 * _M2 + length)
            seg[count] = segment
            count += 1
        else:
            if c & end_bit:
                stopped = True
            i += 1
    return starts[:count], ends[:count], lane1[:count], lane2[:count], seg[:count]


@numba.njit(cache=True, nogil=True)
def term_occurrences(lane1, lane2, seg, max_n):
    """Every run of 1 to ``max_n`` consecutive words inside one segment: its first word,
    its length and its digest lanes, by length, then position."""
    w = len(lane1)
    cap = w * max_n
    first = np.empty(cap, np.int64)
    length = np.empty(cap, np.int8)
    oa = np.empty(cap, np.uint64)
    ob = np.empty(cap, np.uint64)
    j = 0
    for n in range(1, max_n + 1):
        for i in range(w - n + 1):
            if seg[i] != seg[i + n - 1]:
                continue
            g1, g2 = lane1[i], lane2[i]
            for t in range(1, n):
                g1 = _combine(g1, lane1[i + t], _M1)
                g2 = _combine(g2, lane2[i + t], _M2)
            first[j] = i
            length[j] = n
            oa[j] = g1
            ob[j] = g2
            j += 1
    return first[:j], length[:j], oa[:j], ob[:j]


INLINE = 8
"""Up to this ``k``, a term's individuals so far sit in its own hash-table slot (one cache
line or two per look-up); above it, (term, individual) pairs take a table of their own."""


@numba.njit(inline="always")
def _slots(count):
    size = 16
    while size * 3 < 4 * count:  # load factor at most 3/4 (when every row is a new term)
        size *= 2
    return size


BUCKET_ROWS = 4_096
"""Rows per bucket of the counting pass: the rows are first scattered by the top bits of
their term's digest (all of a term's rows in one bucket, in row order), so that each
bucket's hash table stays in the CPU's cache instead of one table the size of the batch
missing it at every look-up."""


# One function of 85 lines (over the 80-line rule) on purpose: a compiled numba kernel whose
# loops share their local arrays and counters; split up, its state would cross call boundaries
# inside the hot loop, and the steps read best in sequence, as the docstring above lists them.
@numba.njit(cache=True, nogil=True)
def _count(a, b, who, k, sending):
    """Distinct individuals per distinct term (lanes ``a``/``b``), counted to ``k``, with
    open addressing keyed on the whole lanes. Returns, per row, whether it is the first of
    its (term, individual) pair while its term had fewer than ``k`` individuals (what a
    batch must send), and per distinct term one row of it and its count (``sending``:
    only the first result is wanted)."""
    m = len(a)
    bits = 0
    while (m >> bits) > BUCKET_ROWS:
        bits += 1
    # the rows by bucket (a counting sort, stable: row order kept inside a bucket), their
    # values moved with them so that each bucket reads them in order
    starts = np.zeros((1 << bits) + 1, np.int64)
    shift = np.uint64(64 - bits)
    for i in range(m):
        starts[(np.int64(a[i] >> shift) if bits else 0) + 1] += 1
    for j in range(1 << bits):
        starts[j + 1] += starts[j]
    sa = np.empty(m, np.uint64)
    sb = np.empty(m, np.uint64)
    sw = np.empty(m, np.uint64)
    si = np.empty(m, np.int64)
    fill = starts[:-1].copy()
    for i in range(m):
        j = np.int64(a[i] >> shift) if bits else 0
        p = fill[j]
        sa[p], sb[p], sw[p], si[p] = a[i], b[i], who[i], i
        fill[j] = p + 1
    largest = 0
    for j in range(1 << bits):
        largest = max(largest, starts[j + 1] - starts[j])
    size = _slots(largest)
    inline = k <= INLINE
    # a slot: the term's lanes, individuals so far (0: empty), first row, the individuals
    lane_a = np.empty(size, np.uint64)
    lane_b = np.empty(size, np.uint64)
    count = np.zeros(size, np.int64)
    row = np.empty(size, np.int64)
    ind = np.empty((size, k if inline else 1), np.uint64)
    pairs = np.empty((size if not inline else 1, 2), np.uint64)  # slot + 1 (0: empty), individual
    keep = np.zeros(m, np.bool_)
    first = np.empty(0 if sending else m, np.int64)
    users = np.empty(0 if sending else m, np.int64)
    terms = 0
    for j in range(1 << bits):
        lo, hi = starts[j], starts[j + 1]
        mask = _slots(hi - lo) - 1
        count[:mask + 1] = 0
        if not inline:
            pairs[:mask + 1, 0] = 0
        for r in range(lo, hi):
            x, y, z = sa[r], sb[r], sw[r]
            t = np.int64(x & np.uint64(mask))
            while count[t] != 0 and (lane_a[t] != x or lane_b[t] != y):
                t = (t + 1) & mask
            seen = count[t]
            if seen == 0:
                lane_a[t], lane_b[t], row[t] = x, y, si[r]
            elif seen >= k:
                continue
            if inline:
                new = True
                for q in range(seen):
                    if ind[t, q] == z:
                        new = False
                        break
                if not new:
                    continue
                ind[t, seen] = z
            else:
                p = np.int64(_fmix(np.uint64(t) * np.uint64(0xD6E8FEB86659FD93) ^ z) & np.uint64(mask))
                while pairs[p, 0] != 0 and (pairs[p, 0] != np.uint64(t + 1) or pairs[p, 1] != z):
                    p = (p + 1) & mask
                if pairs[p, 0] != 0:
                    continue
                pairs[p, 0], pairs[p, 1] = np.uint64(t + 1), z
            count[t] = seen + 1
            keep[si[r]] = True
        if not sending:
            for t in range(mask + 1):
                if count[t] != 0:
                    first[terms] = row[t]
                    users[terms] = count[t]
                    terms += 1
    return keep, first[:terms], users[:terms]


def capped_pairs(a: np.ndarray, b: np.ndarray, who: np.ndarray, k: int) -> np.ndarray:
    """Which term occurrences (lanes ``a``/``b``, individual digest ``who``) a batch
    must send: each (term, individual) pair once, and for each term only until ``k``
    distinct individuals are sent (a term ``k`` individuals use in one batch is common,
    whatever the rest say). Exact: keyed on the whole lanes."""
    return _count(a, b, who, k, True)[0]


def distinct_users(a: np.ndarray, b: np.ndarray, who: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct term of the rows (lanes ``a``/``b``, individual ``who``): its first
    row and how many distinct individuals use it, counted to ``k`` (enough to tell a
    common term from an identifier). Exact: keyed on the whole lanes."""
    _, first, users = _count(a, b, who, k, False)
    return first, users


@numba.njit(cache=True, nogil=True)
def set_build(a, b):
    """An open-addressing set of the terms with lanes ``a``/``b``: (lanes, used flags)."""
    size = _slots(len(a))
    mask = size - 1
    lanes = np.empty((size, 2), np.uint64)
    used = np.zeros(size, np.bool_)
    for i in range(len(a)):
        x, y = a[i], b[i]
        t = np.int64(x & np.uint64(mask))
        while used[t] and (lanes[t, 0] != x or lanes[t, 1] != y):
            t = (t + 1) & mask
        used[t] = True
        lanes[t, 0], lanes[t, 1] = x, y
    return lanes, used


@numba.njit(cache=True, nogil=True)
def set_contains(lanes, used, a, b):
    """Which of the terms ``a``/``b`` the set (``set_build``) holds."""
    mask = len(used) - 1
    out = np.zeros(len(a), np.bool_)
    for i in range(len(a)):
        x, y = a[i], b[i]
        t = np.int64(x & np.uint64(mask))
        while used[t]:
            if lanes[t, 0] == x and lanes[t, 1] == y:
                out[i] = True
                break
            t = (t + 1) & mask
    return out
