"""Paper 002's Table 3 at small scale (issue 21): perplexity on held-back CustomerSim
dialogues of a tiny causal LM pre-trained on WikiText-2, then continually pre-trained on
CustomerSim dialogues raw (Oracle), masked with ``<MASK>`` a token (Baseline0), masked
with zero loss on ``<MASK>`` (Baseline1), and masked then refilled by a tiny BERT filler
(Top-1, Top-K, and Top-K after fine-tuning the filler on the masked corpus), for each
masking technique; the expected order (Oracle best, refills
between it and the baselines) checked. Writes benchmarks/results/refill_eval.{json,md}
and benchmarks/refill_eval.png.

    .venv/bin/python benchmarks/refill_eval.py [--train 1500] [--test 200] [--adapt-steps 200]

An interrupted run resumes (its work folder keeps every finished training).
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

from _common import ROOT, gutenberg_texts, machine, need_data, save_result, wikitext_corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=int, default=1500, help="CustomerSim training dialogues")
    ap.add_argument("--test", type=int, default=200, help="held-back test dialogues")
    ap.add_argument("--base-steps", type=int, default=600)
    ap.add_argument("--filler-steps", type=int, default=600)
    ap.add_argument("--adapt-steps", type=int, default=200)
    ap.add_argument("--filler-preset", default=None, help="preset of the filler trained here (default: the base "
                    "model's, tiny); small is the stronger filler")
    ap.add_argument("--filler-corpus", choices=("wikitext", "public"), default="wikitext",
                    help="what the filler learns from: WikiText-2 valid+test (2.3 MB), or public = that plus the "
                    "Gutenberg stories of squality_gutenberg (about 9 MB in all)")
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--ft-steps", type=int, default=200, help="fine-tuning steps of the filler on a masked corpus")
    ap.add_argument("--techniques", default="allow_list,vocab_threshold,entity_tagger")
    ap.add_argument("--work", default=str(ROOT / "benchmarks" / "work" / "refill_eval"))
    args = ap.parse_args()

    from experiments.refill_eval import EvalPlan, customersim_dialogues, evaluate, markdown, plot

    data = need_data()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base = wikitext_corpus(work)
    filler_corpus = None
    if args.filler_corpus == "public":
        filler_corpus = work / "public.jsonl"
        paras = [p.strip() for d in gutenberg_texts() for p in d.split("\n\n") if len(p.strip()) > 40]
        rows = [json.loads(line) for line in base.read_text(encoding="utf-8").splitlines()]
        rows += [{"doc_id": f"gutenberg-{i}", "text": p} for i, p in enumerate(paras)]
        filler_corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    train = work / "customersim-train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in customersim_dialogues(data / "customersim" / "train.jsonl",
                                                                        args.train)))
    test = [r["text"] for r in customersim_dialogues(data / "customersim" / "test.jsonl", args.test)]
    plan = EvalPlan(train=train, test=test, base_corpus=base, work=work,
                    techniques=tuple(args.techniques.split(",")), base_steps=args.base_steps,
                    filler_steps=args.filler_steps, filler_preset=args.filler_preset,
                    filler_corpus=filler_corpus, lr=args.lr, adapt_steps=args.adapt_steps, ft_steps=args.ft_steps)
    print(f"# {machine()}; {args.train} training and {len(test)} test dialogues (CustomerSim), base on WikiText-2 "
          f"valid+test, filler {args.filler_preset or 'tiny'} on {args.filler_corpus}", flush=True)
    result = evaluate(plan)
    result.update(date=str(date.today()), machine=machine())
    table = markdown(result)
    png = plot(result, ROOT / "benchmarks" / "refill_eval.png")
    print(f"\nbase model (WikiText-2 only): perplexity {result['base_perplexity']:.1f}\n")
    print(table)
    print("\nexpected order (paper 002):")
    for tech, checks in result["checks"].items():
        print(f"  {tech}: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in checks.items()))
    for name, r in result["refill"].items():
        print(f"  {name}: {r['masks_filled']} masks filled, the filler's first choice was the hidden word "
              f"{r['top_choice_original']} times of {r['original_known']}, {r['fills_on_allow_list']} fills "
              "on the allow list")
    save_result("refill_eval", result)
    (ROOT / "benchmarks" / "results" / "refill_eval.md").write_text(table + "\n")
    print(f"\nplot: {png}; took {result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
