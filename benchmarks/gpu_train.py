"""Training steps on a GPU (issue 17): the ``small`` and ``paper-551m`` presets in bf16
autocast (fp32 master weights, AdamW), the step the Ray Train workers run
(``train.loop.train_step``) on one device: tokens/s, model FLOPs utilisation, peak GPU
memory, and DP-SGD over plain per grad-sample mode, all in the same run.

    python benchmarks/gpu_train.py [--modes bk,hooks,ghost]
        [--shapes small=16x128,small=32x1024,paper-551m=16x128,paper-551m=8x2048] [--steps 10]

Model FLOPs per token follow PaLM (Chowdhery et al. 2022, appendix B): 6 N (N the
parameters that take part in matrix products: all but the input embedding) plus
12 L d T for attention (L layers, width d, sequence T); MFU is those FLOPs per second over
the chip's dense bf16 peak (``--peak-tflops``, 989 for an H100 or H200 SXM). DP modes are
charged the same model FLOPs: their extra work is overhead, not useful work. Each figure
is the median of ``--steps`` steps after ``--warmup``, with the device synchronised
around each step. ``--deterministic`` sets ``torch.use_deterministic_algorithms`` as the
training workers do (``train/loop.py``); the default measures both for the plain step of
the first shape, then the rest as the workers run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from _common import ROOT, machine, save_result  # noqa: F401  (puts the project on sys.path)

DEFAULT_SHAPES = "small=16x128,small=32x1024,paper-551m=16x128,paper-551m=8x2048"


def model_flops_per_token(model, seq: int) -> float:
    cfg = model.config
    n = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
    return 6 * n + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq


def measure(preset: str, mode: str, batch: int, seq: int, steps: int, warmup: int, peak: float,
            device: str = "cuda") -> dict:
    import numpy as np
    import torch

    from train.batches import make_batch
    from train.dp.engine import make_private
    from train.loop import train_step
    from train.models import build_model, preset_config

    dev = torch.device(device)
    gpu = dev.type == "cuda"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    with dev:
        model = build_model(preset_config(preset, bos_token_id=0, eos_token_id=0, pad_token_id=1), 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dp = None
    if mode != "plain":
        gen = torch.Generator(device=dev).manual_seed(0)
        dp = make_private(model, opt, grad_sample_mode=mode, max_grad_norm=1.0, noise_multiplier=1.0,
                          accountant="prv", sample_rate=0.01, expected_batch_size=batch, generator=gen)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, model.config.vocab_size, size=(batch, seq)).astype(np.int32)
    x, y = make_batch(ids, np.ones_like(ids, np.uint8), np.arange(batch), dev)
    times, losses = [], []
    for i in range(warmup + steps):
        sync()
        t = time.perf_counter()
        losses.append(train_step(model, dp, opt, mode != "plain", x, y, bf16=True))
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    med = statistics.median(times)
    tok_s = batch * seq / med
    flops = model_flops_per_token(model, seq)
    out = {"preset": preset, "mode": mode, "batch": batch, "seq": seq, "params": sum(p.numel() for p in model.parameters()),
           "step_ms": med * 1000, "tokens_per_s": tok_s, "tflops": flops * tok_s / 1e12,
           "mfu": flops * tok_s / (peak * 1e12), "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else float("nan"),
           "loss_first": losses[0], "loss_last": losses[-1], "finite": all(np.isfinite(losses))}
    del model, opt, dp, x, y
    return out


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="preset=BATCHxSEQ,...")
    ap.add_argument("--modes", default="bk,hooks,ghost", help="DP modes compared with plain")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--deterministic", choices=["both", "on", "off"], default="both")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: a smoke test of this script
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_train.py needs a CUDA device")
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    print(f"# {machine()}; {name}; torch {torch.__version__}; "
          f"peak {a.peak_tflops:.0f} TFLOP/s bf16 dense", flush=True)
    rows = []

    def run(preset, mode, b, s, det):
        torch.use_deterministic_algorithms(det, warn_only=True)
        try:
            r = measure(preset, mode, b, s, a.steps, a.warmup, a.peak_tflops, a.device)
        except torch.OutOfMemoryError as exc:
            r = {"preset": preset, "mode": mode, "batch": b, "seq": s, "error": f"out of memory: {str(exc).splitlines()[0]}"}
            torch.cuda.empty_cache()
        r["deterministic"] = det
        rows.append(r)
        if "error" in r:
            print(f"{preset:10s} {mode:5s} {b:3d}x{s:<5d} det={det!s:5s} {r['error']}", flush=True)
        else:
            print(f"{preset:10s} {mode:5s} {b:3d}x{s:<5d} det={det!s:5s} step {r['step_ms']:8.1f} ms  "
                  f"{r['tokens_per_s']:9.0f} tok/s  {r['tflops']:6.1f} TFLOP/s  MFU {r['mfu'] * 100:5.1f}%  "
                  f"peak {r['peak_mem_gib']:6.2f} GiB  loss {r['loss_first']:.3f}->{r['loss_last']:.3f}", flush=True)
        return r

    shapes = []
    for item in a.shapes.split(","):
        preset, bs = item.split("=")
        b, s = bs.split("x")
        shapes.append((preset, int(b), int(s)))
    det = a.deterministic != "off"
    if a.deterministic == "both":  # the workers' setting against none, once
        p, b, s = shapes[0]
        run(p, "plain", b, s, False)
    for p, b, s in shapes:
        base = run(p, "plain", b, s, det)
        for m in a.modes.split(","):
            r = run(p, m, b, s, det)
            if "error" not in r and "error" not in base:
                r["over_plain_time"] = r["step_ms"] / base["step_ms"]
                r["over_plain_memory"] = r["peak_mem_gib"] / base["peak_mem_gib"]
    print("\n| model | batch x seq | mode | step | tokens/s | MFU | peak memory | time / plain | memory / plain |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['preset']} | {r['batch']} x {r['seq']} | {r['mode']} | {r['error']} | | | | | |")
            continue
        d = "" if r["deterministic"] else " (not deterministic)"
        print(f"| {r['preset']} | {r['batch']} x {r['seq']} | {r['mode']}{d} | {r['step_ms']:.1f} ms | "
              f"{r['tokens_per_s']:,.0f} | {r['mfu'] * 100:.1f}% | {r['peak_mem_gib']:.2f} GiB | "
              f"{r.get('over_plain_time', 1.0):.2f}x | {r.get('over_plain_memory', 1.0):.2f}x |")
    result = {"device": name, "rows": rows}
    print(f"results in {save_result('gpu_train', result)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine(), **result}, f, indent=1)


if __name__ == "__main__":
    main()
