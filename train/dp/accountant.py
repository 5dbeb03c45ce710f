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


def noise_for(target_epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str = "prv") -> float:
    """The smallest noise multiplier that keeps ``steps`` steps within ``target_epsilon``."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=sample_rate,
                                      steps=steps, accountant=accountant, epsilon_tolerance=0.005))
