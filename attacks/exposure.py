"""Canary exposure (Carlini et al. 2019, "The Secret Sharer"; CRT section 6).

Exposure of a secret s among the candidate space R = log2 |R| - log2 rank(s), the rank
by the model's log-likelihood of the secret's digits after the canary's prefix (1 = most
likely). The score covers the secret only: every candidate shares the prefix, and the
text after the secret (a full stop) is left out so the last digit needs no forward pass.

* ``exact``: score every candidate. The digit trie (``ModelAdapter.digit_scores_trie``)
  makes 10^6 candidates about 111,111 one-token steps.
* ``extrapolated``: fit a skew-normal to a random sample of candidate scores and read the
  secret's tail probability from it (Carlini et al. section 4.3).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from attacks.metrics import exposure as exposure_of_rank
from attacks.metrics import extrapolated_exposure, rank_of
from attacks.results import CanaryExposure, ExposureResult

SCORED = "log P(secret digits | prefix)"


def split_format(fmt: str) -> tuple[str, str]:
    before, _, after = fmt.partition("{secret}")
    return before, after


def canary_exposure(adapter, fmt: str, digits: int, secrets: Sequence[str], repeats: Sequence[int], *,
                    method: str = "exact", sample: int = 10000, seed: int = 0,
                    progress: Callable[[int], None] | None = None) -> ExposureResult:
    """Exposure of each secret (``repeats[i]`` = times secret i was inserted; 0 marks a
    never-inserted reference canary)."""
    t0 = time.perf_counter()
    prefix, _ = split_format(fmt)
    candidates = 10 ** digits
    out: list[CanaryExposure] = []
    if method == "exact":
        scores = adapter.digit_scores_trie(prefix, digits, progress=progress)
        for i, (s, r) in enumerate(zip(secrets, repeats)):
            rank = rank_of(scores[int(s)], scores)
            out.append(CanaryExposure(index=i, repeats=int(r), rank=int(rank), exposure=exposure_of_rank(rank, candidates)))
    elif method == "extrapolated":
        rng = np.random.default_rng(seed)
        pool = rng.choice(candidates, size=min(sample, candidates), replace=False)
        pool_s = [f"{int(x):0{digits}d}" for x in pool]
        sample_scores = adapter.digit_scores_naive(prefix, pool_s, progress=progress)
        own = adapter.digit_scores_naive(prefix, list(secrets))
        for i, (sc, r) in enumerate(zip(own, repeats)):
            # the rank within the sample, scaled to |R|, is reported beside the fitted figure
            rank = min(candidates, max(1, int(round(rank_of(sc, sample_scores) * candidates / len(pool)))))
            out.append(CanaryExposure(index=i, repeats=int(r), rank=rank,
                                      exposure=float(extrapolated_exposure(sc, sample_scores, candidates))))
    else:
        raise ValueError(f"canaries.method: {method!r} is not exact or extrapolated")
    inserted = [c.exposure for c in out if c.repeats > 0]
    reference = [c.exposure for c in out if c.repeats == 0]
    return ExposureResult(format=fmt, digits=digits, candidates=candidates, method=method, scored=SCORED,
                          canaries=out, max_exposure=max(inserted) if inserted else 0.0,
                          mean_exposure=float(np.mean(inserted)) if inserted else 0.0,
                          max_reference_exposure=max(reference) if reference else None,
                          seconds=time.perf_counter() - t0)
