"""The ``identifiers`` stage's graph build (issue 22, paper 003): throughput on one core,
and its cost beside training.

1. **Throughput, one core.** Gutenberg paragraphs repeated to ``MB`` megabytes, each a
   record of one of ``--individuals`` (100,000) individuals, each copy's records opened
   by a sentence unique to the record (so that identifiers exist). The graph build is
   the stage's ``keys`` and ``decide`` over every batch (``privatize.execution
   .decide_global_stage``, what both runners call); ``apply`` (writing the spans) is
   timed apart. Baseline in the same run: the plain loop (regex words per sentence, a
   dict of term -> set of individuals, the terms under k), for ``max_n`` 1, 2 and 3.
   Goal: >= 20 MB/s per core for n <= 2.
2. **Cost beside training** (``--cost``): on the first ``--cost-dialogues`` CustomerSim
   dialogues, the graph build, the redaction detector (NER, ``direct: detect``) and one
   epoch of tiny-model training (``privatize train``) on the same text; the paper reports
   graph 0.3% and NER 7% of fine-tuning.

    python benchmarks/identifiers_throughput.py [MB] [--repeats N] [--cost]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from _common import individuals_corpus, machine, median_time, need_data, one_core, save_result

one_core()

import pyarrow as pa  # noqa: E402

from privatize import RunOptions  # noqa: E402
from privatize.execution import apply_global_batch, decide_global_stage  # noqa: E402
from privatize.records import INTERNAL_SCHEMA  # noqa: E402
from privatize.stages.identifiers import Identifiers, IdentifiersSettings  # noqa: E402

_SENT = re.compile(r"[.!?\n]+")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*(?:-[^\W_]+(?:['’][^\W_]+)*)*")


def naive(texts: list[str], people: list[str], max_n: int, k: int = 2) -> int:
    """The plain loop: per sentence, lower-cased words and their n-grams into a dict of
    term -> set of individuals; the identifiers are the terms under ``k``."""
    users: dict[str, set] = defaultdict(set)
    for text, who in zip(texts, people):
        for sent in _SENT.split(text):
            words = _WORD.findall(sent.lower())
            for i in range(len(words)):
                for n in range(1, min(max_n, len(words) - i) + 1):
                    users[" ".join(words[i:i + n])].add(who)
    return sum(1 for v in users.values() if len(v) < k)


def batches(texts: list[str], people: list[str], size: int) -> list[pa.Table]:
    out = []
    for i in range(0, len(texts), size):
        chunk = texts[i:i + size]
        n = len(chunk)
        out.append(pa.table({"doc_id": [f"d{i + j}" for j in range(n)], "text": chunk,
                             "individual_id": people[i:i + n], "meta": [None] * n, "_src": [0] * n,
                             "_line": list(range(i, i + n)), "_seg": [0] * n, "_quarantine": [None] * n},
                            schema=INTERNAL_SCHEMA))
    return out


def throughput(args) -> None:
    texts, people = individuals_corpus(args.mb, args.individuals)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    bs = batches(texts, people, args.batch_docs)
    print(f"corpus: {len(texts)} Gutenberg paragraphs = {mb:.0f} MB of {len(set(people))} individuals, batches of "
          f"{args.batch_docs}; one core ({machine()}); median of {args.repeats}")
    print(f"{'max_n':>5} {'graph build':>12} {'naive loop':>12} {'ratio':>7} {'apply':>10}  identifiers")
    for max_n in (1, 2, 3):
        stage = Identifiers(IdentifiersSettings(direct="none", max_n=max_n))
        router = decide_global_stage(stage, bs)
        t_graph = median_time(lambda: decide_global_stage(stage, bs), args.repeats)
        t0 = time.perf_counter()
        out = [apply_global_batch(stage, 0, b, router) for b in bs]
        t_apply = time.perf_counter() - t0
        ours = sum(router.stats[f"identifiers_n{n}"] for n in range(1, max_n + 1))  # the decisions' count
        del out, router
        t_naive = median_time(lambda: naive(texts, people, max_n), max(1, args.repeats // 2))
        expected = naive(texts, people, max_n)
        same = "same as the loop" if expected == ours else f"the loop finds {expected}"
        print(f"{max_n:>5} {mb / t_graph:8.1f} MB/s {mb / t_naive:8.1f} MB/s {t_naive / t_graph:6.2f}x "
              f"{mb / t_apply:6.1f} MB/s  {ours} ({same})")
    print("goal >= 20 MB/s per core for n <= 2")


def cost(args) -> None:
    """Graph build, NER and one training epoch on the same dialogues."""
    from experiments.identifier_eval import customersim_by_customer
    from experiments.refill_eval import write_jsonl
    from privatize import run
    from privatize.spec import parse_spec
    from train.config import parse_config
    from train.run import run_training

    rows = customersim_by_customer(need_data() / "customersim" / "train.jsonl", args.cost_dialogues)
    mb = sum(len(r["text"].encode()) for r in rows) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        src = write_jsonl(rows, Path(tmp) / "in" / "c.jsonl")
        secs = {}
        for name, direct in (("graph build", "none"), ("graph build + NER", "detect")):
            m = run(parse_spec({"stages": [{"kind": "identifiers", "direct": direct}]}), src.parent,
                    Path(tmp) / f"out-{direct}")
            secs[name] = next(s["seconds"] for s in m["stages"] if s["kind"] == "identifiers")
        secs["NER"] = secs["graph build + NER"] - secs["graph build"]
        summary = run_training(parse_config({
            "version": 1, "kind": "pretrain", "output": str(Path(tmp) / "train"),
            "data": {"path": str(Path(tmp) / "out-none"), "seq_len": 128}, "model": {"preset": "tiny"},
            "tokenizer": {"vocab_size": 4096}, "checkpoint_every": 10_000_000, "report_every": 10_000_000,
            "optim": {"batch_size": 16, "lr": 0.002, "warmup_steps": 10, "epochs": 1}}), progress=False)
    epoch = summary["seconds"]
    print(f"\ncost beside training: {len(rows)} CustomerSim dialogues ({mb:.2f} MB), one epoch of tiny-model training "
          f"{epoch:.1f} s ({summary.get('tokens')} tokens)")
    for name in ("graph build", "NER"):
        print(f"  {name:<12} {secs[name]:7.2f} s = {100 * secs[name] / epoch:5.2f}% of the epoch "
              f"(paper 003: {'0.3' if name == 'graph build' else '7'}% of fine-tuning)")
    res = {"mb": mb, "epoch_s": epoch, **{k: round(v, 3) for k, v in secs.items()}}
    print(json.dumps(res))
    save_result("identifiers_throughput", {"machine": machine(), **res})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mb", nargs="?", type=float, default=50.0, help="corpus size to reach (MB)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--individuals", type=int, default=100_000)
    ap.add_argument("--batch-docs", type=int, default=RunOptions().batch_size)
    ap.add_argument("--cost", action="store_true", help="also: graph and NER time beside one training epoch")
    ap.add_argument("--cost-dialogues", type=int, default=1000)
    args = ap.parse_args()
    throughput(args)
    if args.cost:
        cost(args)


if __name__ == "__main__":
    main()
