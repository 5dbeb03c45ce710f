"""The one-run DP audit (issue 36) on ``tiny``: what it finds and what it costs.

Two DP-SGD runs on the same data (Gutenberg stories) with ``audit.canaries`` canaries:

* ``no-noise``: clipping and Poisson sampling, the noise removed (``dp.no_guarantee``): the
  audit should find a large epsilon (the issue's bar: >= 2 with 1,000 canaries);
* ``eps-1``: noise calibrated to accountant epsilon 1: the audit must stay below 1.

Prints, per run, the audited epsilon, the accountant's, the training's seconds and the
audit's seconds; the audit's cost is given as a ratio to its own training (the baseline
measured in the same run). Results: ``benchmarks/results/dp_audit.json``.

    python -m experiments.dp_audit [--canaries 1000] [--epochs 12] [--seq-len 32]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from experiments.common import need_data, save_result


def _config(data: Path, out: Path, args, dp: dict) -> dict:
    return {"version": 1, "kind": "dp", "output": str(out),
            "data": {"path": str(data), "text_column": "document", "seq_len": args.seq_len,
                     "max_records": args.records},
            "model": {"preset": "tiny"}, "tokenizer": {"vocab_size": 1024},
            "optim": {"batch_size": args.batch_size, "epochs": args.epochs, "lr": args.lr, "warmup_steps": 10},
            "dp": {"max_grad_norm": 1.0, "accountant": "prv", "grad_sample_mode": "bk", **dp},
            "audit": {"canaries": args.canaries}, "workers": {"num_workers": 1, "cpus_per_worker": 2},
            "checkpoint_every": 100_000, "report_every": 50}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canaries", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--records", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    args = ap.parse_args()
    data = need_data() / "squality_gutenberg" / "dev.jsonl"
    from train.config import parse_config
    from train.run import run_training

    runs = {"no-noise": {"noise_multiplier": 0.0, "no_guarantee": True}, "eps-1": {"target_epsilon": 1.0}}
    out: dict = {"canaries": args.canaries, "epochs": args.epochs, "seq_len": args.seq_len, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="dp-audit-") as work:
        for name, dp in runs.items():
            s = run_training(parse_config(_config(data, Path(work) / name, args, dp)), progress=True)
            a = s["audit"]
            row = {"audited_epsilon": a["epsilon_lower_bound"], "accountant_epsilon": s["epsilon"],
                   "correct": a["correct"], "guesses": a["guesses"], "k": a["k"], "inserted": a["inserted"],
                   "dp_blocks": s["examples"]["train"], "steps": s["steps"],
                   "noise_multiplier": s["dp"]["noise_multiplier"], "train_s": s["seconds"],
                   "audit_s": a["seconds"], "audit_to_train": round(a["seconds"] / max(s["seconds"], 1e-9), 4)}
            out["runs"][name] = row
            print(f"{name}: audited epsilon >= {row['audited_epsilon']:.3f} ({a['correct']} of {a['guesses']} right), "
                  f"accountant {row['accountant_epsilon']}; training {row['train_s']:.1f} s, audit "
                  f"{row['audit_s']:.1f} s ({row['audit_to_train']:.3f}x the training)")
    nn, e1 = out["runs"]["no-noise"], out["runs"]["eps-1"]
    out["checks"] = {"no_noise_audited_at_least_2": nn["audited_epsilon"] >= 2,
                     "eps_1_audited_at_most_1": e1["audited_epsilon"] <= 1.0,
                     "never_above_the_accountant": e1["audited_epsilon"] <= e1["accountant_epsilon"]}
    print(json.dumps(out["checks"]))
    print(f"saved {save_result('dp_audit', out)}")


if __name__ == "__main__":
    main()
