"""Scores to figures: ROC, AUC, TPR at a fixed FPR, canary exposure, zlib ratios.

Pure functions over arrays (no model, no torch): an attack turns a checkpoint into
per-example scores elsewhere and hands them here. Convention throughout: a **higher
score means "member"** (or, for canaries, "more likely under the model"), and a
threshold ``t`` predicts "member" for every score ``>= t``.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np
from scipy import stats

from attacks.results import RocResult, SpanPerplexity, TprAtFpr

ArrayLike = Sequence[float] | np.ndarray


def _scores(members: ArrayLike, non_members: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    m = np.asarray(members, dtype=np.float64).ravel()
    n = np.asarray(non_members, dtype=np.float64).ravel()
    if m.size == 0 or n.size == 0:
        raise ValueError("ROC needs at least one member and one non-member score")
    if np.isnan(m).any() or np.isnan(n).any():
        raise ValueError("scores contain NaN (a failed forward pass?); drop or fix them first")
    return m, n


def roc_curve(members: ArrayLike, non_members: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fpr, tpr, thresholds)``, one point per distinct score plus the start.

    ``thresholds[0]`` is ``+inf`` (reject all: the point (0, 0)); then each distinct
    score in decreasing order, the last giving (1, 1). Tied scores form one point, so a
    tie between a member and a non-member is a diagonal step, as the Mann-Whitney AUC
    counts it (half a pair)."""
    m, n = _scores(members, non_members)
    thresholds = np.unique(np.concatenate([m, n]))[::-1]
    # how many scores are >= each threshold: searchsorted on the ascending arrays
    tp = m.size - np.searchsorted(np.sort(m), thresholds, side="left")
    fp = n.size - np.searchsorted(np.sort(n), thresholds, side="left")
    fpr = np.concatenate([[0.0], fp / n.size])
    tpr = np.concatenate([[0.0], tp / m.size])
    return fpr, tpr, np.concatenate([[np.inf], thresholds])


def auc(members: ArrayLike, non_members: ArrayLike) -> float:
    """P(member score > non-member score) + 0.5 P(equal), from mid-ranks (Mann-Whitney U);
    equal to the trapezoidal area under :func:`roc_curve`."""
    m, n = _scores(members, non_members)
    ranks = stats.rankdata(np.concatenate([m, n]))  # ties get their average rank
    u = ranks[: m.size].sum() - m.size * (m.size + 1) / 2.0
    return float(u / (m.size * n.size))


def _tpr_at(fpr: np.ndarray, tpr: np.ndarray, thresholds: np.ndarray, max_fpr: float, negatives: int) -> TprAtFpr:
    if not 0.0 <= max_fpr <= 1.0:
        raise ValueError(f"max_fpr must be in [0, 1], not {max_fpr}")
    ok = np.flatnonzero(fpr <= max_fpr + 1e-12)  # a prefix: FPR never falls as the threshold does
    # argmax takes the first maximum: the highest threshold (lowest FPR) that reaches that TPR
    i = int(ok[np.argmax(tpr[ok])])
    return TprAtFpr(max_fpr=float(max_fpr), tpr=float(tpr[i]), fpr=float(fpr[i]),
                    threshold=None if math.isinf(thresholds[i]) else float(thresholds[i]), negatives=negatives)


def tpr_at_fpr(members: ArrayLike, non_members: ArrayLike, max_fpr: float) -> TprAtFpr:
    """The largest TPR over thresholds whose FPR <= ``max_fpr``, with the FPR and threshold
    that reach it (``threshold=None``: only "reject all" qualifies). With fewer than
    ``1 / max_fpr`` non-members the figure is coarse; ``negatives`` says how coarse."""
    fpr, tpr, thr = roc_curve(members, non_members)
    return _tpr_at(fpr, tpr, thr, max_fpr, int(np.size(non_members)))


def _thin(fpr: np.ndarray, tpr: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of at most ``max_points`` points that keep both ends and the curve's shape
    on linear axes (evenly spaced along the path, whose L1 length fpr + tpr only grows)
    and on a log FPR axis (MIA papers plot the low-FPR corner in log scale)."""
    if fpr.size <= max_points:
        return np.arange(fpr.size)
    half = max(1, (max_points - 2) // 2)
    path = fpr + tpr
    lin = np.searchsorted(path, np.linspace(0.0, 2.0, half), side="left")
    lowest = fpr[fpr > 0].min()
    logs = np.searchsorted(fpr, np.geomspace(lowest, 1.0, half), side="left")
    idx = np.unique(np.concatenate([[0, fpr.size - 1], lin, logs]))
    return np.clip(idx, 0, fpr.size - 1)


def roc_result(score_name: str, members: ArrayLike, non_members: ArrayLike,
               fprs: Sequence[float] = (0.01, 0.001), max_points: int = 300) -> RocResult:
    """One score's :class:`RocResult`: AUC, TPR at each FPR in ``fprs`` (computed on the
    full curve) and the curve thinned to about ``max_points`` points for plots."""
    if max_points < 4:
        raise ValueError("max_points must be at least 4")
    fpr, tpr, thr = roc_curve(members, non_members)
    negatives = int(np.size(non_members))
    keep = _thin(fpr, tpr, max_points)
    return RocResult(score=score_name, auc=auc(members, non_members),
                     tpr_at=[_tpr_at(fpr, tpr, thr, f, negatives) for f in fprs],
                     fpr=fpr[keep].tolist(), tpr=tpr[keep].tolist())


# ---- canary exposure (Carlini et al. 2019, "The Secret Sharer") ---------------------

def exposure(rank: int, candidates: int) -> float:
    """``log2 |R| - log2 rank``: 0 for the least likely candidate, ``log2 |R|`` (19.93 for
    10^6) when the canary is the model's first choice."""
    if int(candidates) != candidates or candidates < 1:
        raise ValueError(f"candidates must be a positive integer, not {candidates}")
    if int(rank) != rank or not 1 <= rank <= candidates:
        raise ValueError(f"rank must be an integer in [1, {candidates}], not {rank}")
    return math.log2(candidates) - math.log2(rank)


def rank_of(secret_score: float, candidate_scores: ArrayLike) -> int:
    """``1 +`` the number of candidates scoring strictly higher than the secret.

    Ties count in the secret's favour: a candidate with exactly the secret's score (the
    secret itself, when it is among ``candidate_scores``, or a float tie) does not push it
    down. That is optimistic for the attacker and so conservative for the data owner: a
    tie can only raise the reported exposure, never hide leakage."""
    s = float(secret_score)
    if math.isnan(s):
        raise ValueError("the secret's score is NaN")
    c = np.asarray(candidate_scores, dtype=np.float64)
    return 1 + int(np.count_nonzero(c > s))


def extrapolated_exposure(secret_score: float, sample_scores: ArrayLike, candidates: int) -> float:
    """Exposure without scoring every candidate: fit a skew-normal to the scores of a
    random sample of candidates and take ``-log2 P(X >= secret_score)`` under the fit
    (Carlini et al. 2019, section 4.3; scores are log-likelihoods, higher = likelier),
    clipped to ``[0, log2 candidates]``, the range exact exposure can take."""
    s = np.asarray(sample_scores, dtype=np.float64).ravel()
    s = s[np.isfinite(s)]
    if s.size < 10:
        raise ValueError(f"a skew-normal fit needs at least 10 finite sample scores, got {s.size}")
    if candidates < 1:
        raise ValueError(f"candidates must be positive, not {candidates}")
    a, loc, scale = stats.skewnorm.fit(s)
    log_tail = stats.skewnorm.logsf(float(secret_score), a, loc, scale)  # log P(X > x); continuous: same as >=
    return float(np.clip(-log_tail / math.log(2.0), 0.0, math.log2(candidates)))


# ---- zlib (Carlini et al. 2021; Nasr et al. 2023's filter as Crypto-LLM states it) ---

_DIGITS_TO_ZERO = str.maketrans("123456789", "000000000")


def zlib_entropy(text: str) -> int:
    """Bytes of ``zlib.compress`` of the UTF-8 text: the "zlib entropy" of Carlini et al.
    2021, a reference score for membership that needs no second model."""
    return len(zlib.compress(text.encode("utf-8")))


def zlib_ratio(text: str, map_digits: bool = True) -> float:
    """Compressed / raw bytes, digits 1-9 first mapped to 0 when ``map_digits``: low for
    repetitive strings (page numbers, "Chapter 12, Chapter 13, ..."), which the
    extraction attack drops below 0.275."""
    if not text:
        raise ValueError("the empty string has no compression ratio")
    raw = (text.translate(_DIGITS_TO_ZERO) if map_digits else text).encode("utf-8")
    return len(zlib.compress(raw)) / len(raw)


def span_perplexity(logprobs: Sequence[np.ndarray], offsets: Sequence[np.ndarray],
                    spans: Sequence[Sequence[tuple[int, int]]]) -> SpanPerplexity:
    """Perplexity split by character spans: a token whose character range ``[a, b)``
    overlaps a span ``[start, end)`` counts as inside. ``logprobs[i][j]`` is the log
    probability of token j of text i, ``offsets[i][j]`` its character range."""
    tot = [0.0, 0.0]
    n = [0, 0]
    for lp, off, sp in zip(logprobs, offsets, spans, strict=True):
        lp = np.asarray(lp, dtype=np.float64)
        off = np.asarray(off, dtype=np.int64).reshape(-1, 2)[: len(lp)]
        inside = np.zeros(len(lp), dtype=bool)
        for start, end in sp:
            inside |= (off[:, 0] < end) & (off[:, 1] > start)
        for k, sel in enumerate((~inside, inside)):
            tot[k] += float(lp[sel].sum())
            n[k] += int(sel.sum())
    if not n[0]:
        raise ValueError("every token overlaps a span: there is no text outside the secrets to score")
    return SpanPerplexity(outside=math.exp(-tot[0] / n[0]), inside=math.exp(-tot[1] / n[1]) if n[1] else None,
                          inside_tokens=n[1], tokens=n[0] + n[1])
