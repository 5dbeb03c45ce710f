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

A :class:`~privatize.stage.GlobalStage` with many keys per row (``multi_key``):

* ``keys``: each record's distinct terms, as 16-byte digests (BLAKE2b of each distinct
  word, then combined word by word, in numpy), with the record's individual (a 64-bit
  digest of ``individual_id``) travelling beside each;
* ``decide``: per hash partition, the distinct individuals per term (exact: the keys are
  hash-partitioned, so all of one term's rows meet in one partition, and only that
  partition is in memory). Decisions are sparse: the rows where a term is an identifier,
  and the first row (in the global order) of every term, which counts the distinct
  terms;
* ``apply``: the record's terms again, its identifier occurrences as spans.

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
from privatize.stage import DECISION_ROW, KEY_INDEX, QUARANTINE, GlobalStage, register_stage, set_column
from privatize.stages.dedup import first_numbered
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
    Occurrence arrays (one per term occurrence, row by row; within a row by length, then
    position, so the numbering depends on the row alone): ``orow``, ``ofirst`` (its first
    token), ``on`` (words), ``oa``/``ob`` (the digest's lanes). Per row: ``ostart`` (its
    first occurrence; an occurrence's number in its row, ``i - ostart[orow[i]]``, is its
    key index) and ``ocount``."""

    def __init__(self, texts: list, settings: IdentifiersSettings, offsets: bool = False):
        n_rows = len(texts)
        if offsets:
            spans = [[m.span() for m in (TOKEN if "<" in t or "_[" in t else _TOKEN_PLAIN).finditer(t)]
                     if isinstance(t, str) else [] for t in texts]
            toks = [[t[a:b] for a, b in sp] for t, sp in zip(texts, spans)]
            flat_spans = np.array(list(chain.from_iterable(spans)), dtype=np.int64).reshape(-1, 2)
            self.start, self.end = flat_spans[:, 0], flat_spans[:, 1]
        else:
            toks = [tokens(t) if isinstance(t, str) else [] for t in texts]
        lengths = np.fromiter((len(x) for x in toks), dtype=np.int64, count=n_rows)
        self.row = np.repeat(np.arange(n_rows, dtype=np.int64), lengths)
        flat = pa.array(list(chain.from_iterable(toks)), pa.string())
        enc = pc.dictionary_encode(flat)
        self.tid = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64) if len(flat) else np.zeros(0, np.int64)
        self.norm, h1, h2, is_word = self._entries(enc.dictionary.to_pylist(), settings)
        word = is_word[self.tid]
        a1, a2 = h1[self.tid], h2[self.tid]
        self.words = int(word.sum())
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
        # row by row (a stable sort merges the max_n runs, each already in row order):
        # each row's occurrences are its keys, numbered from 0 (the key index)
        cat = [np.concatenate(x) for x in (rows, firsts, ns, las, lbs)]
        order = np.argsort(cat[0], kind="stable")
        self.orow, self.ofirst, self.on, self.oa, self.ob = (x[order] for x in cat)
        self.ocount = np.bincount(self.orow, minlength=n_rows).astype(np.int64)
        self.ostart = np.cumsum(self.ocount) - self.ocount

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

    def keys(self, skip: np.ndarray) -> pa.Array:
        """Per row, its term occurrences' digests (``list<binary(16)>``); null where ``skip``."""
        d = np.empty((len(self.oa), 2), np.uint64)
        d[:, 0], d[:, 1] = self.oa, self.ob
        values = pa.FixedSizeBinaryArray.from_buffers(KEY_TYPE, len(d), [None, pa.py_buffer(d.astype("<u8").tobytes())])
        offsets = np.r_[self.ostart, len(self.oa)].astype(np.int32)
        mask = pa.array(skip) if skip.any() else None
        return pa.ListArray.from_arrays(pa.array(offsets), values, mask=mask)

    def term_text(self, first: int, n: int) -> str:
        """The normalised words of an occurrence, joined by spaces."""
        return " ".join(self.norm[t] for t in self.tid[first:first + n])


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
    multi_key = True
    keyed_doc_id = False  # decide counts individuals; a term occurrence's doc_id would only be carried
    _detector = None

    def __init__(self, settings: IdentifiersSettings, **kw):
        super().__init__(settings, **kw)
        # the detector loads spaCy: apply runs in an actor pool on Ray, loading it once
        # per actor on its first batch (keys and decide never need it)
        self.heavy_setup = settings.direct == "detect"

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_detector", None)
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
        return pa.table({"key": terms.keys(skip), WHO: pa.array(who64, pa.uint64())})

    # ---- decide --------------------------------------------------------------------

    def decide(self, partition: pa.Table) -> pa.Table:
        empty = pa.table({DECISION_ROW: pa.array([], pa.int64()), "term": pa.array([], pa.int32()),
                          "flag": pa.array([], pa.int8())})
        if partition.num_rows == 0:
            return empty
        key = partition["key"].combine_chunks()
        if not pa.types.is_fixed_size_binary(key.type):
            key = key.cast(KEY_TYPE)
        # the terms numbered in order of first appearance (the partition is in the global
        # order): a row holds a term's first occurrence when its number is above every one before
        number = pc.dictionary_encode(key).indices
        num = number.to_numpy(zero_copy_only=False).astype(np.int64)
        first = first_numbered(num)
        # distinct individuals per term (Arrow's hash aggregation)
        users = pa.table({"t": number, "w": partition[WHO].combine_chunks()}).group_by("t") \
            .aggregate([("w", "count_distinct")])
        count = np.zeros(int(num.max()) + 1, np.int64)
        count[users["t"].to_numpy()] = users["w_count_distinct"].to_numpy()
        ident = count[num] < self.settings.k
        rows = np.flatnonzero(ident | first)
        flag = (ident[rows].astype(np.int8) | (first[rows].astype(np.int8) << 1)).astype(np.int8)
        term = partition[KEY_INDEX].combine_chunks().to_numpy(zero_copy_only=False)[rows]
        return pa.table({DECISION_ROW: pa.array(rows, pa.int64()), "term": pa.array(term, pa.int32()),
                         "flag": pa.array(flag, pa.int8())})

    # ---- apply ---------------------------------------------------------------------

    def _detect(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        if self._detector is None:
            from privatize.stages.redact import detector_like

            self._detector = detector_like(self.settings)
        return [[(sp["start"], sp["end"]) for sp in det.spans] for det in self._detector.detect(texts)]

    def apply(self, batch: pa.Table, decisions: pa.Table) -> pa.Table:
        st = self.settings
        n_rows = batch.num_rows
        texts = batch["text"].to_pylist()
        who = batch["individual_id"].to_pylist() if "individual_id" in batch.column_names else [None] * n_rows
        reasons = [NO_TEXT if not isinstance(t, str) else NO_INDIVIDUAL if who_ in (None, "") else None
                   for t, who_ in zip(texts, who)]
        live = [r is None for r in reasons]
        terms = _Terms([t if ok else None for t, ok in zip(texts, live)], st, offsets=True)
        # decisions: (row, term index, flag) flattened
        term_lists = decisions["term"].combine_chunks()
        flag_lists = decisions["flag"].combine_chunks()
        lengths = pc.fill_null(pc.list_value_length(term_lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        d_row = np.repeat(np.arange(n_rows, dtype=np.int64), lengths)
        d_term = pc.list_flatten(term_lists).to_numpy(zero_copy_only=False).astype(np.int64)
        d_flag = pc.list_flatten(flag_lists).to_numpy(zero_copy_only=False).astype(np.int8)
        # each decision's occurrence: the row's first plus the key index
        if len(d_term) and ((d_term < 0) | (d_term >= terms.ocount[d_row])).any():
            raise RuntimeError("identifiers: a decision for a term its record does not have (keys and apply disagree)")
        d_occ = terms.ostart[d_row] + d_term
        d_n = terms.on[d_occ]
        stats: dict[str, np.ndarray] = {}
        first, ident = (d_flag & 2) > 0, (d_flag & 1) > 0
        for n in range(1, st.max_n + 1):
            stats[f"terms_n{n}"] = np.bincount(d_row[first & (d_n == n)], minlength=n_rows)
            stats[f"identifiers_n{n}"] = np.bincount(d_row[first & ident & (d_n == n)], minlength=n_rows)
        is_ident = np.zeros(len(terms.orow), bool)
        is_ident[d_occ[ident]] = True
        spans: list[list[dict]] = [[] for _ in range(n_rows)]
        for o in np.flatnonzero(is_ident):
            f, n = int(terms.ofirst[o]), int(terms.on[o])
            spans[int(terms.orow[o])].append({"start": int(terms.start[f]), "end": int(terms.end[f + n - 1]),
                                              "kind": "indirect", "term": terms.term_text(f, n)})
        stats["indirect_spans"] = np.bincount(terms.orow[is_ident], minlength=n_rows)
        word_occ = terms.on == 1
        stats["words"] = np.bincount(terms.orow[word_occ], minlength=n_rows)
        stats["identifier_words"] = np.bincount(terms.orow[word_occ & is_ident], minlength=n_rows)
        direct = np.zeros(n_rows, np.int64)
        if st.direct == "detect":
            live_rows = [i for i in range(n_rows) if live[i]]
            for i, found_spans in zip(live_rows, self._detect([texts[i] for i in live_rows]) if live_rows else []):
                for s, e in found_spans:
                    spans[i].append({"start": s, "end": e, "kind": "direct", "term": texts[i][s:e]})
                direct[i] = len(found_spans)
        stats["direct_spans"] = direct
        out = [sorted(sp, key=lambda x: (x["start"], x["end"], x["kind"])) if ok else None
               for sp, ok in zip(spans, live)]
        batch = set_column(batch, "identifier_spans", pa.array(out, SPANS_TYPE))
        if not all(live):
            batch = set_column(batch, QUARANTINE, pa.array(reasons, pa.string()))
        for name, values in stats.items():
            batch = set_column(batch, f"_stat.{name}", pa.array(np.asarray(values, np.int64)))
        return batch
