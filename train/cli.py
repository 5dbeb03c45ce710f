"""``privatize train CONFIG [--data SHARDS] [--output RUN_DIR] [--ray ADDRESS]``.

Registered through the ``privatize.commands`` entry-point group. The flags override the
config's ``data.path`` and ``output``. Bad configs are one line on stderr and exit 2,
before anything is written; the last stdout line is the run's summary as JSON.
"""

from __future__ import annotations

import argparse
import json


def _train(args: argparse.Namespace) -> int:
    from train.config import load_config
    from train.run import run_training

    cfg = load_config(args.config).with_paths(data=args.data, output=args.output)
    summary = run_training(cfg, address=args.ray or None)
    keep = ("kind", "steps", "final_loss", "tokens", "seconds", "epsilon", "delta", "confidentiality")
    print(json.dumps({"status": "ok", "output": cfg.output, **{k: summary[k] for k in keep if k in summary}}))
    return 0


def register(sub) -> None:
    t = sub.add_parser("train", help="train a language model on privatized shards (Ray Train)")
    t.add_argument("config", help="training config (YAML; see train/configs/)")
    t.add_argument("--data", help="training data: a privatization output folder, Parquet or JSONL (overrides data.path)")
    t.add_argument("--output", help="run folder (overrides output; an unfinished run there resumes)")
    t.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="a Ray cluster address (default: RAY_ADDRESS, else an embedded local Ray)")
    t.set_defaults(func=_train)
