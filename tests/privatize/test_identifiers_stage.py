"""The ``identifiers`` stage (issue 22, paper 003): the bipartite graph individual <->
term against hand-computed answers at k = 1, 2 and 3, n-grams that stop at sentence ends
and masks, answers independent of batching, direct identifiers from the redaction
detector, and the errors for bad input."""

import json
import re

import pyarrow as pa
import pytest

from privatize import run
from privatize.ciphers.tokens import RESERVED_RE
from privatize.errors import RecordError, SpecError
from privatize.execution import run_global_stage
from privatize.spec import parse_spec
from privatize.stages.identifiers import Identifiers, IdentifiersSettings

# five individuals; A has two records (a repeat by the same person counts once)
FIVE = [("a1", "A", "Red fox runs. Blue sky"), ("b1", "B", "red fox sleeps"), ("c1", "C", "blue sky falls"),
        ("d1", "D", "Red car runs"), ("e1", "E", "green fox runs"), ("a2", "A", "Blue sky")]
# by hand: who uses each word and bigram (no bigram crosses "runs. Blue")
#   red A B D, fox A B E, runs A D E, blue A C, sky A C, sleeps B, falls C, car D, green E
#   red fox A B, fox runs A E, blue sky A C, fox sleeps B, sky falls C, red car D, car runs D, green fox E
WORDS_UNDER = {1: set(), 2: {"sleeps", "falls", "car", "green"},
               3: {"sleeps", "falls", "car", "green", "blue", "sky"}}
BIGRAMS_UNDER = {1: set(), 2: {"fox sleeps", "sky falls", "red car", "car runs", "green fox"},
                 3: {"fox sleeps", "sky falls", "red car", "car runs", "green fox", "red fox", "fox runs", "blue sky"}}


def _batch(docs, line0=0):
    return pa.table({"doc_id": [d[0] for d in docs], "individual_id": [d[1] for d in docs],
                     "text": [d[2] for d in docs], "_src": pa.array([0] * len(docs), pa.int64()),
                     "_line": pa.array(range(line0, line0 + len(docs)), pa.int64()),
                     "_seg": pa.array([0] * len(docs), pa.int64())})


def _run(docs, batch_rows=None, **settings):
    stage = Identifiers(IdentifiersSettings(direct="none", **settings))
    size = batch_rows or len(docs)
    batches = [_batch(docs[i:i + size], i) for i in range(0, len(docs), size)]
    decided: dict = {}  # the decision statistics (distinct terms and identifiers per length)
    out = pa.concat_tables(run_global_stage(stage, 0, batches, decided))
    return out.replace_schema_metadata({"decided": json.dumps(decided)})


def _terms(out) -> set[str]:
    return {s["term"] for spans in out["identifier_spans"].to_pylist() for s in spans}


def _stats(out) -> dict:
    """The stage's statistics as the manifest has them: per-row ones summed, and the
    decision statistics."""
    rows = {c.split(".", 2)[2]: sum(out[c].to_pylist()) for c in out.column_names if c.startswith("_stat.")}
    return {**rows, **json.loads(out.schema.metadata[b"decided"])}


@pytest.mark.parametrize("k", [1, 2, 3])
def test_five_individuals_by_hand(k):
    out = _run(FIVE, k=k, max_n=2)
    assert _terms(out) == WORDS_UNDER[k] | BIGRAMS_UNDER[k]
    for row in out.to_pylist():  # offsets point at the terms (case folded)
        for s in row["identifier_spans"]:
            assert re.sub(r"\s+", " ", row["text"][s["start"]:s["end"]].lower()) == s["term"]
            assert s["kind"] == "indirect"
    stats = _stats(out)
    assert (stats["terms_n1"], stats["terms_n2"]) == (9, 8)  # distinct words and bigrams, counted once
    assert (stats["identifiers_n1"], stats["identifiers_n2"]) == (len(WORDS_UNDER[k]), len(BIGRAMS_UNDER[k]))
    assert stats["words"] == 19  # 5 + 3 + 3 + 3 + 3 + 2


def test_trigrams_and_where_terms_stop():
    out = _run(FIVE, k=2, max_n=3)
    trigrams = {t for t in _terms(out) if t.count(" ") == 2}
    assert trigrams == {"red fox runs", "red fox sleeps", "blue sky falls", "red car runs", "green fox runs"}
    # one individual: every term is theirs; no term crosses . ! ? a line break or a
    # reserved token, and reserved tokens are no terms
    text = "Alpha beta. gamma <MASK> delta\nepsilon Person_[QUJD] zeta! eta-theta iota"
    out = _run([("x", "P", text)], k=2, max_n=2)
    got = _terms(out)
    assert {t for t in got if " " not in t} == {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta-theta",
                                                "iota"}
    assert {t for t in got if " " in t} == {"alpha beta", "eta-theta iota"}


def _reference_sentences(text: str, settings: IdentifiersSettings) -> list[list[tuple[int, int, str]]]:
    """The scan's oracle, one regular expression at a time: reserved tokens
    (``RESERVED_RE``) become line breaks, the text splits at sentence ends, and each
    piece's words are ``WORD``'s (``mask``'s word), normalised with ``str.lower`` (or kept)
    and digits zeroed as the settings say (lower case letter by letter where it keeps the
    length)."""
    from privatize.stages.mask import WORD

    for m in RESERVED_RE.finditer(text):
        text = text[:m.start()] + "\n" * (m.end() - m.start()) + text[m.end():]
    out, pos = [], 0
    for piece in re.split(r"([.!?\u2026\n\r])", text):
        words = []
        for m in WORD.finditer(piece):
            w = m.group()
            if settings.case == "fold":  # a letter whose lower case is longer (İ) stays
                w = "".join(c.lower() if len(c.lower()) == 1 else c for c in w)
            if settings.digits == "zero":
                w = re.sub("[1-9]", "0", w)
            words.append((pos + m.start(), pos + m.end(), w))
        if words:
            out.append(words)
        pos += len(piece)
    return out


@pytest.mark.parametrize("case,digits", [("fold", "keep"), ("keep", "zero")])
def test_the_vectorised_scan_against_regular_expressions(case, digits):
    """The batch scan (code points, classes, runs; no Python object per word) finds the
    words, offsets, normalised forms and sentence runs the regular expressions find, on
    texts built to stress it: hyphens and apostrophes in and around words, curly
    apostrophes, underscores, digits, every sentence end, other scripts and widths, a
    letter whose lower case is longer (İ), words over 32 letters, and reserved tokens; and equal words get equal digests, different words different ones."""
    import random

    import numpy as np

    from privatize.stages.identifiers import _Terms

    rng = random.Random(11)
    pieces = list("abXZ09 '-_.,!?\t\n\r@<[]éß’–…İ") + [
        "don't", "well-known", "Tibbles-Smith", "haven't", "the", "Mary", "--", "'s", "café", "naïve", "555-1234",
        "<MASK>", "<PERSON>", "Person_[AbCd12==]", "<unk>", "_[", "日本語", "x-ray", "😂", "𝔘𝔫𝔦", "a" * 40]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 30))) for _ in range(1200)]
    st = IdentifiersSettings(direct="none", case=case, digits=digits, max_n=1)
    for chunk in (texts[:600], texts[600:], [t for t in texts if t.isascii()],
                  [t for t in texts if all(ord(c) < 0x10000 for c in t)]):
        scan = _Terms(chunk, st)
        words = scan.words().to_pylist()
        got: list[list] = [[] for _ in chunk]
        last = None
        for i in range(len(words)):
            r = int(scan.row[i])
            if scan.seg[i] != last:
                got[r].append([])
                last = scan.seg[i]
            got[r][-1].append((int(scan.start[i]), int(scan.end[i]), words[i]))
        assert got == [[list(s) for s in _reference_sentences(t, st)] for t in chunk]
        # a word's digest is its normalised text's: equal words equal, others apart
        by_word: dict = {}
        for w, a, b in zip(words, scan.oa.tolist(), scan.ob.tolist()):
            by_word.setdefault(w, set()).add((a, b))
        assert all(len(v) == 1 for v in by_word.values())
        assert len({next(iter(v)) for v in by_word.values()}) == len(by_word)
        assert np.array_equal(scan.on, np.ones(len(words), np.int8))
    assert sum(1 for t in texts if RESERVED_RE.search(t)) > 100


def test_case_and_digits_settings():
    docs = [("1", "P", "Call 555-1234 today"), ("2", "Q", "call 555-9876 today")]
    assert _terms(_run(docs, max_n=1)) == {"555-1234", "555-9876"}
    assert _terms(_run(docs, max_n=1, digits="zero")) == set()  # one shape, two individuals
    assert _terms(_run(docs, max_n=1, case="keep")) == {"Call", "call", "555-1234", "555-9876"}


def test_answers_do_not_depend_on_batching():
    whole = _run(FIVE, k=2, max_n=3)
    for rows in (1, 2, 4):
        got = _run(FIVE, batch_rows=rows, k=2, max_n=3)
        assert got.select(["doc_id", "identifier_spans"]).to_pylist() == \
            whole.select(["doc_id", "identifier_spans"]).to_pylist()
        assert _stats(got) == _stats(whole)


def test_records_without_an_individual():
    docs = [("1", "P", "some words here"), ("2", None, "other words there")]
    with pytest.raises(RecordError, match=r"identifiers: record '2' has no individual_id"):
        _run(docs)
    out = _run(docs, on_missing="quarantine")
    assert out["_quarantine"].to_pylist() == [None, "no individual_id"]
    # the quarantined record takes no part: "words" has one individual only
    assert "words" in _terms(out.slice(0, 1))


def test_bad_settings_name_their_field():
    for stage, path in (({"kind": "identifiers", "k": 0}, "stages.0.identifiers.k"),
                        ({"kind": "identifiers", "max_n": 6}, "stages.0.identifiers.max_n"),
                        ({"kind": "identifiers", "direct": "none", "entities": ["PERSON"]}, "stages.0.identifiers")):
        with pytest.raises(SpecError, match=re.escape(path)):
            parse_spec({"stages": [stage]})
    with pytest.raises(SpecError, match="identifiers after encrypt_text"):
        parse_spec({"stages": [{"kind": "encrypt_text", "key": "file:k"}, {"kind": "identifiers"}]})


def test_a_pipeline_run_with_direct_identifiers(tmp_path):
    """In a run, with the redaction detector: direct spans are the names it finds, the
    manifest sums the statistics, and the column reaches the shards."""
    corpus = tmp_path / "in"
    corpus.mkdir()
    rows = [{"id": "1", "individual_id": "p1", "text": "My name is John Smith and I love kayaking."},
            {"id": "2", "individual_id": "p2", "text": "I love reading books."},
            {"id": "3", "text": "No individual here."}]
    (corpus / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    spec = parse_spec({"stages": [{"kind": "identifiers", "max_n": 1, "on_missing": "quarantine"}]})
    m = run(spec, corpus, tmp_path / "out")
    stats = m["stages"][0]["stats"]
    # p1: my name is john smith and kayaking; p2: reading books ("i" and "love": both)
    assert stats["direct_spans"] >= 1 and stats["identifiers_n1"] == 9
    assert stats["terms_n1"] == 11 and m["counts"]["quarantined"] == 1
    import pyarrow.parquet as pq

    shard = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out" / "shards").glob("*.parquet"))])
    spans = {r["doc_id"]: r["identifier_spans"] for r in shard.to_pylist()}
    direct = [s["term"] for s in spans["1"] if s["kind"] == "direct"]
    assert "John Smith" in direct
    assert {s["term"] for s in spans["2"]} == {"reading", "books"}


def test_keys_travel_once_per_pair_and_at_most_k_per_term():
    """``keys`` pre-aggregates a batch: a (term, individual) pair once, and no more than
    ``k`` individuals of a term (a term k use in one batch is common whatever follows)."""
    from privatize.execution import decide_global_stage

    docs = [("1", "A", "red red red"), ("2", "B", "red"), ("3", "C", "red blue"), ("4", "A", "blue")]
    stage = Identifiers(IdentifiersSettings(direct="none", max_n=1, k=2))
    keyed = stage.keys(_batch(docs))
    # by hand: red A B C (capped at 2), blue C A
    assert keyed.num_rows == 4 and set(keyed["n"].to_pylist()) == {1}
    per_term = {}
    for key, who in zip(keyed["key"].to_pylist(), keyed["_who"].to_pylist()):
        per_term.setdefault(key, set()).add(who)
    assert sorted(len(v) for v in per_term.values()) == [2, 2]
    # the decisions are the common terms: both, and FIVE's common words are five
    assert decide_global_stage(stage, [_batch(docs)]).num_decisions == 2
    five = decide_global_stage(Identifiers(IdentifiersSettings(direct="none", max_n=1, k=2)), [_batch(FIVE)])
    assert five.num_decisions == 5  # red fox runs blue sky
    assert five.stats == {"terms_n1": 9, "identifiers_n1": 4}


def test_the_term_set_tells_apart_digests_whose_first_lanes_tie():
    import numpy as np

    from privatize.stages.identifiers import _key_array, _TermSet

    a = np.array([5, 5, 9], np.uint64)
    b = np.array([1, 2, 3], np.uint64)
    terms = _TermSet(_key_array(a, b))
    got = terms.contains(np.array([5, 5, 5, 9, 9, 7], np.uint64), np.array([1, 2, 3, 3, 1, 1], np.uint64))
    assert got.tolist() == [True, True, False, True, False, False]
    assert _TermSet(None).contains(a, b).tolist() == [False] * 3


@pytest.mark.parametrize("k", [1, 2, 3, 12])
def test_the_counting_kernels_against_python_sets(k):
    """The compiled hash-table passes against a walk over the rows with Python sets: which
    rows a batch sends (each (term, individual) pair once, until a term has k individuals,
    in row order) and each term's distinct individuals counted to k. Enough rows for many
    buckets, k above the slots' inline room (12), and two terms sharing a first lane."""
    from collections import defaultdict

    import numpy as np

    from privatize.text.termscan import BUCKET_ROWS, INLINE, capped_pairs, distinct_users

    rng = np.random.default_rng(k)
    m, n_terms = 12 * BUCKET_ROWS, 6000
    term = np.minimum(rng.zipf(1.3, m), n_terms) - 1
    person = rng.integers(0, 40, m)
    lane_a = rng.integers(0, 2**63, n_terms, dtype=np.uint64)
    lane_b = rng.integers(0, 2**63, n_terms, dtype=np.uint64)
    lane_a[1] = lane_a[0]
    digest = rng.integers(0, 2**63, 40, dtype=np.uint64)
    a, b, w = lane_a[term], lane_b[term], digest[person]
    sent, expected = defaultdict(set), []
    for t, p in zip(term.tolist(), person.tolist()):
        new = len(sent[t]) < k and p not in sent[t]
        if new:
            sent[t].add(p)
        expected.append(new)
    assert capped_pairs(a, b, w, k).tolist() == expected
    users = defaultdict(set)
    for t, p in zip(term.tolist(), person.tolist()):
        users[t].add(p)
    first, counted = distinct_users(a, b, w, k)
    got = {int(term[f]): int(c) for f, c in zip(first, counted)}
    assert len(got) == len(first) == len(users)
    assert got == {t: min(k, len(v)) for t, v in users.items()}
    assert (k > INLINE) == (k == 12) and {0, 1} <= set(got)


def test_the_term_set_against_a_python_set():
    """The apply pass's set of common terms (open addressing on both lanes) against
    Python's set, with first lanes shared and low bits crowded (keys equal modulo 2**16)."""
    import numpy as np

    from privatize.stages.identifiers import _key_array, _TermSet

    rng = np.random.default_rng(3)
    a = rng.integers(0, 2**48, 20_000, dtype=np.uint64) << np.uint64(16)  # every key in slot 0 of 2**16
    b = rng.integers(0, 2**63, 20_000, dtype=np.uint64)
    a[:100] = a[100:200]
    members = set(zip(a[::2].tolist(), b[::2].tolist()))
    got = _TermSet(_key_array(a[::2], b[::2])).contains(a, b)
    assert got.tolist() == [(x, y) in members for x, y in zip(a.tolist(), b.tolist())]
    assert 0 < got.sum() < len(a)


def test_a_large_block_is_scanned_in_slices(monkeypatch):
    """A block over ``SLICE_BYTES`` of text is keyed and applied in slices of whole rows
    (Ray Data hands stages blocks of up to 128 MiB): the same spans, statistics and
    decisions as in one piece."""
    from privatize.stages import identifiers

    whole = _run(FIVE, k=2, max_n=3)
    calls = []
    real = identifiers._Terms

    def counting(texts, settings):
        calls.append(len(texts))
        return real(texts, settings)

    monkeypatch.setattr(identifiers, "SLICE_BYTES", 30)
    monkeypatch.setattr(identifiers, "_Terms", counting)
    sliced = _run(FIVE, k=2, max_n=3)
    assert sliced.select(["doc_id", "identifier_spans"]).to_pylist() == \
        whole.select(["doc_id", "identifier_spans"]).to_pylist()
    assert _stats(sliced) == _stats(whole)
    assert max(calls) < len(FIVE) and sum(calls) == 2 * len(FIVE)  # keys and apply, each row once


def test_compile_kernels_warms_every_kernel_for_every_width():
    """What the image runs at build time: afterwards every kernel has a compiled
    signature for each code-point width it meets (one byte, two, four)."""
    from privatize.text import termscan
    from privatize.stages.identifiers import compile_kernels

    compile_kernels()
    widths = {str(sig[0].dtype) for sig in termscan.scan_words.signatures}
    assert {"uint8", "uint16", "uint32"} <= widths
    for kernel in (termscan.term_occurrences, termscan._count, termscan.set_build, termscan.set_contains):
        assert kernel.signatures
