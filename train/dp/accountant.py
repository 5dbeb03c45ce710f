"""Opacus' accountants on Poisson-sampled Gaussian mechanisms, unbounded (the bottom of
:mod:`train.dp.engine`): (noise multiplier, sample rate, steps) <-> epsilon at a delta, with the
``prv`` or ``rdp`` accountant, for one mechanism or a joint history. What planning and the
ledger call goes through :mod:`train.dp.accounting`, which bounds PRV's memory and time."""

from __future__ import annotations

import math


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


def composed_epsilon(history: list[tuple[float, float, int]], delta: float, accountant: str = "prv") -> float:
    """Epsilon at ``delta`` of the mechanisms of ``history`` ((noise multiplier, sample
    rate, steps) each) composed: what the data they all ran on has spent."""
    history = [(s, q, t) for s, q, t in history if t > 0]
    if not history:
        return 0.0
    if any(s <= 0 for s, _, _ in history):
        return math.inf
    acc = make_accountant(accountant)
    acc.history = list(history)
    return float(acc.get_epsilon(delta=delta))


EPSILON_TOLERANCE = 0.005
"""How far below its target the noise search may leave epsilon (Opacus' search, tighter)."""
MAX_NOISE = 1e6


def noise_for(target_epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str = "prv", *,
              start: float = 1.0, floor: float = 0.0, tolerance: float = EPSILON_TOLERANCE) -> float:
    """The smallest noise multiplier that keeps ``steps`` steps within ``target_epsilon``
    (:func:`noise_and_epsilon`'s noise)."""
    return noise_and_epsilon(target_epsilon, delta, sample_rate, steps, accountant, start=start, floor=floor,
                             tolerance=tolerance)[0]


def noise_and_epsilon(target_epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str = "prv",
                      *, start: float = 1.0, floor: float = 0.0,
                      tolerance: float = EPSILON_TOLERANCE) -> tuple[float, float]:
    """(noise, epsilon): the smallest noise multiplier that keeps ``steps`` steps within
    ``target_epsilon``, and the epsilon the search computed at it (what :func:`epsilon`
    gives for that noise, so a planner need not account it again):
    a noise whose epsilon is at most the target and within ``tolerance`` of it (Opacus'
    ``get_noise_multiplier`` contract), or ``floor`` when even that noise stays within it.

    The search brackets the answer from ``start`` (doubling or halving) and then narrows the
    bracket by false position on log epsilon against log noise (Illinois' rule), where the
    curve is nearly straight: about 8 epsilon evaluations where Opacus' bisection from [0, 20]
    takes 20-40 (each RDP one about 90 ms, each PRV one 200 ms). A ValueError when no noise
    up to 1e6 meets the target."""
    acc = make_accountant(accountant)

    def eps(sigma: float) -> float:
        acc.history = [(sigma, sample_rate, steps)]
        e = float(acc.get_epsilon(delta=delta))
        return e if e == e else math.inf  # NaN: no bound, as too little noise

    hi = max(start, floor) if start > 0 else 1.0
    e_hi, lo, e_lo = eps(hi), None, math.inf
    while not e_hi <= target_epsilon:
        lo, e_lo, hi = hi, e_hi, hi * 2
        if hi > MAX_NOISE:
            raise ValueError("The privacy budget is too low.")
        e_hi = eps(hi)
    while lo is None:  # hi is within the target: halve until a noise is not
        if hi <= floor:
            return hi, e_hi
        s = max(hi / 2, floor)
        e = eps(s)
        if e <= target_epsilon:
            hi, e_hi = s, e
        else:
            lo, e_lo = s, e
    w_lo = w_hi = 1.0  # Illinois' weights: an end kept twice in a row counts half
    last = 0
    while target_epsilon - e_hi > tolerance and hi - lo > 1e-12 * hi:
        f_lo = math.log(e_lo / target_epsilon) if math.isfinite(e_lo) else math.inf
        f_hi = math.log(max(e_hi, 1e-300) / target_epsilon)
        if math.isfinite(f_lo) and f_lo > 0 > f_hi:
            a, b = w_lo * f_lo, w_hi * f_hi
            x = math.log(lo) + (math.log(hi) - math.log(lo)) * a / (a - b)
            s = min(max(math.exp(x), lo + 0.01 * (hi - lo)), hi - 0.01 * (hi - lo))
        else:
            s = (lo + hi) / 2
        e = eps(s)
        if e <= target_epsilon:
            hi, e_hi = s, e
            w_lo, w_hi = (w_lo / 2 if last == 1 else 1.0), 1.0
            last = 1
        else:
            lo, e_lo = s, e
            w_hi, w_lo = (w_hi / 2 if last == -1 else 1.0), 1.0
            last = -1
    return hi, e_hi
