"""LoRA and DP-LoRA step time against full fine-tuning (issue 37).

For one preset (``small`` by default), batch and sequence length: the median time of a
training step of full fine-tuning, of LoRA (``peft``, the adapters on the attention
projections), and of DP-LoRA in each grad-sample mode (per-example clipping and noise on
the adapters only; ``bk-unfused`` is book-keeping clipping record by record, as before
its stacks of same-shaped adapters), after warm-up; tokens per second of each. The figures: DP-LoRA / LoRA
step time (target <= 1.3x on ``small``) and LoRA's tokens/s against full fine-tuning's.
On a GPU when one is there (bf16 autocast), else the CPU.

    .venv/bin/python benchmarks/lora_step.py [--preset small] [--batch 32] [--seq 256]
        [--steps 10] [--modes hooks,ghost,bk,bk-unfused] [--r 8] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _common import machine, save_result


def _model(preset: str, lora: bool, r: int, device: str):
    import torch

    from train.models import build_model, preset_config, with_lora
    from train.setup import LoraPlan

    model = build_model(preset_config(preset, bos_token_id=0, eos_token_id=0, pad_token_id=1), 0)
    if lora:
        model = with_lora(model, LoraPlan(r=r, alpha=2.0 * r, dropout=0.0,
                                          target_modules=("q_proj", "k_proj", "v_proj", "o_proj")), 0)
    return model.to(device).train(), torch


def step_times(preset: str, mode: str, batch: int, seq: int, steps: int, r: int, device: str) -> dict:
    import numpy as np

    from train.batches import make_batch
    from train.dp.engine import make_private
    from train.loop import train_step

    lora = mode != "full"
    model, torch = _model(preset, lora, r, device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    dp = None
    if mode not in ("full", "lora"):
        dp = make_private(model, opt, grad_sample_mode=mode.removesuffix("-unfused"), max_grad_norm=1.0,
                          noise_multiplier=1.0, accountant="rdp", sample_rate=0.01, expected_batch_size=batch,
                          generator=torch.Generator(device=device).manual_seed(0))
        if mode == "bk-unfused":  # book-keeping record by record (before the stacks)
            dp.bk.fuse = False
    ids = np.random.default_rng(0).integers(3, model.config.vocab_size, size=(batch, seq)).astype(np.int32)
    x, y = make_batch(ids, np.ones_like(ids, np.uint8), np.arange(batch), device)
    bf16 = device == "cuda"
    times = []
    for i in range(steps + 3):  # three warm-up steps
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        train_step(model, dp, opt, dp is not None, x, y, bf16)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t)
    med = statistics.median(times)
    out = {"step_s": med, "tokens_per_s": batch * seq / med, "trainable": sum(p.numel() for p in params)}
    if device == "cuda":
        out["peak_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
        torch.cuda.reset_peak_memory_stats()
    del model, opt, dp
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--modes", default="hooks,ghost,bk,bk-unfused")
    ap.add_argument("--r", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    where = torch.cuda.get_device_name() if device == "cuda" else machine()
    print(f"{args.preset}, batch {args.batch} x {args.seq} tokens, LoRA r {args.r} on q/k/v/o, {where}")
    res = {}
    modes = args.modes.split(",")

    def doc() -> dict:
        lora = res.get("lora", {}).get("step_s")
        return {"device": where, "preset": args.preset, "batch": args.batch, "seq": args.seq, "r": args.r,
                "results": res, "dp_over_lora": {m: res[m]["step_s"] / lora for m in modes if m in res and lora},
                "lora_over_full_tokens_per_s": (res["lora"]["tokens_per_s"] / res["full"]["tokens_per_s"]
                                                if lora else None)}

    for mode in ["full", "lora", *modes]:
        res[mode] = step_times(args.preset, mode, args.batch, args.seq, args.steps, args.r, device)
        name = {"full": "full fine-tuning", "lora": "LoRA"}.get(mode, f"DP-LoRA ({mode})")
        print(f"  {name:<20} {res[mode]['step_s'] * 1000:8.1f} ms/step {res[mode]['tokens_per_s']:10.0f} tokens/s "
              f"{res[mode]['trainable']:>11,} trainable" + (f" {res[mode]['peak_gib']:.2f} GiB" if "peak_gib" in res[mode] else ""),
              flush=True)
        if args.json:  # after every mode: a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps(doc(), indent=2) + "\n")
    res_doc = doc()
    ratios = res_doc["dp_over_lora"]
    best = min(ratios, key=ratios.get)
    print(f"DP-LoRA / LoRA step time: " + ", ".join(f"{m} {v:.2f}x" for m, v in ratios.items())
          + f" (best {best}: {ratios[best]:.2f}x; target <= 1.3x)")
    print(f"LoRA tokens/s / full fine-tuning tokens/s: {res_doc['lora_over_full_tokens_per_s']:.2f}x")
    save_result(f"lora_step_{device}", res_doc)


if __name__ == "__main__":
    main()
