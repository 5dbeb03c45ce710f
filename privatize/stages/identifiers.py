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
  16-byte term digests (two polynomial hashes of each word's normalised code points,
  combined word by word, in the compiled kernels of :mod:`privatize.text.termscan`), a
  64-bit digest of ``individual_id`` and the term's length. No row identity travels: the
  keyed rows are a fraction of the occurrences;
* ``decide``: per hash partition, the distinct individuals per term (exact: the keys are
  hash-partitioned, so all of one term's rows meet in one partition, and only that
  partition is in memory; counted with hash tables keyed on the whole digest); its decisions are the *common* terms (at least ``k``
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

import functools
import hashlib
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from privatize.ciphers.tokens import reserved_spans
from privatize.errors import RecordError
from privatize.policy import ModelName
from privatize.settings import Before, StageSettings
from privatize.stage import QUARANTINE, GlobalStage, register_stage, set_column
from privatize.text.words import INNER, WORD_CHAR, char_classes, code_points

NO_TEXT = "no text to search for identifiers"
NO_INDIVIDUAL = "no individual_id"
MAX_N = 5
WHO = "_who"
SPAN_TYPE = pa.struct([("start", pa.int32()), ("end", pa.int32()), ("kind", pa.string()), ("term", pa.string())])
SPANS_TYPE = pa.list_(SPAN_TYPE)
KEY_TYPE = pa.binary(16)

_LONG = 32
"""Words longer than this take a BLAKE2b digest instead of the polynomial lanes (which
are made for the chance collisions of natural text; long crafted strings, Thue-Morse's,
are where polynomial hashes modulo 2**64 are known to collide)."""
SLICE_BYTES = 4 << 20
"""Text bytes a scan takes at once (see :func:`_slices`)."""
_MAY_RESERVE = r"<[A-Z]|_\["
"""Where a reserved token may be (a tag, an entity token): ``reserved_spans`` looks at
those texts only."""
_END = 8
"""A character class bit beside ``mask``'s: a sentence end (``.``, ``!``, ``?``, ``…``,
a line break), where terms stop."""


@functools.cache
def _normal_table(case: str, digits: str) -> np.ndarray:
    """Code point -> code point as terms compare them: lower case where it is one letter
    (``case: fold``; a letter whose lower case is longer, İ, stays), digits 1-9 to 0
    (``digits: zero``)."""
    table = np.arange(0x110000, dtype=np.uint32)
    if case == "fold":
        low = [(c, ord(lc)) for c in range(0x110000) if (lc := chr(c).lower()) != chr(c) and len(lc) == 1]
        at, to = np.array(low, np.int64).T
        table[at] = to
    if digits == "zero":
        table[ord("1"):ord("9") + 1] = ord("0")
    return table


@functools.cache
def _classes() -> np.ndarray:
    """``mask``'s character classes, with the sentence ends."""
    table = char_classes().copy()
    for c in ".!?\u2026\n\r":
        table[ord(c)] |= _END
    return table


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
    model: Annotated[str | None, ModelName()] = None
    """``direct: detect``: the redaction detector's spaCy model (default: redact's); as redact's
    ``model`` (through the service: a name or ``detector:<id>``)."""
    entities: list[str] | None = None
    score_threshold: float | None = Field(None, ge=0.0, le=1.0)
    profile: Literal["balanced", "high_recall"] = "balanced"

    @model_validator(mode="after")
    def _check(self) -> "IdentifiersSettings":
        if self.direct == "none" and (self.model or self.entities or self.score_threshold is not None):
            raise ValueError("model, entities and score_threshold are settings of direct: detect")
        return self


class _Terms:
    """The words and terms of a batch of texts (None: no text), scanned at once by the
    compiled kernels of :mod:`privatize.text.termscan`.

    The batch is one array of code points (texts joined by line breaks). A word is a
    maximal run of word characters and of apostrophes and hyphens between two word
    characters: ``WORD``'s words (``mask``'s), found without a Python object per word.
    Reserved tokens (``reserved_spans``: ``<MASK>``, tags, entity tokens) are neither
    words nor parts of one, and stop terms as sentence ends do. A word's identity is its
    normalised code points' digest (``case``, ``digits``; BLAKE2b for a word over
    ``_LONG`` characters); a term's digest combines its words' word by word.

    Word arrays (one entry per word, in order): ``row``, ``start``/``end`` (offsets in the
    word's text), ``seg`` (runs of words no term crosses). Occurrence arrays (one per term
    occurrence, by length, then position): ``orow``, ``ofirst`` (its first word), ``on``
    (words), ``oa``/``ob`` (the digest's lanes)."""

    def __init__(self, texts, settings: IdentifiersSettings):
        st = settings
        arr = texts if isinstance(texts, (pa.Array, pa.ChunkedArray)) else pa.array(texts, pa.string())
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        arr = pc.fill_null(arr.cast(pa.string()), "")
        # the batch as one buffer, each text followed by a line break (a sentence end)
        ended = pc.binary_join_element_wise(arr, "", "\n")
        offsets = np.frombuffer(ended.buffers()[1], np.int32, len(ended) + 1, ended.offset * 4).astype(np.int64)
        data = memoryview(ended.buffers()[2])[offsets[0]:offsets[-1]] if len(ended) else b""
        if pc.all(pc.string_is_ascii(arr)).as_py() is not False:  # bytes are code points
            cps = np.frombuffer(data, np.uint8)
            bounds = offsets - offsets[0]
        else:
            cps = code_points(bytes(data).decode("utf-8", "surrogatepass"))
            bounds = np.zeros(len(arr) + 1, np.int64)
            np.cumsum(pc.utf8_length(arr).to_numpy(zero_copy_only=False) + 1, out=bounds[1:])
        may = pc.match_substring_regex(arr, _MAY_RESERVE).to_numpy(zero_copy_only=False) if len(arr) else []
        reserved = [(bounds[i] + s, bounds[i] + e) for i in np.flatnonzero(may).tolist()
                    for s, e in reserved_spans(arr[i].as_py())]
        if reserved:  # a reserved token reads as line breaks: no word, and terms stop there
            cps = cps.copy()
            for s, e in reserved:
                cps[s:e] = 10
        self._cps, self._normal = cps, _normal_table(st.case, st.digits)
        self._norm: str | None = None
        from privatize.text import termscan  # numba: imported where the stage runs, not where it registers

        starts, ends, a1, a2, self.seg = termscan.scan_words(cps, _classes(), self._normal, WORD_CHAR, INNER, _END)
        long = np.flatnonzero(ends - starts > _LONG)
        if len(long):
            lanes = np.frombuffer(b"".join(hashlib.blake2b(self._normal[cps[s:e]].astype("<u4").tobytes(),
                                                           digest_size=16).digest()
                                           for s, e in zip(starts[long].tolist(), ends[long].tolist())),
                                  "<u8").reshape(-1, 2)
            a1[long], a2[long] = lanes[:, 0], lanes[:, 1]
        self.row = np.searchsorted(bounds, starts, side="right") - 1
        self._cut = (starts, ends)
        self.start, self.end = starts - bounds[self.row], ends - bounds[self.row]
        self.ofirst, self.on, self.oa, self.ob = termscan.term_occurrences(a1, a2, self.seg, st.max_n)
        self.orow = self.row[self.ofirst]

    def normalised(self) -> str:
        """The batch string as terms compare it (``case``, ``digits``, letter by letter;
        offsets kept)."""
        if self._norm is None:
            self._norm = self._normal[self._cps].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")
        return self._norm

    def words(self) -> pa.Array:
        """Every word as terms write it (normalised), cut from one UTF-8 buffer."""
        starts, ends = self._cut
        if not len(starts):
            return pa.array([], pa.string())
        norm = self.normalised()
        data = norm.encode("utf-8", "surrogatepass")
        if len(data) != len(norm):  # byte offsets of the code points
            cps = code_points(norm)
            width = 1 + (cps >= 0x80).astype(np.int64) + (cps >= 0x800) + (cps >= 0x10000)
            at = np.zeros(len(cps) + 1, np.int64)
            np.cumsum(width, out=at[1:])
            starts, ends = at[starts], at[ends]
        cuts = np.empty(2 * len(starts), np.int32)
        cuts[0::2], cuts[1::2] = starts, ends
        pieces = pa.StringArray.from_buffers(len(cuts) - 1, pa.py_buffer(cuts.tobytes()), pa.py_buffer(data))
        return pieces.take(pa.array(np.arange(0, len(cuts) - 1, 2)))

    def term_texts(self, first: np.ndarray, n: np.ndarray) -> pa.Array:
        """The normalised words of occurrences (their first word and length), joined by
        spaces."""
        words = self.words()
        parts = []
        for j in range(int(n.max()) if len(n) else 0):
            parts.append(words.take(pa.array(np.where(j < n, first + j, 0), mask=j >= n)))
        if not parts:
            return pa.array([], pa.string())
        return pc.binary_join_element_wise(*parts, " ", null_handling="skip")


def sentences(text: str, st: IdentifiersSettings) -> list[list[str]]:
    """The normalised words of ``text``, in runs no term crosses (sentence ends and
    reserved tokens split them)."""
    scan = _Terms([text], st.model_copy(update={"max_n": 1}))
    out: list[list[str]] = []
    last = None
    for w, seg in zip(scan.words().to_pylist(), scan.seg.tolist()):
        if seg != last:
            out.append([])
            last = seg
        out[-1].append(w)
    return out


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
        pieces = _slices(batch)
        if len(pieces) > 1:
            return pa.concat_tables([self.keys(p) for p in pieces])
        who = batch["individual_id"] if "individual_id" in batch.column_names else pa.nulls(batch.num_rows, pa.string())
        who = pc.cast(who, pa.string())
        if isinstance(who, pa.ChunkedArray):
            who = who.combine_chunks()
        missing = pc.or_(pc.is_null(who), pc.equal(pc.fill_null(who, ""), "")).to_numpy(zero_copy_only=False)
        if missing.any() and self.settings.on_missing == "error":
            doc = batch["doc_id"][int(np.flatnonzero(missing)[0])].as_py()
            raise RecordError(f"identifiers: record {doc!r} has no individual_id (the identifiers stage counts "
                              "individuals per term; give every record one, or set on_missing: quarantine)")
        text = batch["text"]
        terms = _Terms(pc.if_else(pa.array(missing), pa.scalar(None, pa.string()), text.cast(pa.string())),
                       self.settings)
        enc = pc.dictionary_encode(who)
        per = _hash64(enc.dictionary.to_pylist())
        idx = pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False)
        who64 = per[idx] if len(per) else np.zeros(batch.num_rows, np.uint64)
        w = who64[terms.orow]
        from privatize.text import termscan

        keep = termscan.capped_pairs(terms.oa, terms.ob, w, self.settings.k)
        return pa.table({"key": _key_array(terms.oa[keep], terms.ob[keep]), WHO: pa.array(w[keep], pa.uint64()),
                         "n": pa.array(terms.on[keep], pa.int8())})

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
        # per distinct term, its distinct individuals (counted to k)
        from privatize.text import termscan

        starts, users = termscan.distinct_users(a, b, w, st.k)
        common = users >= st.k
        tn = n[starts]
        for length in range(1, st.max_n + 1):
            at = tn == length
            stats[f"terms_n{length}"] = int(at.sum())
            stats[f"identifiers_n{length}"] = int((at & ~common).sum())
        keep = starts[common]
        keep = keep[np.lexsort((b[keep], a[keep]))]
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
        pieces = _slices(batch)
        if len(pieces) > 1:
            return pa.concat_tables([self.apply(p, decisions) for p in pieces])
        st = self.settings
        n_rows = batch.num_rows
        texts = batch["text"].to_pylist()
        who = batch["individual_id"].to_pylist() if "individual_id" in batch.column_names else [None] * n_rows
        reasons = [NO_TEXT if not isinstance(t, str) else NO_INDIVIDUAL if who_ in (None, "") else None
                   for t, who_ in zip(texts, who)]
        live = np.array([r is None for r in reasons], dtype=bool)
        terms = _Terms([t if ok else None for t, ok in zip(texts, live)], st)
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


def _slices(batch: pa.Table) -> list[pa.Table]:
    """``batch`` in slices of about ``SLICE_BYTES`` of text (whole rows): the scan's
    arrays take some 40 bytes per character, and Ray Data hands a stage blocks of up to
    128 MiB, so a whole block at once would take gigabytes, more for larger input files."""
    if batch.num_rows < 2 or "text" not in batch.column_names:
        return [batch]
    size = pc.fill_null(pc.binary_length(batch["text"].cast(pa.string())), 0).to_numpy(zero_copy_only=False)
    ends = np.cumsum(size)
    if ends[-1] <= SLICE_BYTES:
        return [batch]
    cuts = np.unique(np.searchsorted(ends, np.arange(SLICE_BYTES, int(ends[-1]), SLICE_BYTES), side="left") + 1)
    cuts = [0, *[int(c) for c in cuts if 0 < c < batch.num_rows], batch.num_rows]
    return [batch.slice(a, b - a) for a, b in zip(cuts, cuts[1:])]


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
    """A set of 16-byte term digests, for looking up many at once (a hash table keyed on
    both lanes, in :mod:`privatize.text.termscan`)."""

    def __init__(self, keys):
        from privatize.text import termscan

        a, b = _lanes(keys) if keys is not None and len(keys) else (np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        self._table = termscan.set_build(a, b)

    def contains(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        from privatize.text import termscan

        return termscan.set_contains(*self._table, a, b)


def compile_kernels() -> None:
    """Compile (and cache on disk) every kernel the stage runs, for each code-point width:
    an image built with this warm starts its workers without compiling."""
    st = IdentifiersSettings(direct="none", max_n=2)
    stage = Identifiers(st)
    for text in ("an ASCII text", "a text in the BMP: café", "one beyond it: 😂"):
        batch = pa.table({"doc_id": ["a", "b"], "individual_id": ["p", "q"], "text": [text, text]})
        keyed = stage.keys(batch)
        decisions, _ = stage.decide(keyed)
        stage.apply(batch, decisions)
