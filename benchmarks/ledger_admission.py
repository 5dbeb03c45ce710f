"""What admission's DP plan costs (issue 52): the service plans a DP training before it
admits it against its data's privacy ledger, with the run's own planning in process and
without Ray (``train.admission.plan_offline``). Baseline in the same run: the driver's own
staging of the same config on the same data (``train.run._stage``: tokenizer, Ray Data
packing, the same plan), which every run pays anyway; and the ledger's composition of
several trainings (``train.dp.ledger.compose``, PRV over the joint history).

Data: the shipped CustomerSim dialogues (``privatize/data/customersim``), or ``--docs N`` of
them; kind dp on the ``tiny`` preset, target epsilon 3, PRV (the service's default).

    .venv/bin/python benchmarks/ledger_admission.py [--docs 400] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, save_result, timed  # noqa: E402  (puts the project on sys.path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import ray

    from train.admission import plan_offline
    from train.config import parse_config
    from train.dp.ledger import Spend, compose
    from train.run import _stage, prepare

    src = ROOT / "privatize" / "data" / "customersim" / "train.jsonl.gz"
    rows = [json.loads(x) for x in gzip.open(src, "rt", encoding="utf-8")][: args.docs]
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as work:
        data = Path(work) / "docs.jsonl"
        data.write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in rows))
        cfg = parse_config({"version": 1, "kind": "dp", "data": {"path": str(data), "seq_len": 128},
                            "model": {"preset": "tiny"}, "optim": {"batch_size": 16, "epochs": 3},
                            "dp": {"target_epsilon": 3.0}})
        admitted = timed(lambda: plan_offline(cfg), args.repeats)
        plan = plan_offline(cfg)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            n = [0]

            def stage():
                n[0] += 1
                p = prepare(cfg.with_paths(output=str(Path(work) / f"run-{n[0]}")))
                return _stage(p, False, {})[2].budget.to_dict()

            ran = stage()
            mechanism = ("noise_multiplier", "sample_rate", "steps", "delta", "unit", "group")
            same = {k: ran[k] for k in mechanism[:3]} == {k: plan[k] for k in mechanism[:3]}
            driver = timed(stage, args.repeats)
        finally:
            ray.shutdown()
        spends = [Spend.from_plan(plan)] * 5
        t0 = time.perf_counter()
        five = compose(spends)
        compose_s = time.perf_counter() - t0
    ratio = admitted["wall_s"] / driver["wall_s"]
    print(f"admission plan: {admitted['wall_s']:.2f} s (median of {args.repeats}) for {len(rows)} dialogues, "
          f"{plan['units']} blocks, {plan['steps']} DP steps; the driver's own staging {driver['wall_s']:.2f} s: "
          f"{ratio:.2f}x of it; the same mechanism (noise, sample rate, steps): {same} (blocks counted "
          f"{plan['units']} at admission, {ran['units']} by Ray Data)")
    print(f"ledger of 5 such trainings: epsilon {five.epsilon:.3f} ({five.accountant}) in {compose_s:.2f} s "
          f"(one alone {plan['planned_epsilon']:.3f})")
    save_result("ledger_admission", {
        "machine_note": machine(), "docs": len(rows), "blocks": plan["units"], "dp_steps": plan["steps"],
        "admission": admitted, "driver_stage": driver, "admission_over_driver": ratio, "same_mechanism": same,
        "driver_blocks": ran["units"],
        "compose_5_s": compose_s, "compose_5_epsilon": five.epsilon, "one_epsilon": plan["planned_epsilon"]})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
