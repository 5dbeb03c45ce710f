"""The one-run audit's bound (Steinke, Nasr and Jagielski 2023), against hand-computed and
independently computed answers, and its guesses on scores whose truth is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from train.dp.audit import audit, canaries, epsilon_lower_bound, guess_sizes, p_value


def _p_value_by_hand(m, r, v, eps, delta):
    """The theorem's bound from exact binomial terms (math.comb), term by term."""
    q = math.exp(eps) / (1 + math.exp(eps))
    pmf = [math.comb(r, j) * q**j * (1 - q) ** (r - j) for j in range(r + 1)]
    tail = sum(pmf[v:])
    worst = max((sum(pmf[v - i:v]) / i for i in range(1, v + 1)), default=0.0)
    return min(1.0, tail + 2 * m * delta * worst)


@pytest.mark.parametrize("m,r,v,eps,delta", [(10, 10, 10, 1.0, 0.0), (10, 10, 9, 2.0, 1e-3), (50, 20, 15, 0.5, 1e-4),
                                             (100, 40, 40, 3.0, 1e-5), (8, 4, 0, 1.0, 0.01)])
def test_p_value_is_the_theorem_computed_by_hand(m, r, v, eps, delta):
    assert p_value(m, r, v, eps, delta) == pytest.approx(_p_value_by_hand(m, r, v, eps, delta), rel=1e-9, abs=1e-15)


def test_all_guesses_right_has_a_closed_form():
    """r = v = 10, delta 0: P[Bin(10, q) >= 10] = q^10 = 0.05 at q = 0.05^(1/10), so the
    bound is log(q / (1 - q)) = 1.0519."""
    q = 0.05 ** 0.1
    assert epsilon_lower_bound(10, 10, 10, 0.0) == pytest.approx(math.log(q / (1 - q)), abs=1e-9)
    assert math.log(q / (1 - q)) == pytest.approx(1.0519, abs=1e-4)


def test_the_bound_is_where_the_p_value_crosses_the_confidence():
    m, r, v, delta = 1000, 200, 150, 1e-5
    eps = epsilon_lower_bound(m, r, v, delta)
    assert p_value(m, r, v, eps, delta) < 0.05 <= p_value(m, r, v, eps + 1e-6, delta)
    assert epsilon_lower_bound(m, r, r // 2, delta) == 0.0  # chance: no bound
    # more right guesses, a higher bound; a larger delta, a lower one
    assert epsilon_lower_bound(m, r, 170, delta) > eps > epsilon_lower_bound(m, r, 150, 1e-3)


def test_guesses_on_known_truths():
    rng = np.random.default_rng(1)
    inserted = rng.random(1000) < 0.5
    perfect = audit(inserted + rng.normal(0, 0.01, 1000), inserted, 1e-5)
    assert perfect.correct == perfect.guesses == 500 and perfect.k == 250
    # every guess right over 500 guesses, at 95% / 4 (Bonferroni over the four k)
    assert perfect.epsilon_lower_bound == pytest.approx(epsilon_lower_bound(1000, 500, 500, 1e-5, 1 - 0.05 / 4))
    assert perfect.epsilon_lower_bound > 2  # the bar for a run whose noise is removed
    blind = audit(rng.normal(0, 1, 1000), inserted, 1e-5)
    assert blind.epsilon_lower_bound == 0.0
    assert guess_sizes(1000) == [25, 50, 125, 250] and guess_sizes(8) == [1, 2]


def test_canaries_are_the_seeds_and_about_half_are_inserted():
    a_ids, a_in = canaries(7, 2000, 16, 5, 100)
    b_ids, b_in = canaries(7, 2000, 16, 5, 100)
    c_ids, _ = canaries(8, 2000, 16, 5, 100)
    assert (a_ids == b_ids).all() and (a_in == b_in).all() and not (a_ids == c_ids).all()
    assert a_ids.min() >= 5 and a_ids.max() < 100 and a_ids.shape == (2000, 16)
    assert 900 < a_in.sum() < 1100
