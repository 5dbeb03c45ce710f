"""Privacy attacks on a tiny model trained on CustomerSim dialogues (plain training, no
protection): the baseline that protected runs are compared with.

1. Train the ``tiny`` preset on the 10,000 training dialogues (the project's trainer,
   Ray Train, kind pretrain, 1 worker).
2. Run each attack through the evaluation config (``attacks.run.run_evaluation``), one
   section at a time so each is timed:
   * perplexity on test dialogues (the model learnt something);
   * name MIA on the authors' lists: members ``dialog.train.txt`` vs non-members
     ``dialog.test.txt``, scored in one of the dialogues' own name turns,
     ``USR: My name's {name}.`` (7 turn templates carry the names, each 13-14% of
     them: "My name's", "I am", "Yep - I'm", "Yes,", "Sure,", the bare name with and
     without a full stop);
   * name reconstruction: trials from the training dialogues, S0 the name's turn up to
     the name, the other candidates drawn from the non-member list (so a success means
     the model prefers the true, seen name to unseen ones in its own context);
   * true-prefix: S0 + name as the prompt, trials whose S1 has at least one word (most
     name turns end right after the name);
   * extraction: 5-token prompts cut from WikiText-2 test, generations matched against
     the training dialogues (>= 35 words).
3. Write ``benchmarks/results/customersim_attacks.json`` (and a report in the work
   folder) and print a summary.

    .venv/bin/python -m experiments.customersim_attacks [--epochs 1] [--steps N] [--trials 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from experiments.common import ROOT, machine, need_data, save_result

MIA_CONTEXT = "USR: My name's {text}."


def _train(args, work: Path, dialogues: Path) -> tuple[Path, dict]:
    import ray

    from privatize.ray import local_init_args
    from train.config import parse_config
    from train.run import run_training

    if not ray.is_initialized():
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **local_init_args(2))
    run = work / "run"
    optim = {"batch_size": args.batch_size, "lr": args.lr, "epochs": args.epochs,
             "warmup_steps": min(100, max(1, (args.steps or 1000) // 10))}
    if args.steps:
        optim["max_steps"] = args.steps
    cfg = parse_config({"version": 1, "kind": "pretrain", "data": {"path": str(dialogues), "seq_len": args.seq_len},
                        "model": {"preset": "tiny"}, "tokenizer": {"vocab_size": args.vocab},
                        "optim": optim, "workers": {"num_workers": 1}, "checkpoint_every": 1_000_000,
                        "report_every": 50, "output": str(run)})
    t = time.perf_counter()
    summary = run_training(cfg, progress=not args.quiet)
    return run, {"steps": summary["steps"], "final_loss": summary["final_loss"],
                 "seconds": round(time.perf_counter() - t, 1), "epochs": args.epochs, "max_steps": args.steps,
                 "batch_size": args.batch_size, "seq_len": args.seq_len, "lr": args.lr, "vocab_size": args.vocab}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: the epochs)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--mia", type=int, default=1000, help="member and non-member names, each")
    ap.add_argument("--trials", type=int, default=1000, help="name reconstruction trials")
    ap.add_argument("--candidates", type=int, default=100, help="candidates per trial, the true name included")
    ap.add_argument("--tp-trials", type=int, default=100, help="true-prefix trials")
    ap.add_argument("--tp-samples", type=int, default=20, help="true-prefix samples per trial")
    ap.add_argument("--extraction", type=int, default=1000, help="extraction prompts")
    ap.add_argument("--extraction-tokens", type=int, default=128, help="new tokens per extraction generation")
    ap.add_argument("--workdir", default=None, help="where the run and report go (default: a temporary folder)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()

    from attacks.config import parse_config
    from attacks.report import write_report
    from attacks.results import Evaluation, to_dict
    from attacks.run import run_evaluation

    data = need_data()
    cs = data / "customersim"
    work = Path(args.workdir or tempfile.mkdtemp(prefix="customersim-attacks-"))
    work.mkdir(parents=True, exist_ok=True)
    # the dialogues alone (the 10 canary files are another benchmark's business)
    dialogues = work / "dialogues.jsonl"
    with open(cs / "train.jsonl", encoding="utf-8") as src, open(dialogues, "w", encoding="utf-8") as dst:
        for line in src:
            r = json.loads(line)
            if r["kind"] == "dial":
                dst.write(json.dumps({"text": r["text"]}) + "\n")

    run, training = _train(args, work, dialogues)
    names = cs / "mia_name_candidates"
    sections = {
        "perplexity": {"data": str(cs / "test.jsonl"), "limit": 200},
        "mia": {"members": str(names / "dialog.train.txt"), "non_members": str(names / "dialog.test.txt"),
                "limit": args.mia, "context": MIA_CONTEXT, "group_size": 20},
        "reconstruction": {"data": str(cs / "train.jsonl"), "candidates": str(names / "dialog.test.txt"),
                           "trials": args.trials, "n_candidates": args.candidates},
        "true_prefix": {"data": str(cs / "train.jsonl"), "trials": args.tp_trials, "samples": args.tp_samples,
                        "max_new_tokens": 48, "min_s1_words": 1},
        "extraction": {"prompts": str(data / "wikitext2_tokenized" / "test.txt"), "training_data": str(dialogues),
                       "count": args.extraction, "prompt_tokens": 5, "max_new_tokens": args.extraction_tokens},
    }
    merged = None
    seconds = {}
    for name, section in sections.items():
        cfg = parse_config({"version": 1, "models": [{"name": "plain", "path": str(run)}], name: section,
                            "output": str(work / "eval" / name)})
        t = time.perf_counter()
        ev = run_evaluation(cfg, progress=not args.quiet)
        seconds[name] = round(time.perf_counter() - t, 1)
        if merged is None:
            merged = ev
        else:
            merged.models[0].attacks[name] = ev.models[0].attacks[name]
    assert merged is not None
    merged.models[0].seconds = round(sum(seconds.values()), 1)
    merged.notes.append(f"one section at a time; seconds per attack: {seconds}")
    write_report(merged, work / "report")
    m = merged.models[0]

    rec, tp, ext = m.reconstruction, m.true_prefix, m.extraction
    best = max(m.mia.scores, key=lambda r: r.auc)
    tpr1 = next(x for x in best.tpr_at if abs(x.max_fpr - 0.01) < 1e-12)
    res = {"benchmark": "customersim_attacks", "date": datetime.now(UTC).strftime("%Y-%m-%d"), "machine": machine(),
           "training": training, "sections": sections, "seconds": seconds,
           "summary": {"perplexity": m.perplexity,
                       "mia_auc": {r.score: round(r.auc, 4) for r in m.mia.scores},
                       "mia_group_auc": round(m.mia.group.auc, 4) if m.mia.group else None,
                       "reconstruction_rate": rec.rate, "reconstruction_chance": 1 / rec.candidates,
                       "true_prefix_mean_best_distance": tp.mean_best_distance,
                       "extracted": ext.extracted, "unique_extracted": ext.unique_extracted},
           "evaluation": to_dict(Evaluation(id=merged.id, created=merged.created, models=[m], notes=merged.notes)),
           "report": str(work / "report" / "report.html")}
    res["evaluation"]["models"][0]["training"]["loss_curve"] = []  # in the run folder; not needed here
    out = save_result("customersim_attacks", res)

    print(f"CustomerSim attacks, tiny preset, {training['steps']} steps ({training['seconds']} s), "
          f"final loss {training['final_loss']:.3f}, test perplexity {m.perplexity:.2f}")
    print(f"  MIA on names ({m.mia.members} vs {m.mia.non_members}, context {MIA_CONTEXT!r}): "
          + ", ".join(f"{r.score} AUC {r.auc:.3f}" for r in m.mia.scores)
          + (f", group of {m.mia.group_size} AUC {m.mia.group.auc:.3f}" if m.mia.group else "")
          + f"; best TPR@1%FPR {tpr1.tpr:.3f} ({best.score})  [{seconds['mia']} s]")
    print(f"  name reconstruction: {rec.successes}/{rec.trials} = {rec.rate:.3f} over {rec.candidates} candidates "
          f"(chance {1 / rec.candidates:.3f})  [{seconds['reconstruction']} s]")
    print(f"  true-prefix: mean best distance {tp.mean_best_distance:.3f} over {tp.trials} trials x {tp.samples} "
          f"samples (higher = more private)  [{seconds['true_prefix']} s]")
    print(f"  extraction: {ext.extracted}/{ext.prompts} generations share >= {ext.min_words} words "
          f"({ext.unique_extracted} unique, {ext.dropped_low_zlib} dropped by zlib)  [{seconds['extraction']} s]")
    print(f"results: {out.relative_to(ROOT)}; report: {res['report']}", file=sys.stderr)


if __name__ == "__main__":
    main()
