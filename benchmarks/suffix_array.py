"""Data-extraction index: build time and query rate of ``attacks.extraction.TrainingIndex``
(a word-level suffix array by libdivsufsort) on a synthetic ~100 MB training corpus, on
one core.

Corpus: the sentences of WikiText-2 ``valid.txt`` and ``test.txt`` (../shared/data),
drawn at random into documents of 40 sentences, each word replaced with probability
``--sub`` by a uniformly random word of the vocabulary, until ``--mb`` MB of text. The
substitutions keep copies of a sentence from being identical, so long matches are rare
unless planted. Queries: ``--queries`` generations of 64 words, alternately planted (64
consecutive words of a document in the first 5 MB, which must match in full) and random
(64 words drawn by corpus frequency, so common pairs such as "of the" match).

Baseline, in the same run, on the first 5 MB only: the same search (for each start,
try to beat the best run so far) with Python's ``in`` on the joined text instead of the
suffix array, for ``--baseline-queries`` of the queries, against an index built on the
same 5 MB; both must give the same ``(length, start)``.

    python benchmarks/suffix_array.py [--mb 100] [--queries 1000] [--baseline-queries 40] [--sub 0.1]

Prints the figures and a final JSON line, also written to
``benchmarks/results/suffix_array.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time

from _common import machine, need_data, one_core, save_result

one_core()

import numpy as np  # noqa: E402

from attacks.extraction import TrainingIndex, words  # noqa: E402

SLICE_MB = 5.0
GEN_WORDS = 64
_SENTENCE_END = re.compile(r"(?<= [.!?]) ")


def base_sentences() -> tuple[np.ndarray, list[np.ndarray]]:
    """WikiText-2's vocabulary and its sentences as arrays of word ids (headers dropped)."""
    d = need_data() / "wikitext2_tokenized"
    vocab: dict[str, int] = {}
    sentences = []
    for name in ("valid.txt", "test.txt"):
        for line in open(d / name, encoding="utf-8"):
            line = line.strip()
            if not line or line.startswith("="):
                continue
            for s in _SENTENCE_END.split(line):
                ids = [vocab.setdefault(w, len(vocab)) for w in s.split()]
                if len(ids) >= 4:
                    sentences.append(np.asarray(ids, dtype=np.int32))
    return np.asarray(list(vocab), dtype=object), sentences


def make_corpus(mb: float, sub: float, rng: np.random.Generator) -> list[str]:
    """Documents of 40 random sentences with random word substitutions, ``mb`` MB in all."""
    vocab, sentences = base_sentences()
    docs, size = [], 0
    while size < mb * 1e6:
        ids = np.concatenate([sentences[i] for i in rng.integers(len(sentences), size=40)])
        swap = rng.random(ids.size) < sub
        ids[swap] = rng.integers(vocab.size, size=int(swap.sum()))
        doc = " ".join(vocab[ids].tolist())
        docs.append(doc)
        size += len(doc.encode("utf-8")) + 1
    return docs


def make_queries(docs: list[str], n: int, rng: np.random.Generator) -> tuple[list[str], list[bool]]:
    """Alternately 64 planted words (a window of a document) and 64 words by frequency."""
    doc_words = [words(d) for d in docs]
    doc_words = [w for w in doc_words if len(w) >= GEN_WORDS]
    pool = [w for ws in doc_words for w in ws]
    queries, planted = [], []
    for q in range(n):
        if q % 2 == 0:
            ws = doc_words[rng.integers(len(doc_words))]
            start = int(rng.integers(len(ws) - GEN_WORDS + 1))
            queries.append(" ".join(ws[start:start + GEN_WORDS]))
        else:
            queries.append(" ".join(pool[i] for i in rng.integers(len(pool), size=GEN_WORDS)))
        planted.append(q % 2 == 0)
    return queries, planted


def naive_longest_match(joined: str, text: str) -> tuple[int, int]:
    """The index's search with ``in`` on the text: each document is one line of
    space-separated words with a space at each end, so a phrase padded with spaces
    matches whole words only and never crosses a line."""
    ws = words(text)
    best = start = 0
    for i in range(len(ws)):
        if len(ws) - i <= best:
            break
        while i + best < len(ws) and f" {' '.join(ws[i:i + best + 1])} " in joined:
            best, start = best + 1, i
    return best, start


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=100.0, help="training corpus size (MB of text)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--baseline-queries", type=int, default=40, help="queries timed on the naive search")
    ap.add_argument("--sub", type=float, default=0.1, help="probability of replacing a word")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)

    docs, t_corpus = timed(make_corpus, args.mb, args.sub, rng)
    mb = sum(len(d.encode("utf-8")) + 1 for d in docs) / 1e6
    cut, size = 0, 0
    while cut < len(docs) and size < SLICE_MB * 1e6:
        size += len(docs[cut].encode("utf-8")) + 1
        cut += 1
    slice_docs, slice_mb = docs[:cut], size / 1e6
    queries, planted = make_queries(slice_docs, args.queries, rng)
    print(f"corpus: {len(docs)} documents, {mb:.1f} MB (made in {t_corpus:.1f} s); one core ({machine()})")

    index, t_build = timed(TrainingIndex.build, docs)
    del docs
    print(f"build: {t_build:.1f} s = {mb / t_build:.2f} MB/s; {index.words} words, "
          f"{len(index.vocab)} distinct, suffix array {index.sa.dtype}")
    with tempfile.TemporaryDirectory() as tmp:
        _, t_save = timed(index.save, tmp)
        loaded, t_load = timed(TrainingIndex.load, tmp)
        found, t_query = timed(lambda: [loaded.longest_match(q) for q in queries])
    rate = len(queries) / t_query
    lengths = np.array([n for n, _ in found])
    pl = np.array(planted)
    print(f"save {t_save:.1f} s, load (mmap) {t_load:.2f} s")
    print(f"queries: {len(queries)} x {GEN_WORDS} words in {t_query:.2f} s = {rate:.0f} queries/s; "
          f"planted found in full {int((lengths[pl] == GEN_WORDS).sum())}/{int(pl.sum())}, "
          f"random: longest run {int(lengths[~pl].max())}, median {float(np.median(lengths[~pl])):.0f}")

    sub_q = queries[:args.baseline_queries]
    small, t_small_build = timed(TrainingIndex.build, slice_docs)
    joined = "\n".join(f" {' '.join(words(d))} " for d in slice_docs)
    ours, t_ours = timed(lambda: [small.longest_match(q) for q in sub_q])
    naive, t_naive = timed(lambda: [naive_longest_match(joined, q) for q in sub_q])
    if ours != naive:
        raise SystemExit(f"index and naive search disagree: {[(a, b) for a, b in zip(ours, naive) if a != b][:5]}")
    ratio = t_naive / t_ours
    print(f"baseline on {slice_mb:.1f} MB, {len(sub_q)} queries (same answers): index {len(sub_q) / t_ours:.0f} "
          f"queries/s, naive `in` search {len(sub_q) / t_naive:.1f} queries/s: {ratio:.0f}x")

    result = {"machine": machine(), "mb": round(mb, 2), "documents": index.documents, "words": index.words,
              "vocabulary": len(index.vocab), "substitution": args.sub, "build_s": round(t_build, 3),
              "build_mb_per_s": round(mb / t_build, 3), "save_s": round(t_save, 3), "load_s": round(t_load, 3),
              "queries": len(queries), "query_words": GEN_WORDS, "query_s": round(t_query, 3),
              "queries_per_s": round(rate, 1), "planted_found": int((lengths[pl] == GEN_WORDS).sum()),
              "planted": int(pl.sum()), "random_longest": int(lengths[~pl].max()),
              "baseline": {"mb": round(slice_mb, 2), "queries": len(sub_q), "build_s": round(t_small_build, 3),
                           "index_queries_per_s": round(len(sub_q) / t_ours, 1),
                           "naive_queries_per_s": round(len(sub_q) / t_naive, 2), "ratio": round(ratio, 1)}}
    save_result("suffix_array", result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
