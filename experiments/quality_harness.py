"""The QuALITY harness (issue 20, :mod:`experiments.quality_eval`): a few QuALITY articles
through redact (AES-SIV entity tokens) and entity-graph ``synthesize`` against an
OpenAI-compatible LLM, the synthetic entity tokens decrypted with the key (SoE's Table 5)
and the growth factor measured; then continual pre-training (Ray Train) of one base model
on the raw articles and on the decrypted synthetic text, and closed-book multiple-choice
accuracy (acc, acc_norm) of the base and each adapted model on the articles' questions.
Writes benchmarks/results/quality_harness.json and benchmarks/results/quality_harness.png.

By default the base model is the tiny preset pre-trained here on WikiText-2, and the LLM
is that same model served by ``transformers serve`` on loopback: accuracies are then near
chance (25%) and the run checks the mechanics. To measure the effect, give a real model:

    .venv/bin/python -m experiments.quality_harness [--articles 3] [--adapt-steps 100]
    .venv/bin/python -m experiments.quality_harness --base-model DIR --device cuda \\
        --llm-url http://127.0.0.1:8000/v1 --llm-model NAME [--llm-api-key env:NAME] \\
        --max-entities 20 --max-k 10 --max-tokens 512 --articles 34

``--scripted`` points synthesis at the tests' scripted OpenAI-compatible server (a
labelled test double: every pair scores 0.9, each answer a template naming its tuple's
entities) so that every arm runs, training on synthetic text and SoE's Table 5 included:
a check of the mechanics that says nothing about synthesis' effect.

An interrupted run resumes (its work folder keeps every finished step).
"""

from __future__ import annotations

import argparse
import os
from datetime import date
from pathlib import Path

from experiments.common import ROOT, machine, need_data, save_result, wikitext_corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--articles", type=int, default=3, help="QuALITY articles (of 34), with their questions")
    ap.add_argument("--base-model", default=None,
                    help="a local Hugging Face causal-LM folder (default: the tiny preset, pre-trained here)")
    ap.add_argument("--base-steps", type=int, default=300, help="pre-training steps of the tiny base model")
    ap.add_argument("--adapt-steps", type=int, default=100, help="continual pre-training steps per arm")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--llm-url", default=None, help="an OpenAI-compatible base URL (default: serve the base model)")
    ap.add_argument("--llm-model", default=None, help="the model name at --llm-url")
    ap.add_argument("--llm-api-key", default=None, help="a reference: env:NAME or file:PATH, never the key")
    ap.add_argument("--scripted", action="store_true",
                    help="synthesize against the tests' scripted server (a test double): mechanics only")
    ap.add_argument("--max-entities", type=int, default=4)
    ap.add_argument("--max-k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48, help="per LLM answer")
    ap.add_argument("--in-flight", type=int, default=4, help="LLM requests in flight")
    ap.add_argument("--arms", default="base,raw,synthetic",
                    help="of base, raw, synthetic, raw_encrypted, synthetic_encrypted")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (training, scoring and the served model)")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPUs of the training worker")
    ap.add_argument("--work", default=str(ROOT / "benchmarks" / "work" / "quality_harness"))
    args = ap.parse_args()

    import contextlib

    from experiments.quality_eval import QualityPlan, evaluate, markdown, plot

    if args.scripted and args.llm_url:
        ap.error("--scripted and --llm-url are two endpoints: give one")
    double = contextlib.nullcontext()
    if args.scripted:
        from tests.llm_double import ScriptedLLM

        double = ScriptedLLM()
    data = need_data()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    stack = contextlib.ExitStack()
    llm = stack.enter_context(double)
    if args.scripted:
        args.llm_url, args.llm_model = llm.url, "scripted"
    plan = QualityPlan(
        data=data / "quality" / "quality_dev_fulltext.jsonl", work=work,
        base_corpus=None if args.base_model else wikitext_corpus(work),
        base_model=Path(args.base_model) if args.base_model else None, articles=args.articles,
        base_steps=args.base_steps, adapt_steps=args.adapt_steps, seq_len=args.seq_len, batch_size=args.batch_size,
        lr=args.lr, llm_url=args.llm_url, llm_model=args.llm_model, llm_api_key=args.llm_api_key,
        synthesize={"max_entities": args.max_entities, "max_k": args.max_k},
        llm={"max_tokens": args.max_tokens, "max_in_flight": args.in_flight, "timeout_s": 600},
        arms=tuple(args.arms.split(",")), device=args.device, cpus=min(args.cpus, 64))
    print(f"# {machine()}; device {args.device}; base model "
          f"{args.base_model or f'tiny preset, {args.base_steps} steps on WikiText-2 valid+test'}; LLM "
          + ("the scripted test double (mechanics only)" if args.scripted
             else args.llm_url or "the base model via transformers serve on loopback"), flush=True)
    with stack:
        result = evaluate(plan)
    result["scripted_llm"] = args.scripted
    result.update(date=str(date.today()), machine=machine())

    st, g, t5 = result["synthesize_stats"], result["growth"], result["table5"]
    print()
    if result["note"]:
        print(f"NOTE: {result['note']}\n")
    print(markdown(result))
    answered = st["samples"] + st["filtered_empty"] + st["filtered_format"] + st["filtered_entities"]
    print(f"\nsynthesis ({result['endpoint']}): {st['requests']} requests, {st['score_missing']} unreadable scores "
          f"(+{st['score_out_of_range']} out of range), {st['edges']} edges, {st['tuples']} tuples; "
          f"{st['samples']} of {answered} samples kept (filtered: empty {st['filtered_empty']}, "
          f"format {st['filtered_format']}, entities {st['filtered_entities']})")
    print(f"growth: {g['requests_per_article']:.1f} requests per article, {g['tokens_in_per_article']:,.0f} tokens in "
          f"and {g['tokens_out_per_article']:,.0f} out per article; {g['synthetic_tokens_per_source_token']:.4f} "
          f"synthetic tokens per source token ({g['synthetic_tokens']:,} of {g['source_tokens']:,}, the base "
          f"tokenizer); all answers: {g['tokens_out_per_source_token']:.4f} tokens out per source token")
    a5 = result["table5_articles"]
    print(f"Table 5: {t5['total_tokens']} entity tokens in the synthetic text, {t5['invalid']} failures, "
          f"origin {t5['origin']}; the redacted articles themselves: {a5['ok']} of {a5['total_tokens']} "
          "tokens decrypt")
    print(f"phases (s): {result['phases']}; took {result['seconds']:.0f} s")
    name = "quality_harness_scripted" if args.scripted else "quality_harness"
    save_result(name, result)
    png = plot(result, ROOT / "benchmarks" / "results" / f"{name}.png")
    print(f"plot: {png}")


if __name__ == "__main__":
    main()
