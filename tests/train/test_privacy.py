"""Accounting known answers, from independent expectations (no training)."""

import math

import pytest

from privatize.errors import SpecError
from train.config import DPConfig
from train.dp.accountant import EPSILON_TOLERANCE, epsilon
from train.dp.budget import crt_confidentiality, miss_rate_upper_bound, plan_budget


@pytest.mark.parametrize("sigma", [0.7, 1.0, 2.5])
@pytest.mark.parametrize("alpha", [2, 8, 32.5])
def test_rdp_of_the_gaussian_mechanism_at_sampling_rate_one(sigma, alpha):
    """Without subsampling the Gaussian mechanism's RDP is alpha / (2 sigma^2) per step
    (Mironov 2017, Proposition 7); T steps compose to T times that."""
    from opacus.accountants.analysis.rdp import compute_rdp

    assert compute_rdp(q=1.0, noise_multiplier=sigma, steps=1, orders=[alpha])[0] == pytest.approx(
        alpha / (2 * sigma**2), rel=1e-9)
    assert compute_rdp(q=1.0, noise_multiplier=sigma, steps=5, orders=[alpha])[0] == pytest.approx(
        5 * alpha / (2 * sigma**2), rel=1e-9)


def test_rdp_to_epsilon_at_rate_one_is_the_conversion_of_the_closed_form():
    """epsilon = min over alpha of RDP(alpha) + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha-1)
    (Balle et al. 2020, the conversion Opacus uses), evaluated here on Opacus' own orders."""
    from opacus.accountants import RDPAccountant

    sigma, steps, delta = 2.0, 10, 1e-5
    acc = RDPAccountant()
    acc.history = [(sigma, 1.0, steps)]
    orders = acc.DEFAULT_ALPHAS
    expected = min(steps * a / (2 * sigma**2) + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
                   for a in orders)
    assert acc.get_epsilon(delta) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 500), (0.8, 0.05, 200), (2.0, 0.1, 100)])
def test_rdp_bound_is_at_least_the_prv_estimate(sigma, q, steps):
    """The RDP conversion is an upper bound; PRV accounting is numerically tight."""
    e_rdp = epsilon(sigma, q, steps, 1e-5, "rdp")
    e_prv = epsilon(sigma, q, steps, 1e-5, "prv")
    assert 0 < e_prv <= e_rdp


def test_crt_confidentiality_formula():
    """SEEDS.md section 6: eps' = 1.0, gamma = 0.1 -> log(1 + 0.1 (e - 1)) = 0.158565."""
    e, d = crt_confidentiality(1.0, 1e-5, 0.1, 0.002)
    assert e == pytest.approx(0.158565, abs=5e-7)
    assert d == pytest.approx(0.1 * 1e-5 + 0.002)
    assert crt_confidentiality(1.0, 1e-5, 1.0, 0.0)[0] == pytest.approx(1.0)  # nothing redacted: plain DP
    assert crt_confidentiality(3.0, 1e-5, 0.0, 0.0) == (0.0, 0.0)  # everything redacted: nothing learnt


def test_miss_rate_upper_bound_known_values():
    # no misses among n: the bound solves (1 - p)^n = 0.05
    assert miss_rate_upper_bound(0, 100) == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-9)
    assert miss_rate_upper_bound(5, 5) == 1.0
    assert 0.1 < miss_rate_upper_bound(10, 100) < 0.17  # 10% measured, one-sided 95% bound 0.164


def test_plan_refuses_to_overspend_and_meets_a_target():
    over = DPConfig(noise_multiplier=0.3, target_epsilon=1.0, delta=1e-5)
    with pytest.raises(SpecError, match=r"^dp.noise_multiplier: 0.3 over 100 steps .* > dp.target_epsilon 1.0"):
        plan_budget(over, n=1000, sample_rate=0.01, steps=100)
    b = plan_budget(DPConfig(target_epsilon=2.0, delta=1e-5), n=1000, sample_rate=0.01, steps=100)
    assert b.sample_rate == 0.01 and b.planned_epsilon <= 2.0 and b.planned_epsilon == pytest.approx(2.0, rel=0.01)
    assert epsilon(b.noise_multiplier, 0.01, 100, 1e-5) == pytest.approx(b.planned_epsilon)


# ---- issue 36: an epsilon users can trust ------------------------------------------------

@pytest.mark.parametrize("n,expected", [(6, 1 / 60), (1000, 1e-4), (10**12, 10**-13.2)])
def test_the_default_delta_is_at_most_a_tenth_of_one_over_n(n, expected):
    from train.dp.budget import default_delta

    assert default_delta(n) == pytest.approx(expected, rel=1e-9) and default_delta(n) <= 0.1 / n
    # the red-team's case: 6 blocks in the private split had delta 6^-1.1 = 0.139 > 1/6
    b = plan_budget(DPConfig(noise_multiplier=1.0), n=6, sample_rate=0.5, steps=4)
    assert b.delta == pytest.approx(1 / 60) and b.units == 6


def test_a_delta_above_one_over_n_is_refused():
    with pytest.raises(SpecError, match=r"^dp.delta: 0.02 > 1/N = 0.01 for the N = 100 units"):
        plan_budget(DPConfig(noise_multiplier=1.0, delta=0.02), n=100, sample_rate=0.1, steps=10)
    plan_budget(DPConfig(noise_multiplier=1.0, delta=0.01), n=100, sample_rate=0.1, steps=10)  # 1/N itself


def test_an_epsilon_past_the_cap_is_refused_before_anything_runs():
    """sigma 0.3 with every example in each of 1,000 steps: RDP's epsilon is in the
    thousands (and PRV would have needed gigabytes): refused, naming the field."""
    from train.dp.budget import MAX_EPSILON

    with pytest.raises(SpecError, match=rf"^dp.noise_multiplier: 0.3 over 1000 steps .* > {MAX_EPSILON:g}, "
                                        "a guarantee that protects nothing"):
        plan_budget(DPConfig(noise_multiplier=0.3, accountant="rdp"), n=100, sample_rate=1.0, steps=1000)


@pytest.mark.parametrize("field,value,message", [
    ("poisson", False, "poisson: false is refused"),
    ("noise_multiplier", 0.06, "0.06 is below 0.3"),
    ("noise_multiplier", 0.0, "0.0 is below 0.3"),
    ("target_epsilon", 1000, "less than or equal to 100"),
    ("delta", 0.999, "less than or equal to 0.1"),
])
def test_configs_the_red_team_sent_are_refused_at_the_field(field, value, message):
    from train.config import parse_config

    dp = {"noise_multiplier": 1.0, field: value}
    with pytest.raises(SpecError) as ei:
        parse_config({"version": 1, "kind": "dp", "dp": dp})
    assert f"dp.{field}" in str(ei.value) or "dp: " in str(ei.value)
    assert message in str(ei.value)


def test_prv_runs_within_its_budget_or_gives_way_to_rdp():
    """The oracle: within its budget the bounded PRV is Opacus' PRV, in process. Past it (1
    GiB where sigma 0.5 with every example in each step needs about 8), the plan keeps RDP's
    bound, names it, and says why; the parent's memory never held PRV's grid."""
    import resource

    from train.dp.accounting import bounded_epsilon

    from train.dp import accounting

    ok = bounded_epsilon(1.0, 0.1, 50, 1e-5, "prv")  # a small grid: in process
    assert ok.accountant == "prv" and ok.note is None
    assert ok.value == pytest.approx(epsilon(1.0, 0.1, 50, 1e-5, "prv"), rel=1e-9)
    assert accounting.prv_grid_points(1.0, 0.1, 50, 1e-5) < accounting.IN_PROCESS_POINTS
    # the same in the child (a grid made to look large): the same figure
    assert accounting.prv_grid_points(0.5, 1.0, 1000, 1e-5) > 4e7  # about 8 GB, measured
    child = accounting._prv_in_child({"op": "epsilon", "sigma": 1.0, "q": 0.1, "steps": 50, "delta": 1e-5},
                                     1 << 30, 60)
    assert child == (pytest.approx(ok.value, rel=1e-9), None, None)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    big = bounded_epsilon(0.5, 1.0, 1000, 1e-5, "prv", memory_bytes=1 << 30)
    assert big.accountant == "rdp" and big.note.startswith("PRV needed over 1 GiB")
    assert big.value == epsilon(0.5, 1.0, 1000, 1e-5, "rdp") and big.value > 100
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 << 10  # KiB: under 200 MB grew


def test_no_guarantee_runs_without_noise_and_claims_nothing():
    from train.config import parse_config

    cfg = parse_config({"version": 1, "kind": "dp", "dp": {"noise_multiplier": 0.0, "no_guarantee": True}})
    b = plan_budget(cfg.dp, n=100, sample_rate=0.1, steps=10)
    assert b.noise_multiplier == 0 and b.to_dict()["planned_epsilon"] is None
    with pytest.raises(SpecError, match="no_guarantee: a run without a guarantee has no target_epsilon"):
        parse_config({"version": 1, "kind": "dp", "dp": {"target_epsilon": 1, "no_guarantee": True}})
    with pytest.raises(SpecError, match="dp.no_guarantee: kind crt reports a confidentiality bound"):
        parse_config({"version": 1, "kind": "crt", "dp": {"noise_multiplier": 0.0, "no_guarantee": True}})


def test_group_bound_by_hand_and_a_record_plan_meets_its_target():
    from train.dp.budget import default_delta, group_bound

    assert group_bound(0.5, 1e-6, 3) == pytest.approx((1.5, 3 * math.e * 1e-6))
    assert group_bound(0.7, 1e-5, 1) == (0.7, 1e-5)
    b = plan_budget(DPConfig(target_epsilon=3.0, unit="record", accountant="rdp"), n=1200, sample_rate=0.02,
                    steps=200, units=400, group=3)
    assert b.group == 3 and b.units == 400 and b.unit == "record"
    assert b.unit_epsilon <= 3.0 and b.unit_epsilon == pytest.approx(3.0, rel=0.02)
    assert b.unit_delta <= default_delta(400) * (1 + 1e-9) and b.delta < default_delta(400)
    # a given noise: the block delta shrinks until the group's delta is within the unit's
    g = plan_budget(DPConfig(noise_multiplier=1.0, unit="record", accountant="rdp"), n=1200, sample_rate=0.02,
                    steps=200, units=400, group=3)
    assert g.unit_delta <= default_delta(400) * (1 + 1e-9)
    assert g.unit_epsilon == pytest.approx(3 * epsilon(1.0, 0.02, 200, g.delta, "rdp"))


def test_records_too_long_for_group_privacy_are_refused():
    """A story of 244 blocks: group privacy multiplies delta by e^(243 eps): no bound is
    left, and the plan says so instead of overflowing."""
    with pytest.raises(SpecError, match=r"^dp.unit: record: records of up to 244 blocks .* no useful group bound"):
        plan_budget(DPConfig(noise_multiplier=1.2, unit="record", accountant="rdp"), n=1000, sample_rate=0.05,
                    steps=100, units=4, group=244)


def test_crt_figures_carry_their_origin():
    """Issue 36: gamma and delta_2 could come from the tenant's config with no provenance,
    and gamma: 0 printed a (0, 0) guarantee. A typed figure needs its source and is
    labelled claimed; a manifest's is labelled measured, with the manifest's source."""
    from types import SimpleNamespace

    from train.config import parse_config
    from train.run import _crt_inputs

    base = {"version": 1, "kind": "crt", "dp": {"noise_multiplier": 1.0}}
    with pytest.raises(SpecError, match="crt: a gamma or delta_2 given in the config needs its source"):
        parse_config({**base, "crt": {"gamma": 0.0, "delta_2": 0.0}})
    cfg = parse_config({**base, "crt": {"gamma": 0.0, "source": "hand-typed"}})
    g, d2, prov = _crt_inputs(SimpleNamespace(config=cfg, manifest={"quality": {"gamma": 0.2, "delta_2": 0.01,
                                                                                 "source": "gold, 2026-11"}}))
    assert (g, d2) == (0.0, 0.01)
    assert prov == {"gamma": {"origin": "claimed in the training config", "source": "hand-typed"},
                    "delta_2": {"origin": "measured: the privatization manifest's quality", "source": "gold, 2026-11"}}


@pytest.mark.parametrize("accountant, target, delta, q, steps", [
    ("rdp", 2.0, 1e-5, 0.06, 25), ("rdp", 8.0, 1e-6, 0.004, 2500), ("rdp", 0.5, 1e-5, 0.1, 100),
    ("rdp", 50.0, 1e-5, 0.5, 10), ("prv", 3.0, 2.5e-4, 0.04, 25)])
def test_the_noise_search_meets_opacus_contract_in_fewer_evaluations(accountant, target, delta, q, steps,
                                                                    monkeypatch):
    """Opacus' ``get_noise_multiplier`` is the oracle: both noises keep epsilon within the
    target and at most the tolerance below it, so the two epsilons are within the tolerance
    of each other; ours asks the accountant for fewer epsilons (bisection from [0, 20] there)."""
    from opacus.accountants import RDPAccountant, PRVAccountant
    from opacus.accountants.utils import get_noise_multiplier

    from train.dp.accountant import noise_for

    calls = {"n": 0}
    cls = RDPAccountant if accountant == "rdp" else PRVAccountant
    real = cls.get_epsilon

    def counted(self, *a, **k):
        calls["n"] += 1
        return real(self, *a, **k)

    monkeypatch.setattr(cls, "get_epsilon", counted)
    theirs = get_noise_multiplier(target_epsilon=target, target_delta=delta, sample_rate=q, steps=steps,
                                  accountant=accountant, epsilon_tolerance=EPSILON_TOLERANCE)
    n_theirs, calls["n"] = calls["n"], 0
    ours = noise_for(target, delta, q, steps, accountant)
    n_ours = calls["n"]
    e_ours, e_theirs = (epsilon(s, q, steps, delta, accountant) for s in (ours, theirs))
    assert target - EPSILON_TOLERANCE <= e_ours <= target and target - EPSILON_TOLERANCE <= e_theirs <= target
    assert ours == pytest.approx(theirs, rel=0.01)
    assert n_ours < n_theirs, (n_ours, n_theirs)


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_the_plan_takes_the_searchs_epsilon_which_is_the_accountants_at_its_noise(accountant, monkeypatch):
    """The oracle: the epsilon the target search returns with its noise is what Opacus'
    accountant gives at that noise (``epsilon``, a fresh accountant; the bounded form is the
    same figure within its budget: test_prv_runs_within_its_budget_or_gives_way_to_rdp), and
    a target plan reports it without accounting the noise again (``bounded_epsilon`` is not
    called)."""
    from train.config import parse_config
    from train.dp import accounting
    from train.dp.accounting import bounded_noise

    q, steps, delta = 0.04, 25, 2.5e-4
    acc = bounded_noise(2.0, delta, q, steps, accountant)
    assert acc.accountant == accountant and acc.epsilon is not None
    assert acc.epsilon == epsilon(acc.value, q, steps, delta, accountant)  # exactly: the same computation
    assert 2.0 - EPSILON_TOLERANCE <= acc.epsilon <= 2.0
    cfg = parse_config({"version": 1, "kind": "dp", "dp": {"target_epsilon": 2.0, "accountant": accountant,
                                                           "delta": delta}})
    asked = []
    monkeypatch.setattr(accounting, "bounded_noise", lambda *a, **k: asked.append(a) or acc)
    monkeypatch.setattr(accounting, "bounded_epsilon", lambda *a, **k: pytest.fail("accounted the noise again"))
    b = plan_budget(cfg.dp, n=625, sample_rate=q, steps=steps)
    assert asked == [(2.0, delta, q, steps, accountant)]
    assert (b.noise_multiplier, b.planned_epsilon, b.accountant) == (acc.value, acc.epsilon, accountant)


def test_the_bounded_prv_child_answers_the_noise_and_its_epsilon():
    """The PRV child (a grid too large for the parent) answers the noise and the epsilon its
    search computed there, which is Opacus' PRV figure at that noise."""
    from train.dp import accounting

    q, steps, delta = 0.04, 25, 2.5e-4
    value, why, eps = accounting._prv_in_child({"op": "noise", "target": 2.0, "q": q, "steps": steps,
                                                "delta": delta, "start": 1.0, "floor": 0.5}, 1 << 30, 120)
    assert why is None and 2.0 - EPSILON_TOLERANCE <= eps <= 2.0
    assert eps == epsilon(value, q, steps, delta, "prv")


def test_the_noise_search_stops_at_its_floor_and_refuses_an_impossible_target():
    from train.dp.accountant import noise_for

    # at epsilon 50 a noise of 2 is far within the target: the floor is the answer
    assert noise_for(50.0, 1e-5, 0.01, 10, "rdp", start=4.0, floor=2.0) == 2.0
    with pytest.raises(ValueError, match="too low"):
        noise_for(1e-9, 1e-5, 1.0, 10**6, "rdp")
