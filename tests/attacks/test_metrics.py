import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from attacks.metrics import (auc, exposure, extrapolated_exposure, rank_of, roc_curve, roc_result, span_perplexity,
                             tpr_at_fpr, zlib_entropy, zlib_ratio)


def test_roc_and_auc_of_a_hand_ranked_case():
    members, non_members = [3, 4, 5], [1, 2, 4]
    fpr, tpr, thr = roc_curve(members, non_members)
    # by hand: thresholds inf, 5, 4, 3, 2, 1; the tie at 4 is one diagonal step
    assert thr[0] == np.inf and thr[1:].tolist() == [5, 4, 3, 2, 1]
    assert np.allclose(fpr, [0, 0, 1 / 3, 1 / 3, 2 / 3, 1])
    assert np.allclose(tpr, [0, 1 / 3, 2 / 3, 1, 1, 1])
    # pairs: 3 beats 1, 2 (2); 4 beats 1, 2 and ties 4 (2.5); 5 beats all (3) -> 7.5 / 9
    assert auc(members, non_members) == pytest.approx(7.5 / 9)
    assert np.trapezoid(tpr, fpr) == pytest.approx(7.5 / 9)


def test_auc_extremes():
    assert auc([2, 3], [0, 1]) == 1.0
    assert auc([0, 1], [2, 3]) == 0.0
    assert auc([1, 1], [1, 1, 1]) == 0.5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=25), st.lists(st.integers(0, 6), min_size=1, max_size=25))
def test_auc_is_the_pair_count_and_the_area_under_the_curve(members, non_members):
    pairs = sum((a > b) + 0.5 * (a == b) for a in members for b in non_members) / (len(members) * len(non_members))
    fpr, tpr, _ = roc_curve(members, non_members)
    assert auc(members, non_members) == pytest.approx(pairs)
    assert np.trapezoid(tpr, fpr) == pytest.approx(pairs)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0, 0, 1, 1)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    assert len(fpr) == len(set(members) | set(non_members)) + 1


def test_tpr_at_fixed_fpr_by_hand():
    members = [10, 9, 8, 3]
    non_members = [9.5, 7, 6, 5, 4, 2, 1, 0, -1, -2]
    # FPR <= 10%: one non-member (9.5) may score above the threshold; the lowest such
    # threshold is 8 (t = 7 would let 7 in too): members 10, 9, 8 -> TPR 3/4
    r = tpr_at_fpr(members, non_members, 0.10)
    assert (r.tpr, r.fpr, r.threshold, r.negatives, r.max_fpr) == (0.75, 0.10, 8.0, 10, 0.10)
    # FPR 0: only t > 9.5 -> member 10 alone
    r = tpr_at_fpr(members, non_members, 0.05)
    assert (r.tpr, r.fpr, r.threshold) == (0.25, 0.0, 10.0)
    # no member above every non-member: only "reject all" has FPR 0
    r = tpr_at_fpr([1, 2], [3, 0], 0.0)
    assert (r.tpr, r.fpr, r.threshold) == (0.0, 0.0, None)


def test_roc_result_thins_the_curve_but_keeps_ends_and_figures():
    rng = np.random.default_rng(0)
    m, n = rng.normal(0.5, 1, 3000), rng.normal(0, 1, 3000)
    r = roc_result("loss", m, n, max_points=300)
    assert r.score == "loss" and len(r.fpr) == len(r.tpr) <= 300
    assert (r.fpr[0], r.tpr[0], r.fpr[-1], r.tpr[-1]) == (0, 0, 1, 1)
    assert np.all(np.diff(r.fpr) >= 0) and np.all(np.diff(r.tpr) >= 0)
    assert r.auc == pytest.approx(auc(m, n))
    assert np.trapezoid(r.tpr, r.fpr) == pytest.approx(r.auc, abs=0.01)
    assert [t.max_fpr for t in r.tpr_at] == [0.01, 0.001]
    assert r.tpr_at[0] == tpr_at_fpr(m, n, 0.01)
    assert min(x for x in r.fpr if x > 0) <= 0.002  # the low-FPR corner survives thinning


def test_roc_refuses_empty_and_nan():
    with pytest.raises(ValueError):
        auc([], [1.0])
    with pytest.raises(ValueError):
        roc_curve([float("nan")], [1.0])


def test_exposure_known_values():
    assert round(exposure(1, 10**6), 2) == 19.93
    assert exposure(10**6, 10**6) == 0.0
    assert exposure(4, 1024) == pytest.approx(8.0)
    for bad in ((0, 10), (11, 10), (1.5, 10)):
        with pytest.raises(ValueError):
            exposure(*bad)


def test_rank_ties_count_for_the_secret():
    assert rank_of(5.0, [5.0, 3.0, 5.0, 7.0]) == 2  # only 7 is strictly higher
    assert rank_of(9.0, [1.0, 2.0]) == 1
    assert rank_of(0.0, [1.0, 2.0, 3.0]) == 4
    with pytest.raises(ValueError):
        rank_of(float("nan"), [1.0])


def test_extrapolated_exposure_agrees_with_exact_on_a_skew_normal_population():
    rng = np.random.default_rng(7)
    population = stats.skewnorm.rvs(4.0, loc=-40.0, scale=6.0, size=200_000, random_state=rng)
    sample = rng.choice(population, size=5000, replace=False)
    order = np.sort(population)[::-1]
    for rank in (20, 2000):
        secret = order[rank - 1]
        exact = exposure(rank_of(secret, population), population.size)
        assert exact == pytest.approx(math.log2(population.size / rank))
        assert abs(extrapolated_exposure(secret, sample, population.size) - exact) < 1.0
    # clipped to [0, log2 |R|]
    assert extrapolated_exposure(order[0] + 100, sample, population.size) == pytest.approx(math.log2(200_000))
    assert extrapolated_exposure(order[-1] - 100, sample, population.size) == pytest.approx(0.0, abs=1e-9)


def test_zlib_filter_drops_repetition_keeps_prose():
    chapters = ", ".join(f"Chapter {i}" for i in range(12, 60))
    prose = ("Homarus gammarus is a large crustacean, with a body length up to 60 centimetres and weighing "
             "up to 5 or 6 kilograms, although the lobsters caught in lobster pots are usually 23 to 38 cm long.")
    assert zlib_ratio(chapters) < 0.275 < zlib_ratio(prose)
    # digits mapped to 0 make number runs look as repetitive as they are
    years = " ".join(str(y) for y in range(1901, 1941))
    assert zlib_ratio(years) < 0.275 < zlib_ratio(years, map_digits=False)
    assert zlib_entropy("abc") == len(__import__("zlib").compress(b"abc"))
    with pytest.raises(ValueError):
        zlib_ratio("")


def test_span_perplexity_splits_tokens_by_overlap_by_hand():
    """Text 0 has tokens [0,2) [2,5) [5,8) with log-probabilities -1, -3, -2 and a span
    [3,4): only the middle token overlaps it. Text 1 has tokens [0,4) [4,6), a span [4,4)
    (empty: no token) and one [6,9) (touching the last token's end: none). So outside =
    exp((1 + 2 + 0.5 + 1.5) / 4), inside = exp(3 / 1)."""
    lp = [np.array([-1.0, -3.0, -2.0]), np.array([-0.5, -1.5])]
    off = [np.array([[0, 2], [2, 5], [5, 8]]), np.array([[0, 4], [4, 6]])]
    r = span_perplexity(lp, off, [[(3, 4)], [(4, 4), (6, 9)]])
    assert r.outside == pytest.approx(math.exp(5.0 / 4)) and r.inside == pytest.approx(math.exp(3.0))
    assert (r.inside_tokens, r.tokens) == (1, 5)
    none = span_perplexity(lp, off, [[], []])
    assert none.inside is None and none.outside == pytest.approx(math.exp(8.0 / 5))
    with pytest.raises(ValueError, match="every token overlaps a span"):
        span_perplexity(lp[:1], off[:1], [[(0, 8)]])
