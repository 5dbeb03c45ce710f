"""Cipher outputs (SoE Table 5) and resurfacing PII: a model trained on entity-encrypted
text against one trained on the raw text, both prompted with held-out text.

1. ``--docs`` generated documents with fake PII (gold spans);
2. the redact stage with ``operator: encrypt`` (AES-SIV entity tokens ``Person_[...]``);
3. two ``tiny`` models, ``--epochs`` each (Ray Train, 1 worker): one on the encrypted
   text, one on the raw text (the baseline of the same run);
4. ``--prompts`` prompts (the first 6 words of held-out documents), one 64-token sample
   each (temperature 1, top-k 64);
5. per model: entity tokens in the generations (total, unique, invalid = not authentic
   under the key: hallucinated ciphertexts), and how many of the training set's gold PII
   values appear verbatim in the generations.

    .venv/bin/python -m experiments.cipher_outputs [--docs 300] [--epochs 10] [--prompts 200]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from experiments.common import ROOT, machine, save_result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=200)
    args = ap.parse_args()

    import ray

    from attacks.cipher_outputs import cipher_outputs
    from attacks.model import ModelAdapter
    from privatize.api import run
    from privatize.corpus import make_corpus
    from privatize.keys import load_key_file, new_key, write_key_file
    from privatize.ray import local_init_args
    from train.config import parse_config
    from train.run import run_training

    w = Path(tempfile.mkdtemp(prefix="cipher-outputs-"))
    make_corpus(w / "train.jsonl", n_docs=args.docs, seed=0)
    make_corpus(w / "heldout.jsonl", n_docs=max(args.prompts, 50), seed=7)
    (w / "keys").mkdir()
    write_key_file(new_key("aes-siv"), w / "keys" / "entity.key")
    (w / "spec.json").write_text(json.dumps({"version": 1, "stages": [
        {"kind": "redact", "operator": "encrypt", "key": "file:keys/entity.key"}]}))
    t = time.perf_counter()
    run(str(w / "spec.json"), str(w / "train.jsonl"), str(w / "encrypted"), runner="local", spec_dir=str(w))
    print(f"privatized {args.docs} documents in {time.perf_counter() - t:.0f} s")
    os.environ["PYTHONPATH"] = str(ROOT)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **local_init_args(2))
    runs = {}
    for name, data in (("encrypted", w / "encrypted"), ("raw", w / "train.jsonl")):
        cfg = parse_config({"version": 1, "kind": "pretrain", "data": {"path": str(data), "seq_len": 64},
                            "model": {"preset": "tiny"}, "tokenizer": {"vocab_size": 2048},
                            "optim": {"batch_size": 16, "lr": 0.005, "epochs": args.epochs, "warmup_steps": 10},
                            "workers": {"num_workers": 1}, "checkpoint_every": 100000, "report_every": 50,
                            "output": str(w / f"run-{name}")})
        t = time.perf_counter()
        s = run_training(cfg, progress=True)
        runs[name] = {"steps": s["steps"], "final_loss": s["final_loss"], "train_s": round(time.perf_counter() - t)}
        print(f"trained {name}: {s['steps']} steps, loss {s['final_loss']:.3f}")
    held = [json.loads(line) for line in open(w / "heldout.jsonl")][: args.prompts]
    prompts = [" ".join(r["text"].split()[:6]) for r in held]
    pii = sorted({sp["text"] for line in open(w / "train.jsonl") for sp in json.loads(line)["spans"]})
    key = load_key_file(w / "keys" / "entity.key")
    res = {"benchmark": "cipher_outputs", "date": datetime.now(UTC).strftime("%Y-%m-%d"), "machine": machine(),
           "docs": args.docs, "epochs": args.epochs, "prompts": len(prompts), "training_pii_values": len(pii),
           "models": {}}
    for name in runs:
        a = ModelAdapter.load(w / f"run-{name}")
        t = time.perf_counter()
        gens = [g[0] for g in a.generate(prompts, samples=1, max_new_tokens=64, seed=0)]
        out = cipher_outputs(gens, key, training_pii=pii)
        res["models"][name] = {**runs[name], "generate_s": round(time.perf_counter() - t, 1),
                               **{k: getattr(out, k) for k in ("total_tokens", "unique_tokens", "invalid_tokens",
                                                                "unique_invalid", "failure_ratio",
                                                                "resurfaced_plaintext")}}
    print(f"{'model':<10} {'entity tokens':>13} {'unique':>7} {'invalid':>8} {'failure ratio':>14} "
          f"{'PII resurfaced':>15}")
    for name, r in res["models"].items():
        print(f"{name:<10} {r['total_tokens']:>13} {r['unique_tokens']:>7} {r['invalid_tokens']:>8} "
              f"{r['failure_ratio']:>14.3f} {r['resurfaced_plaintext']:>15}")
    print(json.dumps(res))
    save_result("cipher_outputs", res)


if __name__ == "__main__":
    main()
