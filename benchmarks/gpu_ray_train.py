"""The product's training runs on a GPU through Ray Train (issue 17): ``train.run
.run_training`` as ``privatize train`` calls it (tokenizer, Ray Data packing, a
TorchTrainer with ``use_gpu``: nccl, bf16 autocast), for a plain pre-training and a DP-SGD
run (book-keeping clipping) of the ``small`` preset on SQuALITY's dev stories, on one
GPU. Prints each run's summary, its training tokens/s from ``metrics.jsonl``, and which
device and process-group backend the worker used (from its own log lines).

    python benchmarks/gpu_ray_train.py [--steps 60] [--seq 512] [--batch 32] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _common import need_data, save_result


def config(kind: str, out: Path, steps: int, seq: int, batch: int, gpu: bool = True) -> dict:
    cfg = {"version": 1, "kind": kind, "output": str(out),
           "data": {"path": str(need_data() / "squality_gutenberg" / "dev.jsonl"), "text_column": "document",
                    "seq_len": seq},
           "model": {"preset": "small"}, "tokenizer": {"vocab_size": 8192},
           "optim": {"batch_size": batch, "max_steps": steps, "epochs": 100, "lr": 1e-3, "warmup_steps": 5},
           "workers": {"num_workers": 1, "use_gpu": gpu, "precision": "bf16" if gpu else "fp32",
                       "cpus_per_worker": 4 if gpu else 1},
           "checkpoint_every": steps, "report_every": max(1, steps // 4)}
    if kind == "dp":
        cfg["dp"] = {"target_epsilon": 8.0, "max_grad_norm": 1.0, "accountant": "prv", "grad_sample_mode": "bk"}
    return cfg


def main() -> None:
    from train.config import parse_config
    from train.run import run_training

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", default=None)
    ap.add_argument("--cpu", action="store_true", help=argparse.SUPPRESS)  # a smoke test of this script
    a = ap.parse_args()
    root = Path(a.out or tempfile.mkdtemp(prefix="gpu-ray-train-"))
    results = {}
    for kind in ("pretrain", "dp"):
        out = root / kind
        summary = run_training(parse_config(config(kind, out, a.steps, a.seq, a.batch, not a.cpu)), progress=False)
        metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
        rates = [m["tokens_per_s"] for m in metrics if m.get("tokens_per_s")]
        results[kind] = {k: summary.get(k) for k in ("kind", "steps", "final_loss", "tokens", "seconds", "epsilon",
                                                     "delta", "workers")}
        results[kind]["tokens_per_s_last_window"] = rates[-1] if rates else None
        results[kind]["timings"] = summary.get("timings")
        print(json.dumps({kind: results[kind]}), flush=True)
    (root / "gpu_ray_train.json").write_text(json.dumps(results, indent=1))
    print(f"results in {root / 'gpu_ray_train.json'} and {save_result('gpu_ray_train', results)}")


if __name__ == "__main__":
    main()
