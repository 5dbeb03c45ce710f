"""The calibrated conservative policy's model: a logistic score per pi_c candidate, and
a threshold chosen on labelled sentences so that the share of secret-holding sentences
routed public is at most a target with 95% confidence (issue 50).

CRT's guarantee carries pi_c's miss rate as delta_2:
``(log(1 + gamma (e^eps - 1)), gamma delta + delta_2)``. Any policy whose miss rate is
bounded on labelled data is as valid as the paper's every-signal policy, and can route
far fewer secret-free sentences to the private split.

* :func:`fit`: L2-regularised logistic regression (scipy's L-BFGS) on candidate features
  (:mod:`privatize.redaction.evidence`), label "the candidate overlaps a gold secret";
* :func:`calibrate`: on a calibration set kept apart from fitting, the largest
  threshold at which the one-sided Clopper-Pearson upper bound on the miss rate (secret
  sentences that neither pi nor a candidate at or above the threshold flags, over all
  secret sentences) stays at or below the target;
* :class:`PiCModel`: the fitted weights, threshold and provenance, saved as JSON; the
  shipped one is :data:`DEFAULT_MODEL_PATH` (``experiments/pic_fit.py`` writes it).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

DEFAULT_MODEL_PATH = Path(__file__).with_name("pic_calibrated.json")
FORMAT = "privatize.pi_c.calibrated/1"


def clopper_pearson_upper(misses: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on a rate seen as ``misses`` of ``n``:
    the ``confidence`` quantile of Beta(misses + 1, n - misses); 1 when ``misses >= n``."""
    if n <= 0:
        raise ValueError("the bound needs at least one case (n > 0)")
    if not 0 <= misses <= n:
        raise ValueError(f"misses must be between 0 and n ({misses} of {n})")
    if misses >= n:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(confidence, misses + 1, n - misses))


@dataclass(frozen=True)
class Calibration:
    threshold: float
    """Candidates scoring at or above this flag their record."""
    misses: int
    """Secret sentences of the calibration set the policy routes public at the threshold."""
    n_secret: int
    """Secret sentences in the calibration set."""
    bound: float
    """One-sided upper bound on the miss rate (delta_2's estimate)."""
    target: float
    confidence: float


def calibrate(secret_scores: Sequence[float | None], *, target: float, confidence: float = 0.95) -> Calibration:
    """The largest threshold whose miss rate on the calibration set has an upper bound
    at or below ``target``.

    ``secret_scores``: one entry per secret-holding calibration sentence: its strongest
    candidate's score, ``math.inf`` where pi itself flags it (pi's hits always route
    private) and ``None`` where it has no candidate at all (a miss at any threshold). At
    threshold ``t`` a sentence is missed iff its score is below ``t`` (or ``None``)."""
    if not 0 < target < 1:
        raise ValueError(f"target must be between 0 and 1 (got {target})")
    n = len(secret_scores)
    if n == 0:
        raise ValueError("calibration needs secret-holding sentences")
    unavoidable = sum(s is None for s in secret_scores)
    finite = sorted(s for s in secret_scores if s is not None and s != math.inf)
    allowed = unavoidable - 1  # the most misses whose bound meets the target
    while allowed + 1 <= unavoidable + len(finite) and clopper_pearson_upper(allowed + 1, n, confidence) <= target:
        allowed += 1
    if allowed < unavoidable:
        raise ValueError(f"no threshold meets the target {target}: {unavoidable} of the {n} secret sentences have no "
                         f"signal at all, and even no other miss has an upper bound of "
                         f"{clopper_pearson_upper(unavoidable, n, confidence):.4f}; give more calibration data "
                         "or a larger target")
    k = allowed - unavoidable  # finite scores that may be missed
    if k >= len(finite):  # every candidate may be missed: flag nothing beyond pi
        threshold = 1.0 if not finite else max(1.0, finite[-1])
        misses = unavoidable + len(finite) - sum(s >= threshold for s in finite)
    else:
        threshold = finite[k]  # scores strictly below are missed: at most k of them
        misses = unavoidable + sum(s < threshold for s in finite)
    return Calibration(threshold=float(threshold), misses=misses, n_secret=n,
                       bound=clopper_pearson_upper(misses, n, confidence), target=target, confidence=confidence)


def calibrate_within(secret_scores: Sequence[float | None], target: float,
                     confidence: float = 0.95) -> tuple[Calibration, bool]:
    """:func:`calibrate` at ``target``, or, where the sentences are too few to show it, the
    threshold that allows no avoidable miss (the bound is then what the data show).
    Returns the calibration and whether the target was shown."""
    try:
        return calibrate(secret_scores, target=target, confidence=confidence), True
    except ValueError:
        unavoidable = sum(s is None for s in secret_scores)
        return calibrate(secret_scores, target=clopper_pearson_upper(unavoidable, len(secret_scores), confidence)
                         + 1e-9, confidence=confidence), False


def fit(rows: Iterable[tuple[Sequence[str], int]], *, l2: float = 1.0, min_count: int = 3) -> tuple[dict, float]:
    """Weights and bias of a logistic regression on binary string features.

    ``rows``: (features, label 0/1). Features seen in fewer than ``min_count`` rows are
    dropped (they cannot generalise). Returns ``({feature: weight}, bias)``."""
    import numpy as np
    from scipy import sparse
    from scipy.optimize import minimize

    rows = list(rows)
    counts: dict[str, int] = {}
    for feats, _ in rows:
        for f in set(feats):
            counts[f] = counts.get(f, 0) + 1
    vocab = {f: i for i, f in enumerate(sorted(f for f, c in counts.items() if c >= min_count))}
    if not rows or not vocab:
        raise ValueError("nothing to fit: no rows or no feature seen often enough")
    indptr, indices = [0], []
    for feats, _ in rows:
        idx = sorted({vocab[f] for f in feats if f in vocab})
        indices.extend(idx)
        indptr.append(len(indices))
    X = sparse.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(rows), len(vocab)))
    y = np.array([float(lab) for _, lab in rows])

    def loss(theta):
        w, b = theta[:-1], theta[-1]
        z = X @ w + b
        # log(1 + e^z) - y z, stably
        ll = np.logaddexp(0.0, z) - y * z
        p = 1.0 / (1.0 + np.exp(-z))
        g = p - y
        grad_w = X.T @ g + l2 * w
        return ll.sum() + 0.5 * l2 * (w @ w), np.concatenate([grad_w, [g.sum()]])

    res = minimize(loss, np.zeros(len(vocab) + 1), jac=True, method="L-BFGS-B", options={"maxiter": 2000})
    theta = res.x
    names = sorted(vocab, key=vocab.get)
    weights = {f: round(float(theta[vocab[f]]), 6) for f in names if abs(theta[vocab[f]]) >= 1e-6}
    return weights, round(float(theta[-1]), 6)


def with_miss_share(gamma: float, miss_share: float) -> float:
    """The share of secrets left readable when pi misses ``gamma`` of them by itself and a
    redact stage's ``miss_share`` leaves that share of its hits in the clear besides:
    1 - (1 - gamma)(1 - miss_share) (``gamma`` itself when nothing is left)."""
    return 1 - (1 - gamma) * (1 - miss_share) if miss_share else gamma


@dataclass(frozen=True)
class PiCModel:
    """A fitted candidate score with its calibrated threshold and provenance."""

    weights: dict = field(hash=False)
    bias: float
    threshold: float
    meta: dict = field(default_factory=dict, hash=False, compare=False)
    """Provenance: fitting and calibration data, the target, delta_2's bound, per-set figures."""
    path: str = ""

    def score(self, features: Iterable[str]) -> float:
        z = self.bias + sum(self.weights.get(f, 0.0) for f in features)
        if z < -40:
            return 0.0
        return 1.0 / (1.0 + math.exp(-z))

    def domains(self) -> tuple[str, ...]:
        """The domains with thresholds of their own (``pi_c.domain``)."""
        return tuple(sorted((self.meta.get("domains") or {})))

    def _calibrated(self, domain: str | None, scope: str) -> dict:
        """The block holding ``threshold`` and ``calibration`` for (domain, scope)."""
        if domain is not None and domain not in (self.meta.get("domains") or {}):
            raise ValueError(f"pi_c.domain: {domain!r} has no calibration in {self.path or 'this model'}; "
                             f"calibrated domains: {', '.join(self.domains()) or 'none'}")
        if scope == "record":
            if domain is None:
                return {"threshold": self.threshold, "calibration": self.meta.get("calibration") or {}}
            return self.meta["domains"][domain]
        if scope != "rest":
            raise ValueError(f"pi_c.scope must be 'record' or 'rest' (got {scope!r})")
        block = (self.meta.get("rest") if domain is None else self.meta["domains"][domain].get("rest"))
        if not block:
            raise ValueError(f"pi_c.scope: rest needs a threshold calibrated on what pi leaves in the clear, and "
                             f"{self.path or 'this model'} has none{'' if domain is None else f' for {domain!r}'} "
                             "(python -m experiments.pic_fit --rest adds one)")
        return block

    def _block_or_none(self, domain: str, scope: str) -> dict | None:
        try:
            return self._calibrated(domain, scope)
        except ValueError:  # a domain without a threshold for this scope
            return None

    def threshold_for(self, domain: str | None, scope: str = "record") -> float:
        """The threshold of ``domain`` (``None``: the default) for ``scope``: ``record``
        (every candidate of a record, pi's hits always flagging) or ``rest`` (the candidates
        pi's spans leave in the clear)."""
        return float(self._calibrated(domain, scope)["threshold"])

    def summary(self, domain: str | None = None, scope: str = "record") -> dict:
        """What a manifest records: the threshold, delta_2's bound and where they came from
        (the domain's own calibration where one is named)."""
        block = self._calibrated(domain, scope)
        cal = block.get("calibration") or {}
        # A threshold calibrated on several corpora (the default, for text of unknown kind)
        # states the largest of its per-corpus bounds: the pooled one holds for that mix of
        # corpora only, and a tenant's text is one domain, not the mix.
        per = [v["miss_upper95"] for k, v in (cal.get("per_corpus") or {}).items()
               if k != "pooled" and v.get("miss_upper95") is not None]
        # gamma likewise: the default's is the largest of the domains' own (measured on the
        # same calibration parts, one corpus each) and the pooled one, which it states beside
        own = [g for d in (self.domains() if domain is None and per else ())
               if (g := ((self._block_or_none(d, scope) or {}).get("calibration") or {}).get("gamma")) is not None]
        pooled = cal.get("gamma")
        gamma = max(own + ([pooled] if pooled is not None else [])) if own else pooled
        return {"policy": "calibrated", "scope": scope, "model": self.path, "domain": domain or "any",
                "threshold": float(block["threshold"]),
                "target": cal.get("target"), "confidence": cal.get("confidence"),
                "delta_2": max(per) if per else cal.get("bound"), "delta_2_pooled": cal.get("bound") if per else None,
                "calibration_misses": cal.get("misses"), "calibration_secret_sentences": cal.get("n_secret"),
                "calibration_data": cal.get("data"),
                "gamma": gamma, "gamma_pooled": pooled if own else None,
                "fitted_on": self.meta.get("fit", {}).get("data"),
                "created": block.get("created") or self.meta.get("created")}

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "bias": self.bias, "threshold": self.threshold, "meta": self.meta,
                           "weights": dict(sorted(self.weights.items()))}, indent=1) + "\n"

    def save(self, path: Path) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        tmp.replace(path)


@functools.lru_cache(maxsize=8)
def load_model(path: str | None = None) -> PiCModel:
    """A saved :class:`PiCModel` (the shipped one by default), cached per path."""
    p = Path(path) if path else DEFAULT_MODEL_PATH
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"pi_c.calibration: no calibrated model at {p}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"pi_c.calibration: {p} is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"pi_c.calibration: {p} is not a calibrated pi_c model (format {FORMAT!r})")
    return PiCModel(weights={str(k): float(v) for k, v in d["weights"].items()}, bias=float(d["bias"]),
                    threshold=float(d["threshold"]), meta=d.get("meta") or {},
                    path="(shipped)" if p == DEFAULT_MODEL_PATH else str(p))
