"""Redaction speed: documents per second of the ``redact`` stage (batch detection with
spaCy ``nlp.pipe`` restricted to NER, compiled pattern recognizers, replacement) against
Presidio's ``AnalyzerEngine.analyze`` called one document at a time with the same spaCy
model, on the same documents of about 500 words, in one run, on one core.

Documents: presidio-research ``synth_dataset_v2.json`` sentences (PII-dense)
concatenated to 500 words each; ``--gutenberg`` uses the Gutenberg stories cut into
500-word pieces instead (little PII). Median of ``--repeats`` runs each. Target: 1.5x
Presidio (ENVIRONMENT.md puts the ceiling with zero Presidio overhead, tok2vec+ner, at
about 1.75x; this model's NER carries its own tok2vec, so NER alone runs).

Usage: ``python benchmarks/redaction_speed.py [--docs N] [--model NAME] [--repeats R]
[--gutenberg] [--append]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from _common import ROOT, gutenberg_texts, machine, need_data, one_core, save_result

one_core()  # before numpy / spaCy start any thread pool
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pyarrow as pa  # noqa: E402

from privatize.redaction.engine import DEFAULT_MODEL, presidio_analyzer_engine  # noqa: E402

WORDS = 500


def synth_documents(n: int) -> list[str]:
    items = json.loads((need_data() / "presidio_research" / "synth_dataset_v2.json").read_text(encoding="utf-8"))
    docs, cur, count, i = [], [], 0, 0
    while len(docs) < n:
        sent = items[i % len(items)]["full_text"]
        i += 1
        cur.append(sent)
        count += len(sent.split())
        if count >= WORDS:
            docs.append(" ".join(cur))
            cur, count = [], 0
    return docs


def gutenberg_documents(n: int) -> list[str]:
    docs = []
    for story in gutenberg_texts():
        words = story.split(" ")
        for k in range(0, len(words) - WORDS, WORDS):
            docs.append(" ".join(words[k:k + WORDS]))
            if len(docs) == n:
                return docs
    return docs


def dialogue_turns(n: int) -> list[str]:
    """Short dialogue turns: CustomerSim test dialogues split into their lines."""
    turns = []
    for line in open(need_data() / "customersim" / "test.jsonl", encoding="utf-8"):
        turns += [t for t in json.loads(line)["text"].split("\n") if t.strip()]
        if len(turns) >= n:
            break
    return turns[:n]


def as_batch(texts: list[str]) -> pa.Table:
    n = len(texts)
    return pa.table({"doc_id": [f"d{i}" for i in range(n)], "text": texts, "individual_id": [None] * n,
                     "meta": [None] * n, "_src": pa.array([0] * n, pa.int32()),
                     "_line": pa.array(range(n), pa.int64()), "_seg": pa.array([0] * n, pa.int32())})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--model", default=DEFAULT_MODEL, help="the redact stage's model: a spaCy model's name or a "
                    "folder, such as a detector `privatize train-ner --annotated` wrote (issue 51: adapted "
                    "detection against Presidio's defaults)")
    ap.add_argument("--presidio-model", default=DEFAULT_MODEL, help="the model Presidio's analyzer runs with "
                    "(default: the same default model)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gutenberg", action="store_true")
    ap.add_argument("--turns", action="store_true", help="short dialogue turns (CustomerSim lines) instead of "
                                                          "500-word documents; --docs counts turns")
    ap.add_argument("--append", action="store_true", help="append a row to benchmarks/results/DIARY.md")
    args = ap.parse_args()

    from privatize.stages.redact import Redact, RedactSettings

    if args.turns:
        texts = dialogue_turns(args.docs)
    else:
        texts = gutenberg_documents(args.docs) if args.gutenberg else synth_documents(args.docs)
    words = statistics.mean(len(t.split()) for t in texts)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    batch = as_batch(texts)

    stage = Redact(RedactSettings(model=args.model))
    stage.setup()
    strict = Redact(RedactSettings(model=args.model, pi_c="strict"))  # issue 50: what the calibrated pi_c costs
    strict.setup()
    strict.process_batch(as_batch(texts[:8]))
    engine = presidio_analyzer_engine(args.presidio_model)
    stage.process_batch(as_batch(texts[:8]))  # warm-up: first calls allocate
    for t in texts[:8]:
        engine.analyze(t, language="en")

    ours, base, strict_runs = [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = stage.process_batch(batch)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        strict.process_batch(batch)
        strict_runs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for t in texts:
            engine.analyze(t, language="en")
        base.append(time.perf_counter() - t0)
    o, b = statistics.median(ours), statistics.median(base)
    st = statistics.median(strict_runs)
    n = len(texts)
    ratio = b / o
    kind = ("CustomerSim dialogue turns" if args.turns else "Gutenberg" if args.gutenberg
            else "presidio-research sentences")
    spans = sum(len(s) for s in out["spans"].to_pylist() if s)
    print(f"{n} documents of {words:.0f} words ({kind}, {mb:.2f} MB), model {args.model} (Presidio: "
          f"{args.presidio_model}), one core, median of {args.repeats}")
    print(f"redact stage:           {n / o:6.2f} docs/s  ({mb / o:.3f} MB/s, {spans} spans)")
    print(f"Presidio analyze (1x1): {n / b:6.2f} docs/s  ({mb / b:.3f} MB/s)")
    print(f"ratio: {ratio:.2f}x (target 1.5x: {'met' if ratio >= 1.5 else 'NOT met'})")
    print(f"pi_c: strict stage:     {n / st:6.2f} docs/s; the calibrated pi_c (the default) costs "
          f"{100 * (o / st - 1):+.1f}% time (target at most +10%)")
    adapted = args.model != DEFAULT_MODEL
    result = {"docs": n, "words": words, "corpus": kind, "model": "adapted detector folder" if adapted else args.model,
              "presidio_model": args.presidio_model, "machine": machine(),
              "stage_docs_per_s": n / o, "presidio_docs_per_s": n / b, "ratio": ratio,
              "stage_runs_s": ours, "presidio_runs_s": base, "strict_docs_per_s": n / st,
              "strict_runs_s": strict_runs, "calibrated_cost": o / st - 1}
    save_result(f"redaction_speed{'-gutenberg' if args.gutenberg else '-turns' if args.turns else ''}"
                f"{'-adapted' if adapted else ''}", result)
    if args.append:
        with open(ROOT / "benchmarks" / "results" / "DIARY.md", "a", encoding="utf-8") as fh:
            fh.write(f"| {kind}, {n} docs x {words:.0f} words | `{args.model}` | {n / o:.2f} | {n / b:.2f} | "
                     f"{ratio:.2f}x |\n")


if __name__ == "__main__":
    main()
