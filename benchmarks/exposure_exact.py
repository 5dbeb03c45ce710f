"""Exact canary exposure over all 10^6 candidates of a 6-digit canary for the ``tiny``
preset, by the digit trie (shared prefixes on the KV cache), against naive scoring (one
full forward pass per candidate) measured in the same run on a random sample of
candidates and scaled to 10^6. The sample's trie and naive scores must agree.

The model is the tiny preset (2.1M parameters, 4,096-token vocabulary) with a tokenizer
trained on squality_gutenberg text; weights are random (the cost does not depend on
what the model learnt). Target (issue 18): the exact figure in <= 10 minutes on this
2-core machine.

    .venv/bin/python benchmarks/exposure_exact.py [--digits 6] [--naive-sample 20000] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime

from _common import gutenberg_texts, machine, save_result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--digits", type=int, default=6)
    ap.add_argument("--naive-sample", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=2048)
    args = ap.parse_args()

    import numpy as np
    import torch
    from tqdm import tqdm

    from attacks.model import ModelAdapter
    from train.models import build_model, preset_config
    from train.tokenizer import special_ids, train_tokenizer

    torch.set_num_threads(args.threads)
    texts = [t[:4000] for t in gutenberg_texts()[:200]]
    tok = train_tokenizer(texts, 4096)
    model = build_model(preset_config("tiny", vocab_size=len(tok), **special_ids(tok)), seed=0)
    a = ModelAdapter(model, tok)
    prefix, n = "My ID is: ", 10 ** args.digits

    t = time.perf_counter()
    with tqdm(total=n, desc="trie", unit="cand", unit_scale=True) as bar:
        trie = a.digit_scores_trie(prefix, args.digits, chunk=args.chunk, progress=bar.update)
    trie_s = time.perf_counter() - t

    rng = np.random.default_rng(0)
    sample = rng.choice(n, size=min(args.naive_sample, n), replace=False)
    t = time.perf_counter()
    with tqdm(total=len(sample), desc="naive (sample)", unit="cand", unit_scale=True) as bar:
        naive = a.digit_scores_naive(prefix, [f"{int(x):0{args.digits}d}" for x in sample], batch=1024,
                                     progress=bar.update)
    naive_sample_s = time.perf_counter() - t
    max_diff = float(np.abs(naive - trie[sample]).max())
    naive_s = naive_sample_s * n / len(sample)
    res = {"benchmark": "exposure_exact", "date": datetime.now(UTC).strftime("%Y-%m-%d"), "machine": machine(),
           "threads": args.threads, "model": "tiny", "parameters": sum(p.numel() for p in model.parameters()),
           "candidates": n, "trie_s": round(trie_s, 1), "trie_candidates_per_s": round(n / trie_s),
           "naive_sample": len(sample), "naive_sample_s": round(naive_sample_s, 1),
           "naive_all_s_extrapolated": round(naive_s, 1), "speedup": round(naive_s / trie_s, 1),
           "max_abs_diff_sample": max_diff, "target_trie_s": 600, "met": trie_s <= 600 and max_diff < 1e-3}
    print(f"exact exposure over {n:,} candidates: trie {trie_s:.1f} s; naive {naive_s:.0f} s "
          f"(extrapolated from {len(sample):,}); speed-up {naive_s / trie_s:.1f}x; max |diff| {max_diff:.2e}")
    print(json.dumps(res))
    save_result("exposure_exact", res)


if __name__ == "__main__":
    main()
