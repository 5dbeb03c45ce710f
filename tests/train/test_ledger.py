"""Issue 52: the privacy ledger's composition (``train.dp.ledger``) against Opacus' own
accountants on the joint history, built by hand; and the plan made before admission
(``train.admission``) against the run's own planning."""

from __future__ import annotations

import math

import pytest

from train.dp.ledger import Spend, compose
from train.dp.accountant import composed_epsilon, epsilon
from train.dp.budget import group_bound

TWO = [Spend(1.1, 0.02, 400, 1e-5), Spend(0.9, 0.05, 150, 2e-5)]


def test_the_ledger_is_opacus_prv_on_the_joint_history():
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = [(1.1, 0.02, 400), (0.9, 0.05, 150)]
    by_hand = acc.get_epsilon(delta=1e-5)  # the smaller of the two deltas
    got = compose(TWO)
    assert got.accountant == "prv" and got.delta == 1e-5 and got.unit == "sequence" and got.trainings == 2
    assert got.epsilon == pytest.approx(by_hand, abs=1e-3)
    alone = [epsilon(1.1, 0.02, 400, 1e-5), epsilon(0.9, 0.05, 150, 1e-5)]
    # composing is never less than either training alone and never more than the sum
    assert max(alone) < got.epsilon < sum(alone)


def test_rdp_composes_the_same_history_and_bounds_prv_from_above():
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(1.1, 0.02, 400), (0.9, 0.05, 150)]
    got = compose(TWO, accountant="rdp")
    assert got.accountant == "rdp" and got.epsilon == pytest.approx(acc.get_epsilon(delta=1e-5), abs=1e-9)
    assert got.epsilon > compose(TWO).epsilon


def test_steps_not_taken_spend_nothing_and_one_training_is_its_own_epsilon():
    one = compose([Spend(1.0, 0.01, 500, 1e-5)])
    assert one.epsilon == pytest.approx(epsilon(1.0, 0.01, 500, 1e-5), abs=1e-6)
    assert compose([Spend(1.0, 0.01, 500, 1e-5), Spend(1.0, 0.01, 0, 1e-5)]).epsilon == pytest.approx(one.epsilon)
    assert compose([]).epsilon == 0.0 and composed_epsilon([], 1e-5) == 0.0


def test_records_compose_per_block_then_as_a_group():
    """Records of up to k blocks: the per-block mechanisms compose, then group privacy over
    the longest record, with a block delta that keeps the group's delta within the unit's."""
    spends = [Spend(2.0, 0.02, 300, 1e-6, "record", 3, 5e-6), Spend(2.0, 0.02, 300, 1e-6, "record", 2, 1e-5)]
    got = compose(spends)
    assert got.unit == "record" and got.delta == 5e-6
    # reproduce: a block delta d with k e^((k-1) e_b(d)) d <= 5e-6, e = k e_b(d)
    block = got.epsilon / 3
    d = 5e-6 / 3
    for _ in range(8):
        e_b = composed_epsilon([(2.0, 0.02, 300), (2.0, 0.02, 300)], d)
        if group_bound(e_b, d, 3)[1] <= 5e-6 * (1 + 1e-9):
            break
        d = 0.5 * 5e-6 / (3 * math.exp(2 * e_b))
    assert block == pytest.approx(e_b, abs=1e-9)
    assert group_bound(e_b, d, 3)[1] <= 5e-6 * (1 + 1e-9)


def test_no_guarantee_and_mixed_units_are_stated_never_a_number():
    plain = compose([TWO[0], Spend(None, 0.0, 0, 0.0)])
    assert plain.epsilon is None and plain.guarantee == "none" and "without DP" in plain.note
    mixed = compose([TWO[0], Spend(1.0, 0.01, 100, 1e-5, "individual")])
    assert mixed.epsilon is None and mixed.unit == "mixed" and "individual" in mixed.note


def test_a_composition_past_prvs_budget_keeps_rdps_joint_bound():
    """PRV's grid for a tiny noise passes the memory budget: the figure is RDP's joint
    bound (an upper bound), said in the note, never the looser sum."""
    from train.dp.accounting import bounded_composition

    got = bounded_composition([(0.6, 0.5, 2000), (0.7, 0.5, 2000)], 1e-5, memory_bytes=1 << 20, seconds=60)
    assert got.accountant == "rdp" and "RDP" in got.note
    assert got.value == pytest.approx(composed_epsilon([(0.6, 0.5, 2000), (0.7, 0.5, 2000)], 1e-5, "rdp"))


def test_the_admission_plan_is_the_runs_own(tmp_path, train_ray):
    """Equivalence oracle: the plan made in process before admission (no Ray) is the
    mechanism the run plans with Ray Data, for the sequence and record units."""
    import json

    from train.admission import plan_offline
    from train.config import parse_config
    from train.run import _stage, prepare

    docs = tmp_path / "docs.jsonl"
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    docs.write_text("".join(json.dumps({"text": " ".join(words[(i + j) % 10] for j in range(5 + i % 40))}) + "\n"
                            for i in range(300)))
    for unit in ("sequence", "record"):
        cfg = parse_config({"version": 1, "kind": "dp", "data": {"path": str(docs), "seq_len": 32},
                            "model": {"preset": "tiny"}, "optim": {"batch_size": 8, "epochs": 2},
                            "dp": {"target_epsilon": 4.0, "unit": unit, "accountant": "rdp"}})
        admitted = plan_offline(cfg)
        p = prepare(cfg.with_paths(output=str(tmp_path / f"run-{unit}")))
        _, _, plan, _ = _stage(p, False, {})
        ran = plan.budget.to_dict()
        # the mechanism is the run's; the block count may differ by the padded tail of a
        # batch where Ray Data cuts the file into more blocks (the admitted plan then fixes
        # the sample rate: train.planning.admitted_phase)
        mechanism = ("noise_multiplier", "sample_rate", "steps", "unit", "group", "accountant", "target_epsilon")
        assert {k: admitted[k] for k in mechanism} == {k: ran[k] for k in mechanism}, unit
        assert abs(admitted["units"] - ran["units"]) <= max(1, ran["units"] // 100)
        assert admitted["unit"] == unit and (admitted["group"] > 1) == (unit == "record")
    # CRT: the private split's DP phase, after plain steps on the public split
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = tmp_path / "crt" / "shards"
    shards.mkdir(parents=True)
    texts = [json.loads(x)["text"] for x in docs.read_text().splitlines()]
    pq.write_table(pa.table({"text": texts, "private": [i % 3 == 0 for i in range(len(texts))]}),
                   shards / "part-0.parquet")
    cfg = parse_config({"version": 1, "kind": "crt", "data": {"path": str(tmp_path / "crt"), "seq_len": 32},
                        "model": {"preset": "tiny"}, "optim": {"batch_size": 8, "epochs": 2},
                        "dp": {"target_epsilon": 3.0, "accountant": "rdp"},
                        "crt": {"gamma": 0.05, "delta_2": 0.01, "source": "a test"}})
    admitted = plan_offline(cfg)
    _, data, plan, _ = _stage(prepare(cfg.with_paths(output=str(tmp_path / "run-crt"))), False, {})
    ran = plan.budget.to_dict()
    assert {k: admitted[k] for k in mechanism} == {k: ran[k] for k in mechanism}
    assert abs(admitted["units"] - data["private"][1]) <= 1 and admitted["units"] < data["public"][1]
