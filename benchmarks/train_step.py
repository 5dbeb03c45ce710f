"""DP-SGD step time and memory over plain training: Opacus hooks and ghost clipping, and
book-keeping clipping (``bk``, train/dp/bk.py).

For the ``tiny`` and ``small`` presets, batch 16, sequence 128: the median time of a plain
AdamW step and of a DP-SGD step (per-example clipping + noise, same loss, same batch) in
each grad-sample mode, after warm-up; the ratio DP / plain is the figure (issue 17 target:
<= 1.5x with the better mode). Then peak memory of the training steps at batch 64 (each
configuration in a fresh process; the peak resident set above the resident set before
the first step), DP / plain (target <= 1.5x with ghost clipping).

    .venv/bin/python benchmarks/train_step.py [--steps 5] [--models tiny,small] [--threads 2]
        [--modes hooks,ghost,bk] [--no-memory]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from _common import ROOT, machine, save_result  # noqa: F401  (puts the project on sys.path)


def _setup(preset: str, mode: str, batch: int, seq: int, threads: int):
    import numpy as np
    import torch

    from train.batches import make_batch
    from train.dp.engine import make_private
    from train.models import build_model, preset_config

    torch.set_num_threads(threads)
    model = build_model(preset_config(preset, bos_token_id=0, eos_token_id=0, pad_token_id=1), 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dp = None
    if mode != "plain":
        gen = torch.Generator().manual_seed(0)
        dp = make_private(model, opt, grad_sample_mode=mode, max_grad_norm=1.0, noise_multiplier=1.0,
                          accountant="prv", sample_rate=0.01, expected_batch_size=batch, generator=gen)
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    ids = rng.integers(3, vocab, size=(batch, seq)).astype(np.int32)
    x, y = make_batch(ids, np.ones_like(ids, np.uint8), np.arange(batch), "cpu")
    return model, opt, dp, x, y


def step_times(preset: str, mode: str, steps: int, threads: int, batch: int = 16, seq: int = 128) -> list[float]:
    from train.loop import train_step

    model, opt, dp, x, y = _setup(preset, mode, batch, seq, threads)
    out = []
    for i in range(steps + 2):  # two warm-up steps
        t = time.perf_counter()
        train_step(model, dp, opt, mode != "plain", x, y)
        if i >= 2:
            out.append(time.perf_counter() - t)
    return out


def _rss_kib(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def peak_memory(preset: str, mode: str, threads: int, batch: int, seq: int = 128) -> dict:
    """(runs in a child process) peak RSS of two training steps above the RSS before them."""
    from train.loop import train_step

    model, opt, dp, x, y = _setup(preset, mode, batch, seq, threads)
    before = _rss_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM (the peak) to the current RSS
        f.write("5")
    for _ in range(2):
        train_step(model, dp, opt, mode != "plain", x, y)
    return {"peak_mib": (_rss_kib("VmHWM") - before) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--models", default="tiny,small")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--memory-batch", type=int, default=64)
    ap.add_argument("--modes", default="hooks,ghost,bk", help="DP modes to compare with plain")
    ap.add_argument("--no-memory", action="store_true", help="step times only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        preset, mode = a.child.split(":")
        print(json.dumps(peak_memory(preset, mode, a.threads, a.memory_batch)))
        return
    print(f"# {machine()}, torch threads {a.threads}")
    rows = []
    modes = ["plain"] + a.modes.split(",")
    for preset in a.models.split(","):
        med = {}
        for mode in modes:
            t = step_times(preset, mode, a.steps, a.threads)
            med[mode] = statistics.median(t)
            print(f"{preset:6s} {mode:6s} batch 16 seq 128: median step {med[mode] * 1000:8.1f} ms "
                  f"(of {len(t)}: {', '.join(f'{x * 1000:.0f}' for x in t)})", flush=True)
        mem = {}
        for mode in [] if a.no_memory else modes:
            r = subprocess.run([sys.executable, __file__, "--child", f"{preset}:{mode}", "--threads", str(a.threads),
                                "--memory-batch", str(a.memory_batch)], capture_output=True, text=True)
            mem[mode] = json.loads(r.stdout.strip().splitlines()[-1])["peak_mib"] if r.returncode == 0 else None
            print(f"{preset:6s} {mode:6s} batch {a.memory_batch} seq 128: peak memory "
                  f"{'failed: ' + r.stderr.strip().splitlines()[-1] if mem[mode] is None else f'{mem[mode]:.0f} MiB'}",
                  flush=True)
        rows.append((preset, med, mem))
    dp = modes[1:]
    print(f"\n| model | plain step | {' | '.join(f'{m} / plain' for m in dp)} |"
          + ("" if a.no_memory else f" memory plain (batch {a.memory_batch}) | "
             + " | ".join(f"{m} / plain" for m in dp) + " |"))
    print("|---|---:|" + "---:|" * len(dp) + ("" if a.no_memory else "---:|" * (len(dp) + 1)))
    for preset, med, mem in rows:
        r = lambda m: "n/a" if mem.get(m) is None or not mem.get("plain") else f"{mem[m] / mem['plain']:.2f}x"  # noqa: E731
        line = f"| {preset} | {med['plain'] * 1000:.0f} ms | " + " | ".join(f"{med[m] / med['plain']:.2f}x" for m in dp)
        if not a.no_memory:
            line += f" | {mem['plain']:.0f} MiB | " + " | ".join(r(m) for m in dp)
        print(line + " |")
    save_result("train_step", {"machine": machine(), "threads": a.threads, "steps": a.steps,
                               "memory_batch": a.memory_batch, "rows": [
                                   {"model": preset, "median_step_s": med, "peak_mib": mem,
                                    "over_plain": {m: med[m] / med["plain"] for m in dp}} for preset, med, mem in rows]})


if __name__ == "__main__":
    main()
