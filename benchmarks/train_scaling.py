"""Training throughput: Ray Train with 1 and 2 workers, against a plain torch loop in one
process on the same data.

The same packed blocks (squality_gutenberg, ``--model`` preset, sequence 128, global batch
16, AdamW) are trained three ways:

* ``loop``: this process, one torch thread, no Ray (the baseline);
* ``ray1``: ``privatize train`` with one Ray Train worker (1 CPU);
* ``ray2``: two workers (1 CPU each, DDP over gloo, 8 examples each per step).

Tokens/s are measured after warm-up: for Ray, between the first report after
``--warmup`` steps and the last one (the workers' own clock, in metrics.jsonl). Targets
(issue 17): ray2 / ray1 >= 1.6x on this 2-core machine (small model); Ray Train's
overhead at 1 worker (1 - ray1 / loop) <= 15%.

    .venv/bin/python benchmarks/train_scaling.py [--model small] [--steps 40] [--warmup 10]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from _common import machine, need_data, save_result


def _corpus(folder: Path, docs: int) -> Path:
    d = need_data() / "squality_gutenberg"
    p = folder / "corpus.jsonl"
    with open(d / "train.jsonl", encoding="utf-8") as fh, open(p, "w", encoding="utf-8") as out:
        for _, line in zip(range(docs), fh):
            out.write(json.dumps({"text": json.loads(line)["document"]}) + "\n")
    return p


def _cfg(data: Path, out: Path, model: str, steps: int, workers: int, report: int) -> dict:
    return {"version": 1, "kind": "pretrain", "data": {"path": str(data), "seq_len": 128},
            "model": {"preset": model}, "optim": {"batch_size": 16, "max_steps": steps, "lr": 1e-3},
            "workers": {"num_workers": workers, "cpus_per_worker": 1}, "output": str(out),
            "checkpoint_every": 100000, "report_every": report}


def ray_rate(data: Path, folder: Path, model: str, steps: int, warmup: int, workers: int) -> tuple[float, dict]:
    from train.config import parse_config
    from train.run import run_training

    out = folder / f"ray{workers}"
    s = run_training(parse_config(_cfg(data, out, model, steps, workers, report=5)), progress=False)
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    first = next(r for r in recs if r["step"] >= warmup)
    last = recs[-1]
    return (last["tokens"] - first["tokens"]) / (last["time"] - first["time"]), s


def loop_rate(tok_dir: Path, data: Path, model: str, steps: int, warmup: int) -> float:
    """The same blocks, steps and batches in this process: no Ray."""
    import numpy as np
    import torch

    from train.data import Pack
    from train.batches import batch_indices, make_batch
    from train.loop import train_step
    from train.plan import Phase
    from train.models import build_model, preset_config
    from train.tokenizer import load_tokenizer, special_ids

    torch.set_num_threads(1)
    texts = [json.loads(x)["text"] for x in data.read_text().splitlines()]
    packed = Pack(str(tok_dir), "text", 128, True)({"text": np.array(texts, dtype=object)})
    ids, loss = packed["ids"], packed["loss"]
    tok = load_tokenizer(str(tok_dir))
    m = build_model(preset_config(model, len(tok), **special_ids(tok)), 0)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    ph = Phase("train", False, len(ids) // 16, "train")
    tokens, t0 = 0, None
    for step in range(steps):
        if step == warmup:
            tokens, t0 = 0, time.perf_counter()
        idx = batch_indices(ph, len(ids), 16, 0, 0, step % ph.steps, 0)
        x, y = make_batch(ids, loss, idx, "cpu")
        train_step(m, None, opt, False, x, y)
        tokens += int(loss[idx, 1:].sum())
    return tokens / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="small")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--docs", type=int, default=8)
    a = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from privatize.ray import local_init_args

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **local_init_args(2))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = _corpus(folder, a.docs)
        r1, s1 = ray_rate(data, folder, a.model, a.steps, a.warmup, 1)
        r2, _ = ray_rate(data, folder, a.model, a.steps, a.warmup, 2)
        base = loop_rate(folder / "ray1" / "tokenizer", data, a.model, a.steps, a.warmup)
    print(f"# {machine()}; model {a.model}, seq 128, global batch 16, {a.steps} steps ({a.warmup} warm-up)")
    print(f"plain torch loop, 1 process, 1 thread: {base:8.0f} tokens/s")
    print(f"Ray Train, 1 worker:                   {r1:8.0f} tokens/s  overhead vs loop {1 - r1 / base:+.1%}")
    print(f"Ray Train, 2 workers:                  {r2:8.0f} tokens/s  {r2 / r1:.2f}x one worker")
    print(f"(run timings, 1 worker: {s1['timings']})")
    save_result("train_scaling", {"machine": machine(), "model": a.model, "steps": a.steps, "warmup": a.warmup,
                                  "loop_tokens_per_s": base, "ray_1_tokens_per_s": r1, "ray_2_tokens_per_s": r2,
                                  "ray_overhead_vs_loop": 1 - r1 / base, "two_over_one": r2 / r1,
                                  "timings_1_worker": s1["timings"]})


if __name__ == "__main__":
    main()
