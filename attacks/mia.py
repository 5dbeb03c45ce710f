"""Membership inference scores (the set MIMIR offers) over per-token log-probabilities.

Every score is oriented so that higher means "member":

* ``loss``: minus the mean token negative log-likelihood (Yeom et al. 2018);
* ``zlib``: minus the total negative log-likelihood over the text's zlib entropy in bytes
  (Carlini et al. 2021): a text that is cheap for the model but not for zlib is suspect;
* ``min_k``: the mean log-probability of the k% least likely tokens (Shi et al. 2024);
* ``min_k_pp``: the same over tokens standardised by the model's own distribution at each
  position, (log p(x_i) - mu_i) / sigma_i (Zhang et al. 2024, Min-K%++);
* ``reference``: the target's log-likelihood minus a reference model's (Carlini et al.
  2022's ratio test with one reference model).

Group inference sums the ``loss`` scores over groups of ``group_size`` examples of one
kind (CRT: 2,000 groups of 20), a weaker adversary's question asked of many records.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from attacks.metrics import roc_result, zlib_entropy
from attacks.results import MiaResult, RocResult

SCORES = ("loss", "zlib", "min_k", "min_k_pp", "reference")


def _lowest_mean(values: np.ndarray, k: float) -> float:
    if len(values) == 0:
        return float("nan")
    n = max(1, int(round(len(values) * k)))
    return float(np.sort(values)[:n].mean())


def example_scores(texts: Sequence[str], token_scores, *, k: float = 0.2, reference_scores=None) -> dict[str, np.ndarray]:
    """The scores of each text (``token_scores``: :class:`attacks.model.TokenScores` per
    text, or any object with ``logprobs``, ``mu`` and ``sigma`` arrays)."""
    out: dict[str, list[float]] = {name: [] for name in SCORES if name != "reference" or reference_scores is not None}
    for i, (text, s) in enumerate(zip(texts, token_scores)):
        lp = np.asarray(s.logprobs, dtype=np.float64)
        nll = -lp.sum()
        out["loss"].append(float(lp.mean()) if len(lp) else float("nan"))
        out["zlib"].append(float(-nll / max(1, zlib_entropy(text))))
        out["min_k"].append(_lowest_mean(lp, k))
        z = (lp - np.asarray(s.mu)) / np.maximum(np.asarray(s.sigma), 1e-6)
        out["min_k_pp"].append(_lowest_mean(z, k))
        if reference_scores is not None:
            ref = np.asarray(reference_scores[i].logprobs, dtype=np.float64)
            out["reference"].append(float(lp.sum() - ref.sum()))
    return {name: np.array(v) for name, v in out.items()}


def group_scores(scores: np.ndarray, group_size: int, seed: int = 0) -> np.ndarray:
    """Sums over disjoint random groups of ``group_size`` (the remainder is left out)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(scores))
    n = len(scores) // group_size
    return scores[perm[: n * group_size]].reshape(n, group_size).sum(1) if n else np.zeros(0)


def mia_result(members: dict[str, np.ndarray], non_members: dict[str, np.ndarray], *, context: str,
               group_size: int | None = 20, seed: int = 0) -> MiaResult:
    """ROC, AUC and TPR at 1% / 0.1% FPR for every score; group inference on ``loss``."""
    results: list[RocResult] = []
    for name in SCORES:
        if name not in members:
            continue
        m, n = members[name], non_members[name]
        keep_m, keep_n = m[np.isfinite(m)], n[np.isfinite(n)]
        results.append(roc_result(name, keep_m, keep_n))
    n_m, n_n = len(next(iter(members.values()))), len(next(iter(non_members.values())))
    group = None
    if group_size and n_m // group_size >= 2 and n_n // group_size >= 2:
        group = roc_result(f"loss, summed over groups of {group_size}",
                           group_scores(members["loss"], group_size, seed), group_scores(non_members["loss"], group_size, seed + 1))
    return MiaResult(members=n_m, non_members=n_n, context=context, scores=results, group=group,
                     group_size=group_size if group else None)
