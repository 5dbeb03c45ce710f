"""An empirical lower bound on a DP run's epsilon, from the same run: "Privacy auditing
with one (1) training run" (Steinke, Nasr and Jagielski, NeurIPS 2023), written here from
the paper's theorem.

The protocol:

1. ``m`` audit canaries (random token blocks, one DP unit each) are drawn from the run's
   audit seed; each is inserted into the DP split with probability 1/2, independently.
2. After training, every canary is scored (minus its mean token loss under the model).
3. The auditor guesses "inserted" for the ``k`` highest scores and "not inserted" for the
   ``k`` lowest, and abstains on the rest: ``r = 2k`` guesses, ``v`` of them right.
4. If the training is (eps, delta)-DP, then (the paper's Theorem 5.2 with its delta term,
   Appendix D) for q = e^eps / (1 + e^eps)::

       P[V >= v] <= P[Binomial(r, q) >= v] + 2 m delta max_{1<=i<=v} P[v - i <= Binomial(r, q) < v] / i

   The audited epsilon is the largest eps whose bound is still below 1 - confidence: an
   eps the run cannot have, at that confidence. A few values of ``k`` are tried, each at
   (1 - confidence) / (number of k) (Bonferroni), so the choice of k costs nothing.

An audited epsilon above the accountant's would mean the accounting is wrong (a DP bug).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

#: the run's audit seed lives in its privacy plan, so a resumed run inserts the same canaries
SEED_FIELD = "audit_seed"


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """The probability of ``v`` or more right guesses out of ``r`` (with ``m`` canaries) from
    an (eps, delta)-DP training: the paper's bound."""
    from scipy.stats import binom

    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-eps))
    tail = float(binom.sf(v - 1, r, q))  # P[Bin(r, q) >= v]
    if delta == 0 or v == 0:
        return min(1.0, tail)
    below = binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[Bin = v-1], P[Bin = v-2], ..., P[Bin = 0]
    ratio = float(np.max(np.cumsum(below) / np.arange(1, v + 1)))
    return min(1.0, tail + 2 * m * delta * ratio)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """The largest eps at which ``v`` right guesses of ``r`` are still less likely than
    ``1 - confidence`` (0 when even eps = 0 explains them)."""
    alpha = 1.0 - confidence
    if p_value(m, r, v, 0.0, delta) >= alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < alpha:
        lo, hi = hi, 2 * hi
        if hi > 1e3:
            return lo
    for _ in range(60):  # bisection to ~1e-12 of the bracket
        mid = (lo + hi) / 2
        if p_value(m, r, v, mid, delta) < alpha:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class AuditResult:
    canaries: int
    inserted: int
    guesses: int
    correct: int
    k: int
    confidence: float
    delta: float
    epsilon_lower_bound: float

    def to_dict(self) -> dict:
        return asdict(self)


def guess_sizes(m: int) -> list[int]:
    """The k tried: 1/20, 1/10, 1/4 and 1/2 of the canaries on each side."""
    return sorted({k for k in (m // 40, m // 20, m // 8, m // 4) if k >= 1})


def audit(scores: np.ndarray, inserted: np.ndarray, delta: float, confidence: float = 0.95) -> AuditResult:
    """Guess from ``scores`` (higher: more likely inserted) against the truth ``inserted``."""
    scores, inserted = np.asarray(scores, np.float64), np.asarray(inserted, bool)
    m = len(scores)
    ks = guess_sizes(m)
    if not ks:
        raise ValueError("an audit needs at least 2 canaries")
    order = np.argsort(-scores, kind="stable")
    per_k = 1.0 - (1.0 - confidence) / len(ks)
    best = None
    for k in ks:
        top, bottom = order[:k], order[m - k:]
        v = int(inserted[top].sum() + (~inserted[bottom]).sum())
        eps = epsilon_lower_bound(m, 2 * k, v, delta, per_k)
        if best is None or eps > best.epsilon_lower_bound:
            best = AuditResult(m, int(inserted.sum()), 2 * k, v, k, confidence, delta, eps)
    return best


def canaries(seed: int, m: int, seq_len: int, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """``m`` canary blocks of ``seq_len`` token ids drawn uniformly from [low, high), and
    which of them are inserted (each with probability 1/2), from ``seed``."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x61756469]))  # "audi"
    ids = rng.integers(low, high, size=(m, seq_len), dtype=np.int64).astype(np.int32)
    return ids, rng.random(m) < 0.5


def canary_scores(model, ids: np.ndarray, batch_size: int = 64) -> np.ndarray:
    """Minus each canary's mean next-token loss under ``model`` (a causal LM, CPU)."""
    import torch

    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(ids), batch_size):
            x = torch.as_tensor(ids[i:i + batch_size], dtype=torch.long)
            logits = model(input_ids=x).logits[:, :-1]
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                    reduction="none").reshape(len(x), -1)
            out.append(-nll.mean(dim=1).double().numpy())
    return np.concatenate(out) if out else np.zeros(0)
