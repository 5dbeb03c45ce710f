"""What a DP unit protects: one individual's canary in all of their records, under
``dp.unit: sequence`` and ``dp.unit: individual`` at the same epsilon (issue 36).

Protocol (one command, resumable model by model):

* data: a seeded sample of CustomerSim training dialogues (the dataset's own canary left
  out). Every dialogue is one record. ``--canaries`` individuals each own ``--records`` of
  them, and each of those records ends with that individual's canary, ``My ID is: <6
  digits>`` (the ``canaries`` stage's format, secrets derived from an hmac key, 10 more
  derived and never inserted: the noise floor). Every other dialogue is an individual of
  its own. The public base is evaluated too: its exposure of each secret is that secret's
  prior (a model that never saw it).
* models, all fine-tuned from the public ``tiny`` base for the same epochs: plain
  (``continue``), DP-SGD with ``unit: sequence`` and DP-SGD with ``unit: individual``, both
  at each of ``--epsilons`` (book-keeping clipping, noise planned by the accountant).
* attacks: exact canary exposure over all 10^6 candidates, perplexity on held-out
  dialogues; and the DP step time of each unit (fit seconds per step, tokens/s).

Expected: the sequence unit's epsilon is per 64-token block, so an individual with R
records is protected at up to R times it and its canaries leak above the floor; under
the individual unit the 10 canaries sit at the never-inserted canaries' level.

    .venv/bin/python -m experiments.dp_units [--dialogues 1500 --records 40 --canaries 1 --epsilons 1 8]
    .venv/bin/python -m experiments.dp_units --step-time     # the DP step of each unit, same blocks
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from experiments.common import ROOT, machine, need_data, save_result

FORMAT = "My ID is: {secret}"


def corpus(d: Path, dialogues: int, records: int, key: bytes, count: int) -> Path:
    from privatize.stages.canaries import derive_secrets

    if (d / "train.jsonl").is_file():
        return d
    d.mkdir(parents=True, exist_ok=True)
    data = need_data() / "customersim"

    def load(split):
        return [json.loads(x) for x in open(data / f"{split}.jsonl", encoding="utf-8") if '"canary"' not in x]
    train = random.Random(0).sample(load("train"), dialogues)
    secrets = derive_secrets(key, 6, count + 10)[:count]
    rows = []
    for i, r in enumerate(train):
        owner, text = f"c{i}", r["text"]
        if i < count * records:  # individual j owns records j, j + count, ...: its canary in every one
            owner, text = f"owner{i % count}", text + "\n\n" + FORMAT.format(secret=secrets[i % count])
        rows.append({"doc_id": r["id"], "individual_id": owner, "text": text})
    random.Random(1).shuffle(rows)
    for name, part in (("train", rows), ("heldout", [{"text": r["text"]} for r in load("test")[:500]])):
        with open(d / f".{name}.tmp", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(x) + "\n" for x in part)
        (d / f".{name}.tmp").replace(d / f"{name}.jsonl")
    return d


def train(d: Path, name: str, base: Path, args, unit: str | None, eps: float | None = None) -> dict:
    from train.config import parse_config
    from train.run import run_training

    out = d / "runs" / name
    if not (out / "summary.json").is_file():
        cfg = {"version": 1, "kind": "continue" if unit is None else "dp",
               "data": {"path": str(d / "train.jsonl"), "seq_len": 64},
               "model": {"preset": None, "checkpoint": str(base / "model")},
               "optim": {"batch_size": args.batch_size, "epochs": args.epochs, "lr": args.lr, "warmup_steps": 10},
               "workers": {"num_workers": 1, "cpus_per_worker": 2}, "checkpoint_every": 100_000,
               "report_every": 50, "output": str(out)}
        if unit is not None:
            cfg["dp"] = {"target_epsilon": eps, "max_grad_norm": 1.0, "grad_sample_mode": "bk",
                         "unit": unit}
        t = time.perf_counter()
        s = run_training(parse_config(cfg), progress=False)
        print(f"  trained {name}: {s['steps']} steps, loss {s['final_loss']:.3f}"
              + (f", epsilon {s['epsilon']:.2f} per {s['unit']['name']}" if s.get("epsilon") else "")
              + f" in {time.perf_counter() - t:.0f} s", flush=True)
    return json.loads((out / "summary.json").read_text())


def step_time(repeats: int = 15) -> dict:
    """One DP step on the same 32 blocks of 64 tokens (``tiny``), clipped per block
    (``sequence``) and per individual (8 individuals of 4 blocks, ``individual``), in
    ``hooks`` and ``bk``: the median of ``repeats`` timed steps after one warm-up each, on one
    thread, the two units interleaved."""
    import statistics

    import numpy as np
    import torch

    from train.batches import make_batch
    from train.dp.engine import make_private
    from train.loop import train_step
    from train.models import build_model, preset_config

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    ids = rng.integers(2, 4000, size=(32, 64)).astype(np.int32)
    x, y = make_batch(ids, np.ones_like(ids, np.uint8), np.arange(32), "cpu")
    groups = np.repeat(np.arange(8), 4)
    out = {}
    for mode in ("hooks", "bk"):
        times = {"sequence": [], "individual": []}
        setups = {}
        for unit in times:
            model = build_model(preset_config("tiny", vocab_size=4096, bos_token_id=0, eos_token_id=0,
                                              pad_token_id=1), 0)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            dp = make_private(model, opt, noise_multiplier=1.0, max_grad_norm=1.0, sample_rate=0.01,
                              expected_batch_size=32 if unit == "sequence" else 8, grad_sample_mode=mode,
                              generator=torch.Generator().manual_seed(0))
            setups[unit] = (model, dp, opt)
            train_step(model, dp, opt, True, x, y, groups=groups if unit == "individual" else None)  # warm-up
        for _ in range(repeats):
            for unit, (model, dp, opt) in setups.items():
                t = time.perf_counter()
                train_step(model, dp, opt, True, x, y, groups=groups if unit == "individual" else None)
                times[unit].append(time.perf_counter() - t)
        med = {u: statistics.median(v) for u, v in times.items()}
        out[mode] = {"sequence_s": med["sequence"], "individual_s": med["individual"],
                     "individual_over_sequence": med["individual"] / med["sequence"]}
        print(f"  {mode:<5}: sequence {med['sequence'] * 1000:.1f} ms, individual {med['individual'] * 1000:.1f} ms "
              f"per step: {med['individual'] / med['sequence']:.2f}x", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dialogues", type=int, default=1500)
    ap.add_argument("--records", type=int, default=40, help="records (each with its canary) per canary individual")
    ap.add_argument("--canaries", type=int, default=1, help="individuals with a canary (10 more never inserted)")
    ap.add_argument("--epsilons", type=float, nargs="+", default=[2.0, 8.0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--work", default=str(ROOT / "benchmarks" / "work" / "dp_units"))
    ap.add_argument("--base", default=str(ROOT / "benchmarks" / "work" / "crt_paper" / "base-tiny"),
                    help="a public base (privatize base tiny); trained here when missing")
    ap.add_argument("--step-time", action="store_true", help="only the DP step time of the two units")
    args = ap.parse_args()
    if args.step_time:
        print("DP step time, 32 blocks of 64 tokens, tiny, one thread:")
        save_result("dp_units_step", {"machine": machine(), "step_time": step_time()})
        return

    from attacks.config import parse_config
    from attacks.run import run_evaluation
    from privatize.keys import load_key_file, new_key, write_key_file
    from train.base import base_config, described, public_corpus
    from train.run import run_training

    work, base = Path(args.work), Path(args.base)
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "canary.key").is_file():
        write_key_file(new_key("hmac"), work / "canary.key")
    if not (base / "summary.json").is_file():
        pub = public_corpus(base.parent / "public-text", need_data())  # WikiText-2 and the stories
        run_training(base_config("tiny", pub, base, False, description=described(pub)), progress=False)
    d = corpus(work / "data", args.dialogues, args.records, load_key_file(work / "canary.key").secret, args.canaries)
    summaries = {"plain": train(d, "plain", base, args, None)}
    for e in args.epsilons:
        for unit in ("sequence", "individual"):
            summaries[f"dp-{unit}-e{e:g}"] = train(d, f"dp-{unit}-e{e:g}", base, args, unit, e)
    ev_dir = work / ("eval-base-e" + "-".join(f"{e:g}" for e in args.epsilons))
    if not (ev_dir / "evaluation.json").is_file():
        cfg = {"version": 1, "models": [{"name": n, "path": str(d / "runs" / n), "reference": n == "plain"}
                                        for n in summaries] + [{"name": "base", "path": str(base)}],
               "canaries": {"key": f"file:{work / 'canary.key'}", "digits": 6, "count": args.canaries, "held_out": 10,
                            "repeats": args.records, "format": FORMAT},
               "perplexity": {"data": str(d / "heldout.jsonl"), "limit": 500}, "output": str(ev_dir)}
        run_evaluation(parse_config(cfg), progress=False)
    from attacks.results import keyed_results

    ev = json.loads((ev_dir / "evaluation.json").read_text())
    rows = []
    prior = keyed_results(next(m for m in ev["models"] if m["name"] == "base"))["canaries"]["canaries"]
    for m in ev["models"]:
        if m["name"] == "base":
            continue
        s = summaries[m["name"]]
        ex = keyed_results(m)["canaries"]
        inserted = [c for c in ex["canaries"] if c["repeats"] > 0]
        rows.append({"model": m["name"], "unit": (s.get("unit") or {}).get("name"),
                     "units": (s.get("unit") or {}).get("units"), "epsilon": s.get("epsilon"),
                     "noise_multiplier": (s.get("dp") or {}).get("noise_multiplier"),
                     "perplexity": keyed_results(m)["perplexity"]["perplexity"], "max_exposure": ex["max_exposure"],
                     "mean_exposure": ex.get("mean_exposure"), "floor": ex["max_reference_exposure"],
                     "inserted": [round(c["exposure"], 2) for c in inserted],
                     "prior": [round(p["exposure"], 2) for p in prior if p["repeats"] > 0],
                     "max_over_prior": max(c["exposure"] - p["exposure"] for c, p in zip(ex["canaries"], prior)
                                           if c["repeats"] > 0),
                     "steps": s["steps"], "fit_s": s["timings"]["fit_s"],
                     "s_per_step": s["timings"]["fit_s"] / max(1, s["steps"]),
                     "tokens_per_s": s["tokens"] / s["timings"]["fit_s"]})
    by = {r["model"]: r for r in rows}
    ratios = {f"e{e:g}": {k: by[f"dp-individual-e{e:g}"][k] / by[f"dp-sequence-e{e:g}"][k]
                          for k in ("s_per_step", "tokens_per_s")} for e in args.epsilons}
    print(f"{'model':<18} {'unit':<11} {'units':>6} {'epsilon':>8} {'sigma':>7} {'ppl':>8} {'max exp':>8} "
          f"{'floor':>6} {'over prior':>10} {'s/step':>7} {'tok/s':>7}")
    for r in rows:
        f = (lambda v, spec: "-" if v is None else format(v, spec))
        print(f"{r['model']:<18} {r['unit'] or '-':<11} {f(r['units'], 'd'):>6} {f(r['epsilon'], '.2f'):>8} "
              f"{f(r['noise_multiplier'], '.3f'):>7} {r['perplexity']:>8.2f} {r['max_exposure']:>8.2f} "
              f"{r['floor']:>6.2f} {r['max_over_prior']:>10.2f} {r['s_per_step']:>7.3f} {r['tokens_per_s']:>7.0f}")
    for k, v in ratios.items():
        print(f"user-level DP / sequence-level at {k}: step time {v['s_per_step']:.2f}x, "
              f"training tokens/s {v['tokens_per_s']:.2f}x")
    save_result(f"dp_units-c{args.canaries}", {"machine": machine(), "args": vars(args), "rows": rows,
                             "individual_over_sequence_step_time": ratios})


if __name__ == "__main__":
    main()
