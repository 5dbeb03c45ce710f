"""A DP run's budget (:func:`plan_budget`: noise for a target, or the epsilon of a given
noise, bounded by :mod:`train.dp.accounting`), group privacy for records, and the CRT
confidentiality bound of SEEDS.md section 6.

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


MAX_EPSILON = 100.0
"""The most epsilon a plan may spend: past it the guarantee protects nothing (e^100)."""


def default_delta(n: int) -> float:
    """At most 1/(10 n) (and 1/n^1.1 where that is smaller, past 10^10 units): a delta near
    1/n allows a mechanism that publishes one unit's data outright (n: the units of the DP
    split)."""
    n = max(1, n)
    return min(0.1 / n, float(n) ** -1.1)


def group_bound(eps: float, delta: float, k: int) -> tuple[float, float]:
    """(eps, delta)-DP for one unit is (k eps, k e^((k-1) eps) delta)-DP for a group of k
    units (Dwork and Roth 2014, Theorem 2.2's group privacy with delta)."""
    if k < 1:
        raise ValueError("a group has at least one unit")
    growth = (k - 1) * eps
    return k * eps, (k * math.exp(growth) * delta if growth < 700 else math.inf)


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
    unit: str = "sequence"
    group: int = 1
    """The most blocks one unit (a record) spans: the accountant's figures are per block,
    the unit's are :func:`group_bound` of them."""

    @property
    def unit_epsilon(self) -> float:
        return group_bound(self.planned_epsilon, self.delta, self.group)[0]

    @property
    def unit_delta(self) -> float:
        return group_bound(self.planned_epsilon, self.delta, self.group)[1]

    def to_dict(self) -> dict:
        d = asdict(self)
        if not math.isfinite(d["planned_epsilon"]):
            d["planned_epsilon"] = None  # dp.no_guarantee with no noise: no figure, and JSON has no inf
        elif self.group > 1:
            d.update(unit_epsilon=self.unit_epsilon, unit_delta=self.unit_delta)
        return d


def plan_budget(dp, n: int, sample_rate: float, steps: int, *, units: int | None = None, group: int = 1) -> Budget:
    """Noise for ``steps`` DP steps at ``sample_rate`` (``Phase.sample_rate``) over ``n``
    blocks, with bounded accounting (:mod:`train.dp.accounting`); a one-line
    :class:`SpecError` when the config would overspend its target, spend more than
    :data:`MAX_EPSILON`, or take a delta above 1/N. ``units`` is N, the number of privacy
    units (``n`` blocks unless ``dp.unit: record``), and ``group`` the most blocks one unit
    spans: the target epsilon and delta are the unit's, met through :func:`group_bound`."""
    from train.dp.accounting import bounded_epsilon, bounded_noise

    if n <= 0:
        raise SpecError("data.split: the DP split has no examples")
    q, k = sample_rate, max(1, group)
    big_n = units if units else n
    if dp.delta is not None and dp.delta > 1.0 / big_n:
        raise SpecError(f"dp.delta: {dp.delta:g} > 1/N = {1.0 / big_n:.3g} for the N = {big_n} units of the DP split: "
                        f"such a delta allows publishing a unit outright; leave it out for {default_delta(big_n):.3g}")
    unit_delta = dp.delta if dp.delta is not None else default_delta(big_n)
    grouped = f" per block, for records of up to {k} blocks" if k > 1 else ""
    if dp.noise_multiplier is not None:
        sigma = dp.noise_multiplier
        accountant = "rdp" if dp.no_guarantee else dp.accountant
        delta = unit_delta / k
        for _ in range(8):  # the block delta that keeps the group's delta within the unit's
            acc = bounded_epsilon(sigma, q, steps, delta, accountant)
            if k == 1 or not math.isfinite(acc.value) or group_bound(acc.value, delta, k)[1] <= unit_delta * (1 + 1e-9):
                break
            # half again below the fixed point: epsilon grows as delta shrinks, so aiming at
            # the point itself would approach it from above forever
            if (k - 1) * acc.value > 600:
                raise SpecError(f"dp.unit: record: records of up to {k} blocks at {acc.value:.3g} epsilon per block "
                                "have no useful group bound; use shorter records (data.seq_len covers more), more "
                                "noise, or dp.unit: sequence")
            delta = 0.5 * unit_delta / (k * math.exp((k - 1) * acc.value))
        else:
            raise SpecError(f"dp.noise_multiplier: no block delta keeps the record's delta within {unit_delta:.3g} "
                            f"for records of up to {k} blocks; add noise or use dp.unit: sequence")
        eps = acc.value
        unit_eps = group_bound(eps, delta, k)[0] if math.isfinite(eps) else eps
        if dp.no_guarantee:
            pass  # no claim is made, so none is refused
        elif not math.isfinite(unit_eps) or unit_eps > MAX_EPSILON:
            raise SpecError(f"dp.noise_multiplier: {sigma} over {steps} steps at sample rate {q:.4g} spends epsilon "
                            f"{unit_eps:.4g}{grouped} > {MAX_EPSILON:g}, a guarantee that protects nothing; add "
                            "noise or take fewer steps (nothing was run)")
        elif dp.target_epsilon is not None and unit_eps > dp.target_epsilon * (1 + 1e-9):
            raise SpecError(f"dp.noise_multiplier: {sigma} over {steps} steps at sample rate {q:.4g} spends "
                            f"epsilon {unit_eps:.3f}{grouped} > dp.target_epsilon {dp.target_epsilon}; nothing was run")
    else:
        block_target = dp.target_epsilon / k
        delta = unit_delta / (k * math.exp((k - 1) * block_target))
        try:
            acc = bounded_noise(block_target, delta, q, steps, dp.accountant)
        except ValueError as exc:
            raise SpecError(f"dp.target_epsilon: {dp.target_epsilon} cannot be met{grouped} ({exc})") from None
        sigma = acc.value
        eps = acc.epsilon  # the search's own figure at that noise: bounded_epsilon's, not accounted again
    if acc.note:
        log.warning("DP plan: %s", acc.note)
    return Budget(sigma, q, steps, delta, acc.accountant, dp.target_epsilon, eps, big_n, acc.note,
                  dp.unit, k)
