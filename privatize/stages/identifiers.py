"""``identifiers``: the direct and indirect identifiers of every record (paper 003,
SEEDS.md section 5), as character spans for a privacy-preserving training that keeps
them in the context but never makes them prediction targets (``data.ignore_spans``).

**Indirect identifiers** come from the bipartite graph individual <-> term: a term is a
word or a run of ``max_n`` (3) or fewer consecutive words, normalised as ``case`` and
``digits`` say; a term that fewer than ``k`` (2) distinct individuals use is an indirect
identifier, wherever it occurs. Terms never cross a sentence end (``.``, ``!``, ``?``,
``…``, a line break) or a reserved token (``<MASK>``, a tag, an entity token), and a
reserved token is no term. A word is what ``mask`` calls one: letters and digits with
inner apostrophes and hyphens.

**Direct identifiers** (``direct: detect``, the default) are the spans the redaction
detector finds (the ``redact`` stage's policy pi, with its ``model``, ``entities``,
``score_threshold`` and ``profile``); ``direct: none`` skips the detector.

A broadcast :class:`~privatize.stage.GlobalStage` (``broadcast``): it decides a set of
terms, not rows.

* ``keys``: a batch's (term, individual) pairs, each once, at most ``k`` individuals per
  term (a term ``k`` individuals use in one batch is common whatever the rest say):
  16-byte term digests (BLAKE2b of each distinct word, then combined word by word, in
  numpy), a 64-bit digest of ``individual_id`` and the term's length. No row identity
  travels: the keyed rows are a fraction of the occurrences;
* ``decide``: per hash partition, the distinct individuals per term (exact: the keys are
  hash-partitioned, so all of one term's rows meet in one partition, and only that
  partition is in memory); its decisions are the *common* terms (at least ``k``
  individuals), far fewer than the identifiers in a Zipfian corpus, and its statistics
  the distinct terms and identifiers per length;
* ``apply``: the record's terms again; an occurrence whose term is not common is an
  identifier, written as a span.

The result depends on neither batch size nor worker count.

Column added: ``identifier_spans``, ``list<struct<start, end, kind, term>>`` (character
offsets into the text as this stage saw it; ``kind`` is ``direct`` or ``indirect``;
``term`` is the normalised term, or the detected text), sorted by start then end;
overlapping terms are each listed. Training uses it as ``data.ignore_spans:
identifier_spans`` (PPCLM: those tokens are never targets; PPMLM: never masks).

Statistics: ``terms_n<n>`` and ``identifiers_n<n>`` (distinct terms of n words, and how
many are identifiers: ``identifiers_n1 / terms_n1`` is paper 003's Figure 6 share,
60% of distinct words in its corpus), ``words`` and ``identifier_words`` (word
occurrences, and those that are one-word identifiers: under 3% in the paper),
``indirect_spans``, ``direct_spans``.

A record without an ``individual_id`` stops the run with a clear error
(``on_missing: error``, the default) or is quarantined (``on_missing: quarantine``); a
record with no text is quarantined.
"""

from __future__ import annotations

import hashlib
import re
from itertools import chain
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from privatize.errors import RecordError
from privatize.settings import Before, StageSettings
from privatize.stage import QUARANTINE, GlobalStage, register_stage, set_column
from privatize.stages.mask import WORD

NO_TEXT = "no text to search for identifiers"
NO_INDIVIDUAL = "no individual_id"
MAX_N = 5
WHO = "_who"
SPAN_TYPE = pa.struct([("start", pa.int32()), ("end", pa.int32()), ("kind", pa.string()), ("term", pa.string())])
SPANS_TYPE = pa.list_(SPAN_TYPE)
KEY_TYPE = pa.binary(16)

# a reserved token (privatize.ciphers.tokens.RESERVED_RE without its groups, so that
# findall returns whole matches), a word, or a sentence end: one scan finds all three
_RESERVED = r"(?<![A-Za-z0-9])[A-Z][A-Za-z0-9]*_\[[A-Za-z0-9+/_-]+={0,2}\]|<[A-Z][A-Z0-9_]*>"
_END = "[.!?\u2026\\n\\r]"
TOKEN = re.compile(f"{_RESERVED}|{WORD.pattern}|{_END}")
_TOKEN_PLAIN = re.compile(f"{WORD.pattern}|{_END}")
"""TOKEN for a text without ``<`` or ``_[`` (no reserved token can match): twice as fast."""


def tokens(text: str) -> list[str]:
    """The words, sentence ends and reserved tokens of ``text``, in order."""
    return (TOKEN if "<" in text or "_[" in text else _TOKEN_PLAIN).findall(text)


def _starts(text: str, toks: list[str]):
    """Where each of ``text``'s tokens (in order, as :func:`tokens` found them) starts."""
    pos, find = 0, text.find
    for tok in toks:
        pos = find(tok, pos)
        yield pos
        pos += len(tok)


def _is_word(tok: str) -> bool:
    """Whether a token of :func:`tokens` is a word (not a sentence end or reserved token)."""
    return tok[0] not in ".!?\u2026\n\r<" and "_[" not in tok
_DIGITS = str.maketrans({c: "0" for c in "123456789"})
_M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)


class IdentifiersSettings(StageSettings):
    kind: Literal["identifiers"] = "identifiers"
    order_rules = (Before("encrypt_text", "identifiers after encrypt_text sees only ciphertext; put it before the "
                                          "cipher"),)
    k: int = Field(2, ge=1, le=1_000_000)
    """A term fewer than ``k`` distinct individuals use is an indirect identifier."""
    max_n: int = Field(3, ge=1, le=MAX_N)
    """Terms are runs of 1 to ``max_n`` words."""
    case: Literal["fold", "keep"] = "fold"
    """``fold``: terms compare in lower case."""
    digits: Literal["keep", "zero"] = "keep"
    """``zero``: every digit compares as 0 (phone numbers and dates of one shape are one term)."""
    direct: Literal["detect", "none"] = "detect"
    on_missing: Literal["error", "quarantine"] = "error"
    """A record without ``individual_id``: stop the run, or quarantine the record."""
    model: str | None = None
    """``direct: detect``: the redaction detector's spaCy model (default: redact's)."""
    entities: list[str] | None = None
    score_threshold: float | None = Field(None, ge=0.0, le=1.0)
    profile: Literal["balanced", "high_recall"] = "balanced"

    @model_validator(mode="after")
    def _check(self) -> "IdentifiersSettings":
        if self.direct == "none" and (self.model or self.entities or self.score_threshold is not None):
            raise ValueError("model, entities and score_threshold are settings of direct: detect")
        return self


def _mix(a: np.ndarray, b: np.ndarray, m: np.uint64) -> np.ndarray:
    """A term's digest lane extended by one word's (order matters; uint64 wraps)."""
    x = (a * m) ^ (b + np.uint64(0x632BE59BD9B4E019) + (a << np.uint64(6)) + (a >> np.uint64(2)))
    x ^= x >> np.uint64(31)
    x *= np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(29))


class _Terms:
    """The terms of a batch of texts. Token arrays (one entry per token, rows in order):
    ``row``, ``tid`` (its distinct token), ``start``/``end`` (only with offsets).
    Occurrence arrays (one per term occurrence, by length, then position): ``orow``,
    ``ofirst`` (its first token), ``on`` (words), ``oa``/``ob`` (the digest's lanes)."""

    def __init__(self, texts: list, settings: IdentifiersSettings, offsets: bool = False):
        n_rows = len(texts)
        toks = [tokens(t) if isinstance(t, str) else [] for t in texts]
        lengths = np.fromiter((len(x) for x in toks), dtype=np.int64, count=n_rows)
        if offsets:  # each token found again from the end of the one before (cheaper than match spans)
            total = int(lengths.sum())
            self.start = np.fromiter(chain.from_iterable(_starts(t, x) for t, x in zip(texts, toks)), np.int64, total)
            self.end = self.start + np.fromiter(map(len, chain.from_iterable(toks)), np.int64, total)
        self.row = np.repeat(np.arange(n_rows, dtype=np.int64), lengths)
        flat = pa.array(list(chain.from_iterable(toks)), pa.string())
        enc = pc.dictionary_encode(flat)
        self.tid = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64) if len(flat) else np.zeros(0, np.int64)
        self.norm, h1, h2, is_word = self._entries(enc.dictionary.to_pylist(), settings)
        word = is_word[self.tid]
        a1, a2 = h1[self.tid], h2[self.tid]
        rows, firsts, ns, las, lbs = [], [], [], [], []
        valid, g1, g2 = word, a1, a2
        starts = np.arange(len(word), dtype=np.int64)
        for n in range(1, settings.max_n + 1):
            if n > 1:
                m = len(word) - n + 1
                if m <= 0:
                    break
                valid = valid[:m] & word[n - 1:] & (self.row[:m] == self.row[n - 1:])
                g1, g2 = _mix(g1[:m], a1[n - 1:], _M1), _mix(g2[:m], a2[n - 1:], _M2)
            at = np.flatnonzero(valid)
            rows.append(self.row[at])
            firsts.append(starts[at])
            ns.append(np.full(len(at), n, np.int8))
            las.append(g1[at])
            lbs.append(g2[at])
        self.orow, self.ofirst, self.on, self.oa, self.ob = (np.concatenate(x) for x in (rows, firsts, ns, las, lbs))

    @staticmethod
    def _entries(tokens: list[str], st: IdentifiersSettings):
        """Per distinct token: its normalised form, digest lanes, whether it is a word."""
        h1 = np.zeros(len(tokens), np.uint64)
        h2 = np.zeros(len(tokens), np.uint64)
        norm = [normalize(t, st) for t in tokens]
        is_word = np.fromiter(map(_is_word, tokens), bool, len(tokens))  # not a sentence end or reserved token
        blake = hashlib.blake2b
        digests = b"".join([blake(w.encode("utf-8"), digest_size=16).digest()
                            for w, ok in zip(norm, is_word.tolist()) if ok])
        lanes = np.frombuffer(digests, "<u8").reshape(-1, 2)
        h1[is_word], h2[is_word] = lanes[:, 0], lanes[:, 1]
        return norm, h1, h2, is_word

    def term_texts(self, first: np.ndarray, n: np.ndarray) -> pa.Array:
        """The normalised words of occurrences (their first token and length), joined by
        spaces."""
        norm = pa.array(self.norm, pa.string())
        parts = []
        for j in range(int(n.max()) if len(n) else 0):
            at = np.where(j < n, first + j, 0)
            parts.append(norm.take(pa.array(self.tid[at], mask=j >= n)))
        if not parts:
            return pa.array([], pa.string())
        return pc.binary_join_element_wise(*parts, " ", null_handling="skip")


def normalize(word: str, st: IdentifiersSettings) -> str:
    """A word as terms compare it (``case``, ``digits``)."""
    if st.case == "fold":
        word = word.lower()
    if st.digits == "zero":
        word = word.translate(_DIGITS)
    return word


def sentences(text: str, st: IdentifiersSettings) -> list[list[str]]:
    """The normalised words of ``text``, in runs no term crosses (sentence ends and
    reserved tokens split them)."""
    out: list[list[str]] = [[]]
    for tok in tokens(text):
        if _is_word(tok):
            out[-1].append(normalize(tok, st))
        elif out[-1]:
            out.append([])
    return [s for s in out if s]


def term_strings(text: str, st: IdentifiersSettings, max_n: int | None = None) -> set[str]:
    """Every term of ``text`` (runs of 1 to ``max_n`` words, default the setting's),
    written as the stage writes ``term``: for finding identifiers in other text, such as
    a model's generations."""
    n_max = max_n or st.max_n
    return {" ".join(s[i:i + n]) for s in sentences(text, st) for i in range(len(s))
            for n in range(1, min(n_max, len(s) - i) + 1)}


def _hash64(values: list) -> np.ndarray:
    """A 64-bit digest per distinct value (BLAKE2b), so any id compares as bytes."""
    return np.array([int.from_bytes(hashlib.blake2b(str(v).encode("utf-8"), digest_size=8).digest(), "little")
                     for v in values], dtype=np.uint64)


@register_stage("identifiers", IdentifiersSettings)
class Identifiers(GlobalStage):
    broadcast = True
    _detector = None

    def __init__(self, settings: IdentifiersSettings, **kw):
        super().__init__(settings, **kw)
        # the detector loads spaCy: apply runs in an actor pool on Ray, loading it once
        # per actor on its first batch (keys and decide never need it)
        self.heavy_setup = settings.direct == "detect"

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_detector", None)
        state.pop("_common", None)
        return state

    # ---- keys ----------------------------------------------------------------------

    def keys(self, batch: pa.Table) -> pa.Table:
        who = batch["individual_id"] if "individual_id" in batch.column_names else pa.nulls(batch.num_rows, pa.string())
        who = pc.cast(who, pa.string())
        if isinstance(who, pa.ChunkedArray):
            who = who.combine_chunks()
        missing = pc.or_(pc.is_null(who), pc.equal(pc.fill_null(who, ""), "")).to_numpy(zero_copy_only=False)
        if missing.any() and self.settings.on_missing == "error":
            doc = batch["doc_id"][int(np.flatnonzero(missing)[0])].as_py()
            raise RecordError(f"identifiers: record {doc!r} has no individual_id (the identifiers stage counts "
                              "individuals per term; give every record one, or set on_missing: quarantine)")
        texts = batch["text"].to_pylist()
        skip = missing | np.array([not isinstance(t, str) for t in texts], dtype=bool)
        terms = _Terms([None if s else t for t, s in zip(texts, skip)], self.settings)
        enc = pc.dictionary_encode(who)
        per = _hash64(enc.dictionary.to_pylist())
        idx = pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False)
        who64 = per[idx] if len(per) else np.zeros(batch.num_rows, np.uint64)
        a, b, n, w = _pairs(terms.oa, terms.ob, terms.on, who64[terms.orow], self.settings.k)
        return pa.table({"key": _key_array(a, b), WHO: pa.array(w, pa.uint64()), "n": pa.array(n, pa.int8())})

    # ---- decide --------------------------------------------------------------------

    def decide(self, partition: pa.Table) -> tuple[pa.Table, dict]:
        """The terms of this partition that at least ``k`` distinct individuals use
        (sorted), and the distinct terms and identifiers per length."""
        st = self.settings
        stats = {f"{what}_n{n}": 0 for n in range(1, st.max_n + 1) for what in ("terms", "identifiers")}
        if partition.num_rows == 0:
            return pa.table({"key": pa.array([], KEY_TYPE)}), stats
        a, b = _lanes(partition["key"])
        w = partition[WHO].to_numpy()
        n = partition["n"].to_numpy()
        # distinct (term, individual) pairs, then per term (a run of equal lanes) their count
        order = np.lexsort((w, b, a))
        a, b, w, n = a[order], b[order], w[order], n[order]
        new_pair = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1]) | (w[1:] != w[:-1])]
        a, b, n = a[new_pair], b[new_pair], n[new_pair]
        starts = np.flatnonzero(np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])])
        users = np.diff(np.r_[starts, len(a)])
        common = users >= st.k
        tn = n[starts]
        for length in range(1, st.max_n + 1):
            at = tn == length
            stats[f"terms_n{length}"] = int(at.sum())
            stats[f"identifiers_n{length}"] = int((at & ~common).sum())
        keep = starts[common]
        return pa.table({"key": _key_array(a[keep], b[keep])}), stats

    # ---- apply ---------------------------------------------------------------------

    def _detect(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        if self._detector is None:
            from privatize.stages.redact import detector_like

            self._detector = detector_like(self.settings)
        return [[(sp["start"], sp["end"]) for sp in det.spans] for det in self._detector.detect(texts)]

    def _common_terms(self, decisions: pa.Table) -> "_TermSet":
        """The decisions as a lookup, built once per decisions table (every batch of a
        run gets the same one)."""
        cached = getattr(self, "_common", None)
        if cached is None or cached[0] is not decisions:
            self._common = (decisions, _TermSet(decisions["key"] if "key" in decisions.column_names else None))
        return self._common[1]

    def apply(self, batch: pa.Table, decisions: pa.Table) -> pa.Table:
        st = self.settings
        n_rows = batch.num_rows
        texts = batch["text"].to_pylist()
        who = batch["individual_id"].to_pylist() if "individual_id" in batch.column_names else [None] * n_rows
        reasons = [NO_TEXT if not isinstance(t, str) else NO_INDIVIDUAL if who_ in (None, "") else None
                   for t, who_ in zip(texts, who)]
        live = np.array([r is None for r in reasons], dtype=bool)
        terms = _Terms([t if ok else None for t, ok in zip(texts, live)], st, offsets=True)
        # an occurrence is an identifier when its term is not among the common ones
        is_ident = ~self._common_terms(decisions).contains(terms.oa, terms.ob)
        occ = np.flatnonzero(is_ident)
        first, n = terms.ofirst[occ], terms.on[occ].astype(np.int64)
        rows = [terms.orow[occ]]
        starts, ends = [terms.start[first]], [terms.end[first + n - 1]]
        kinds = [np.ones(len(occ), np.int8)]  # 0 direct, 1 indirect (their sort order)
        words = [terms.term_texts(first, n)]
        stats: dict[str, np.ndarray] = {"indirect_spans": np.bincount(terms.orow[is_ident], minlength=n_rows)}
        word_occ = terms.on == 1
        stats["words"] = np.bincount(terms.orow[word_occ], minlength=n_rows)
        stats["identifier_words"] = np.bincount(terms.orow[word_occ & is_ident], minlength=n_rows)
        direct = np.zeros(n_rows, np.int64)
        if st.direct == "detect":
            live_rows = np.flatnonzero(live)
            found = self._detect([texts[i] for i in live_rows]) if len(live_rows) else []
            d_row = [int(i) for i, sp in zip(live_rows, found) for _ in sp]
            d_span = [se for sp in found for se in sp]
            direct[live_rows] = [len(sp) for sp in found]
            rows.append(np.array(d_row, np.int64))
            starts.append(np.array([a for a, _ in d_span], np.int64))
            ends.append(np.array([b for _, b in d_span], np.int64))
            kinds.append(np.zeros(len(d_row), np.int8))
            words.append(pa.array([texts[i][a:b] for i, (a, b) in zip(d_row, d_span)], pa.string()))
        stats["direct_spans"] = direct
        row, start, end, kind = (np.concatenate(x) for x in (rows, starts, ends, kinds))
        term = pa.concat_arrays([w.cast(pa.string()) for w in words])
        order = np.lexsort((kind, end, start, row))
        idx = pa.array(order)
        spans = pa.StructArray.from_arrays(
            [pa.array(start[order], pa.int32()), pa.array(end[order], pa.int32()),
             pa.array(["direct", "indirect"], pa.string()).take(pa.array(kind[order])), term.take(idx)],
            fields=list(SPAN_TYPE))
        offsets = np.r_[0, np.cumsum(np.bincount(row, minlength=n_rows))].astype(np.int32)
        column = pa.ListArray.from_arrays(pa.array(offsets), spans, type=SPANS_TYPE,
                                          mask=pa.array(~live) if not live.all() else None)
        batch = set_column(batch, "identifier_spans", column)
        if not live.all():
            batch = set_column(batch, QUARANTINE, pa.array(reasons, pa.string()))
        for name, values in stats.items():
            batch = set_column(batch, f"_stat.{name}", pa.array(np.asarray(values, np.int64)))
        return batch


def _pairs(a: np.ndarray, b: np.ndarray, n: np.ndarray, w: np.ndarray, k: int):
    """A batch's term occurrences (digest lanes ``a``/``b``, length ``n``, individual
    ``w``) as the keyed rows they need: each (term, individual) pair once, and at most
    ``k`` individuals per term (a term ``k`` individuals use in one batch is common
    whatever the rest say, so the others need not travel)."""
    if not len(a):
        return a, b, n, w
    # distinct pairs: by a 64-bit digest of (term, individual) (two pairs share one with
    # odds of about pairs^2 / 2^64 a batch; one individual less for a term, at worst)
    h = _mix(_mix(a, b, _M1), w, _M2)
    order = np.argsort(h)
    hs = h[order]
    pick = order[np.r_[True, hs[1:] != hs[:-1]]]
    a, b, n, w = a[pick], b[pick], n[pick], w[pick]
    # at most k per term: runs of equal lanes after a sort by the first lane (two terms
    # whose first lanes tie may interleave; each run then keeps k or all, still exact)
    order = np.argsort(a)
    a, b, n, w = a[order], b[order], n[order], w[order]
    new = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])]
    run_start = np.maximum.accumulate(np.where(new, np.arange(len(a)), 0))
    keep = np.arange(len(a)) - run_start < k
    return a[keep], b[keep], n[keep], w[keep]


def _key_array(a: np.ndarray, b: np.ndarray) -> pa.Array:
    """Digest lanes as 16-byte keys (little-endian ``a`` then ``b``)."""
    d = np.empty((len(a), 2), "<u8")
    d[:, 0], d[:, 1] = a, b
    return pa.FixedSizeBinaryArray.from_buffers(KEY_TYPE, len(d), [None, pa.py_buffer(d.tobytes())])


def _lanes(keys) -> tuple[np.ndarray, np.ndarray]:
    """16-byte keys as their two 64-bit lanes."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not pa.types.is_fixed_size_binary(keys.type):
        keys = keys.cast(KEY_TYPE)
    raw = np.frombuffer(keys.buffers()[1], np.uint8)[keys.offset * 16:(keys.offset + len(keys)) * 16]
    lanes = raw.view("<u8").reshape(-1, 2)
    return lanes[:, 0].astype(np.uint64), lanes[:, 1].astype(np.uint64)


class _TermSet:
    """A set of 16-byte term digests, for looking up many at once."""

    def __init__(self, keys):
        a, b = _lanes(keys) if keys is not None and len(keys) else (np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        order = np.argsort(a)
        self.a, self.b = a[order], b[order]
        tie = np.flatnonzero(self.a[1:] == self.a[:-1])
        # first lanes that tie (odds about n^2 / 2^65): those terms by both lanes
        self.tied = {(int(x), int(y)) for i in tie for x, y in ((self.a[i], self.b[i]), (self.a[i + 1], self.b[i + 1]))}

    def contains(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if not len(self.a) or not len(a):
            return np.zeros(len(a), bool)
        at = np.minimum(np.searchsorted(self.a, a), len(self.a) - 1)
        found = (self.a[at] == a) & (self.b[at] == b)
        if self.tied:
            tied_a = {x for x, _ in self.tied}
            for i in np.flatnonzero(~found):
                if int(a[i]) in tied_a:
                    found[i] = (int(a[i]), int(b[i])) in self.tied
        return found
