"""Paper 003 at small scale (issue 22): a tiny causal LM pre-trained on WikiText-2, then
continually pre-trained on the CustomerSim dialogues of half the customers, plainly and
with privacy-preserving causal LM (PPCLM: the identifiers stage's direct and indirect
identifiers never prediction targets; also IPPCLM and DPPCLM, one kind each). Each model
is asked what it predicts and regurgitates of the identifiers (Privacy, direct and
indirect), the low-cost and the loss membership inference per customer, and perplexity on
the other customers' dialogues. Writes benchmarks/results/identifier_eval.{json,md} and
benchmarks/identifier_eval.png.

With ``--mlm``, the masked-LM side instead: a tiny BERT pre-trained on WikiText-2 (kind
mlm, as refill_eval's filler; ``--filler`` reuses one), fine-tuned on the same members'
dialogues plainly (MLM) and with PPMLM (identifier tokens never chosen as masks); which
identifiers each predicts when they are masked, the same Privacy and membership
inferences, and masked-token accuracy on the other customers' dialogues. Writes
benchmarks/results/identifier_eval_mlm.{json,md} and benchmarks/identifier_eval_mlm.png.

    .venv/bin/python benchmarks/identifier_eval.py [--dialogues 400] [--adapt-steps 400]
    .venv/bin/python benchmarks/identifier_eval.py --mlm [--filler benchmarks/work/refill_eval/filler/model]

An interrupted run resumes (its work folder keeps every finished training).
"""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

from _common import ROOT, machine, need_data, save_result, wikitext_corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dialogues", type=int, default=400, help="CustomerSim dialogues (members and held out)")
    ap.add_argument("--base-steps", type=int, default=600)
    ap.add_argument("--adapt-steps", type=int, default=400)
    ap.add_argument("--methods", default=None, help="default plain,ppclm,ppclm_indirect,ppclm_direct; "
                    "with --mlm, mlm,ppmlm")
    ap.add_argument("--direct", default="detect", choices=["detect", "none"])
    ap.add_argument("--work", default=None, help="default benchmarks/work/identifier_eval (_mlm with --mlm)")
    ap.add_argument("--mlm", action="store_true", help="the masked-LM side (MLM against PPMLM)")
    ap.add_argument("--filler", default=None, help="--mlm: a base masked-LM folder instead of training one")
    ap.add_argument("--filler-steps", type=int, default=600)
    ap.add_argument("--mlm-steps", type=int, default=None, help="--mlm: fine-tuning steps (default --adapt-steps)")
    args = ap.parse_args()
    name = "identifier_eval_mlm" if args.mlm else "identifier_eval"
    methods = args.methods or ("mlm,ppmlm" if args.mlm else "plain,ppclm,ppclm_indirect,ppclm_direct")
    args.work = args.work or str(ROOT / "benchmarks" / "work" / name)

    from experiments.identifier_eval import (IdentifierPlan, customersim_by_customer, evaluate, markdown, mlm_markdown,
                                         mlm_plot, plot)
    from experiments.refill_eval import write_jsonl

    data = need_data()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base = wikitext_corpus(work)
    corpus = write_jsonl(customersim_by_customer(data / "customersim" / "train.jsonl", args.dialogues),
                         work / "customersim.jsonl")
    plan = IdentifierPlan(corpus=corpus, base_corpus=base, work=work, methods=tuple(methods.split(",")),
                          direct=args.direct, base_steps=args.base_steps, adapt_steps=args.adapt_steps,
                          filler=Path(args.filler) if args.filler else None, filler_steps=args.filler_steps,
                          mlm_steps=args.mlm_steps)
    print(f"# {machine()}; {args.dialogues} CustomerSim dialogues, base model on WikiText-2 valid+test", flush=True)
    result = evaluate(plan)
    result.update(date=str(date.today()), machine=machine())
    tables = ([markdown(result)] if result["models"] else []) + ([mlm_markdown(result)] if "mlm_models" in result
                                                                  else [])
    table = "\n\n".join(tables)
    png = (mlm_plot if args.mlm else plot)(result, ROOT / "benchmarks" / f"{name}.png")
    g = result["graph"]
    print(f"\nthe members' graph: {100 * g['share_of_distinct_words']:.1f}% of {g['distinct_words']} distinct words "
          f"are indirect identifiers ({100 * g['share_of_word_occurrences']:.1f}% of word occurrences); "
          f"{g['identifier_terms']} of {g['distinct_terms']} distinct terms (n <= {plan.max_n}); "
          f"indirect identifiers per customer: median {g['indirect_per_individual']['median']:.0f}\n")
    print(table)
    print("\npaper 003's claims: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["checks"].items()))
    save_result(name, result)
    (ROOT / "benchmarks" / "results" / f"{name}.md").write_text(table + "\n")
    print(f"\nplot: {png}; took {result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
