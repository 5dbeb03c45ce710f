"""What a short Ray Train run costs beyond its steps (issue 49): a four-step ``tiny``
pre-training on a warm embedded cluster, end to end through ``train.run.run_training``,
with the project's trainer (:mod:`train.raytrain`: no per-run placement-group cleaner)
against Ray Train's own ``TorchTrainer`` as the baseline, interleaved in one run (the
first run of the cluster is a warm-up and not counted).

    .venv/bin/python benchmarks/train_start.py [--pairs 4] [--cpus 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, save_result  # noqa: E402  (puts the project on sys.path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    import ray
    from ray.train.torch import TorchTrainer

    import train.raytrain as raytrain
    from privatize.ray import local_init_args
    from train.config import parse_config
    from train.run import run_training

    ours = raytrain.trainer_class
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, **local_init_args(args.cpus))
    work = Path(tempfile.mkdtemp(prefix="train-start-"))
    corpus = work / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"Record {i}: the quick brown fox jumps over the lazy dog "
                                                  f"{i % 7} times."}) + "\n" for i in range(200)))
    times: dict[str, list[float]] = {"ray_train": [], "project": []}
    order = ["ray_train"] + ["ray_train", "project"] * args.pairs  # the first: the warm-up
    for k, which in enumerate(order):
        raytrain.trainer_class = ours if which == "project" else (lambda: TorchTrainer)
        cfg = parse_config({"version": 1, "kind": "pretrain", "data": {"seq_len": 32, "path": str(corpus)},
                            "model": {"preset": "tiny"}, "tokenizer": {"vocab_size": 300},
                            "optim": {"batch_size": 8, "lr": 0.003, "max_steps": 4},
                            "workers": {"num_workers": 1}, "checkpoint_every": 1000, "report_every": 1000,
                            "output": str(work / f"run{k}")})
        t0 = time.perf_counter()
        s = run_training(cfg, progress=False)
        dt = time.perf_counter() - t0
        if k:
            times[which].append(dt)
        print(f"run {k}: {which:9s} {dt:6.2f} s (fit {s['timings']['fit_s']:.2f} s)", flush=True)
    raytrain.trainer_class = ours
    ray.shutdown()
    base, new = statistics.median(times["ray_train"]), statistics.median(times["project"])
    print(f"four-step run, median of {args.pairs}: Ray Train's TorchTrainer {base:.2f} s, the project's {new:.2f} s "
          f"({base / new:.2f}x faster, {base - new:.2f} s a run)")
    save_result("train_start", {"machine": machine(), "cpus": args.cpus, "pairs": args.pairs,
                                "seconds": times, "median_s": {"ray_train": base, "project": new},
                                "speedup": base / new, "saved_s_per_run": base - new})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
