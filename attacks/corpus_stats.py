"""Unigram entropy and n-gram conditional entropies of a corpus (Crypto-LLM, Table 8):
how much a cipher flattens the unigram distribution and breaks short-range structure.

``H(X_n | X_1..X_{n-1}) = -sum over n-grams g of p(g) log2 p(last of g | its context)``,
both estimated from the corpus' n-gram counts (maximum likelihood), with the context
counted among the n-grams (so the figure is exactly H(n-gram) - H(its context)). An
n-gram never spans two texts. The paper counts tokens of its tokenizer; ``unit``
chooses what a token is here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Hashable

import numpy as np

UNITS = ("word", "char", "token")


def _units(texts: Iterable[str | Sequence[Hashable]], unit: str) -> Iterable[Sequence[Hashable]]:
    # words verbatim (case and punctuation are what a cipher changes); a string's
    # characters, spaces included; or a sequence that already holds tokens
    for t in texts:
        yield t.split() if unit == "word" else t


def _entropy_bits(counts: np.ndarray, context_counts: np.ndarray) -> float:
    p = counts / counts.sum()
    return float(-(p * np.log2(counts / context_counts)).sum())


def ngram_entropies(texts: str | Iterable[str | Sequence[Hashable]], unit: str = "word",
                    max_n: int = 4) -> dict[str, float | None]:
    """``{"unigram": H1, "2": H(X|X-1), "3": ..., str(max_n): ...}`` in bits.

    ``texts``: one string or an iterable of them (``unit="word"``: whitespace-separated
    words, verbatim; ``"char"``: code points), or of token sequences (``"token"``). An
    order with no n-gram (every text shorter than n) is ``None``."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")
    if max_n < 1:
        raise ValueError("max_n must be at least 1")
    if isinstance(texts, str):
        texts = [texts]
    vocab: dict[Hashable, int] = {}
    ids, doc = [], []
    for d, seq in enumerate(_units(texts, unit)):
        ids.extend(vocab.setdefault(u, len(vocab)) for u in seq)
        doc.extend([d] * (len(ids) - len(doc)))
    if not ids:
        raise ValueError("the corpus has no tokens")
    tok = np.asarray(ids, dtype=np.int64)
    docs = np.asarray(doc, dtype=np.int64)
    v = len(vocab)
    counts = np.bincount(tok)
    out: dict[str, float | None] = {"unigram": _entropy_bits(counts, np.full_like(counts, tok.size))}
    # ctx[i]: the id of the (n-1)-gram starting at i; an n-gram's key is ctx * V + next token,
    # which stays below 2**63 because there are at most N distinct contexts
    ctx = tok
    for n in range(2, max_n + 1):
        span = tok.size - n + 1
        if span <= 0:
            out[str(n)] = None
            continue
        valid = docs[:span] == docs[n - 1:n - 1 + span]
        key = ctx[:span] * v + tok[n - 1:n - 1 + span]
        uniq, inverse, cnt = np.unique(key[valid], return_inverse=True, return_counts=True)
        if cnt.size == 0:
            out[str(n)] = None
        else:
            context_of = uniq // v
            context_total = np.bincount(context_of, weights=cnt)[context_of]
            out[str(n)] = _entropy_bits(cnt, context_total)
        ctx = np.zeros(span, dtype=np.int64)
        ctx[valid] = inverse  # windows across texts stay invalid at every higher order
    return out
