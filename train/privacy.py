"""Privacy accounting for DP-SGD and CRT (Opacus' accountants), and the CRT
confidentiality bound of SEEDS.md section 6.

* :func:`epsilon` / :func:`noise_for`: (noise multiplier, sample rate, steps) <-> epsilon
  at a delta, with the ``prv`` or ``rdp`` accountant.
* :func:`crt_confidentiality`: if DP-SGD is (eps, delta)-DP, policy pi misses a share
  gamma of secrets and pi_c misses delta_2, the model is
  (log(1 + gamma (e^eps - 1)), gamma delta + delta_2)-Bayesian confidential.
* :func:`miss_rate_upper_bound`: a one-sided Clopper-Pearson upper bound on a miss rate
  measured on gold data (what gamma and delta_2 should be).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass

from privatize.errors import SpecError

log = logging.getLogger(__name__)


def make_accountant(name: str):
    from opacus.accountants import create_accountant

    return create_accountant(mechanism=name)


def epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float, accountant: str = "prv") -> float:
    """Epsilon after ``steps`` Poisson-sampled Gaussian steps (0 steps: 0; zero noise: inf)."""
    if steps <= 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    acc = make_accountant(accountant)
    acc.history = [(noise_multiplier, sample_rate, steps)]
    return float(acc.get_epsilon(delta=delta))


def noise_for(target_epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str = "prv") -> float:
    """The smallest noise multiplier that keeps ``steps`` steps within ``target_epsilon``."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=sample_rate,
                                      steps=steps, accountant=accountant, epsilon_tolerance=0.005))


MAX_EPSILON = 100.0
"""The most epsilon a plan may spend: past it the guarantee protects nothing (e^100)."""


def default_delta(n: int) -> float:
    """At most 1/(10 n) (and 1/n^1.1 where that is smaller, past 10^10 units): a delta near
    1/n allows a mechanism that publishes one unit's data outright (n: the units of the DP
    split)."""
    n = max(1, n)
    return min(0.1 / n, float(n) ** -1.1)


def crt_confidentiality(eps: float, delta: float, gamma: float, delta_2: float) -> tuple[float, float]:
    """(epsilon, delta) of Bayesian confidentiality for CRT (paper 004)."""
    if not (0 <= gamma <= 1 and 0 <= delta_2 <= 1):
        raise ValueError("gamma and delta_2 are shares in [0, 1]")
    e = math.inf if math.isinf(eps) else math.log1p(gamma * math.expm1(eps))
    return e, gamma * delta + delta_2


def miss_rate_upper_bound(misses: int, total: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on a binomial miss rate."""
    from scipy.stats import beta

    if total <= 0:
        raise ValueError("no gold items")
    if misses >= total:
        return 1.0
    return float(beta.ppf(confidence, misses + 1, total - misses))


@dataclass(frozen=True)
class Budget:
    """What a DP (or CRT private-phase) plan spends. ``accountant`` is the accountant whose
    figures the plan used (RDP where PRV would pass its budget: ``note`` says so)."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float
    accountant: str
    target_epsilon: float | None
    planned_epsilon: float
    units: int = 0
    note: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        if not math.isfinite(d["planned_epsilon"]):
            d["planned_epsilon"] = None  # dp.no_guarantee with no noise: no figure, and JSON has no inf
        return d


def plan_budget(dp, n: int, sample_rate: float, steps: int) -> Budget:
    """Noise for ``steps`` DP steps at ``sample_rate`` (``Phase.sample_rate``) over ``n``
    units, with bounded accounting (:mod:`train.accounting`); a one-line
    :class:`SpecError` when the config would overspend its target, spend more than
    :data:`MAX_EPSILON`, or take a delta above 1/n."""
    from train.accounting import bounded_epsilon, bounded_noise

    if n <= 0:
        raise SpecError("data.split: the DP split has no examples")
    q = sample_rate
    if dp.delta is not None and dp.delta > 1.0 / n:
        raise SpecError(f"dp.delta: {dp.delta:g} > 1/N = {1.0 / n:.3g} for the N = {n} units of the DP split: "
                        f"such a delta allows publishing a unit outright; leave it out for {default_delta(n):.3g}")
    delta = dp.delta if dp.delta is not None else default_delta(n)
    if dp.noise_multiplier is not None:
        sigma = dp.noise_multiplier
        acc = bounded_epsilon(sigma, q, steps, delta, "rdp" if dp.no_guarantee else dp.accountant)
        eps = acc.value
        if dp.no_guarantee:
            pass  # no claim is made, so none is refused
        elif not math.isfinite(eps) or eps > MAX_EPSILON:
            raise SpecError(f"dp.noise_multiplier: {sigma} over {steps} steps at sample rate {q:.4g} spends epsilon "
                            f"{eps:.4g} > {MAX_EPSILON:g}, a guarantee that protects nothing; add noise or take "
                            "fewer steps (nothing was run)")
        if dp.target_epsilon is not None and eps > dp.target_epsilon * (1 + 1e-9):
            raise SpecError(f"dp.noise_multiplier: {sigma} over {steps} steps at sample rate {q:.4g} spends "
                            f"epsilon {eps:.3f} > dp.target_epsilon {dp.target_epsilon}; nothing was run")
    else:
        try:
            acc = bounded_noise(dp.target_epsilon, delta, q, steps, dp.accountant)
        except ValueError as exc:
            raise SpecError(f"dp.target_epsilon: {dp.target_epsilon} cannot be met ({exc})") from None
        sigma = acc.value
        eps = bounded_epsilon(sigma, q, steps, delta, acc.accountant).value
    if acc.note:
        log.warning("DP plan: %s", acc.note)
    return Budget(sigma, q, steps, delta, acc.accountant, dp.target_epsilon, eps, n, acc.note)
