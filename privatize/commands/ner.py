"""``privatize train-ner``: fine-tune the default spaCy model's NER on generated PII data,
or, with ``--annotated FILE``, adapt it to a tenant's annotated sample into a detector folder
(:mod:`privatize.redaction.adapt`).

Offline, on a data folder (``--data``, required): see :mod:`privatize.redaction.ner_training`
for the data, the training and the selection. Writes a spaCy model directory (``--output``,
which must not exist yet, unless ``--force``) usable as ``--model`` / ``Detector(model=DIR)``.
Progress goes to stderr; the last line on stdout is a one-line JSON summary. Bad arguments
(a missing parent directory, ``--epochs`` out of range, data not found) exit 2 with one
line, before any model is loaded.
"""

from __future__ import annotations

import argparse
import json
import sys

ORDER = 50  # where `privatize --help` lists this module's commands


def _adapt(args: argparse.Namespace) -> int:
    from privatize.redaction.adapt import DEFAULT_EPOCHS_ADAPT, adapt, check_arguments, parse_map
    from privatize.redaction.terms import parse_terms_option

    epochs = args.epochs if args.epochs is not None else DEFAULT_EPOCHS_ADAPT
    check_arguments(args.annotated, args.output, fmt=args.format, epochs=epochs, seed=args.seed,
                    holdout=args.holdout, force=args.force, general_rehearsal=args.general_rehearsal,
                    batch_size=args.batch_size, max_updates=args.max_updates)
    label_map = parse_map(args.map)
    terms = parse_terms_option(args.terms)

    def progress(msg: str) -> None:
        print(f"train-ner: {msg}", file=sys.stderr, flush=True)

    doc = adapt(args.annotated, args.output, fmt=args.format, base=args.base, epochs=epochs, seed=args.seed,
                holdout=args.holdout, label_map=label_map, rehearsal=not args.no_rehearsal, complete=args.complete,
                terms=terms, sample_terms=not args.no_sample_terms, general_rehearsal=args.general_rehearsal,
                batch_size=args.batch_size, max_updates=args.max_updates, force=args.force, progress=progress)
    ev, be = doc["evaluation"], doc["base_evaluation"]
    keys = ("recall", "miss_rate_upper_95", "char_recall", "char_precision", "span_precision")
    print(json.dumps({"output": args.output, "score_threshold": doc["score_threshold"],
                      "held_out": {k: ev[k] for k in keys}, "base_held_out": {k: be[k] for k in keys},
                      "records": doc["provenance"]["records"],
                      "held_out_records": doc["provenance"]["held_out_records"],
                      "terms": (doc.get("terms") or {}).get("terms", 0),
                      "seconds": doc["provenance"]["seconds"]}))
    return 0


def _train(args: argparse.Namespace) -> int:
    from privatize.redaction.ner_training import DEFAULT_EPOCHS, check_arguments, train_ner

    if args.annotated is not None:
        return _adapt(args)
    if args.epochs is None:
        args.epochs = DEFAULT_EPOCHS

    check_arguments(args.output, examples=args.examples, epochs=args.epochs, seed=args.seed, data_dir=args.data,
                    force=args.force)

    def progress(msg: str) -> None:
        print(f"train-ner: {msg}", file=sys.stderr, flush=True)

    summary = train_ner(args.output, examples=args.examples, epochs=args.epochs, seed=args.seed, base=args.base,
                        data_dir=args.data, force=args.force, progress=progress)
    best = summary["history"][summary["best_epoch"]]
    print(json.dumps({"output": args.output, "best_epoch": summary["best_epoch"], "epochs_run": summary["epochs_run"],
                      "gold_dev_f1": best["gold_dev_f1"], "rehearsal_dev_f1": best["rehearsal_dev_f1"],
                      "base_gold_dev_f1": summary["history"][0]["gold_dev_f1"], "counts": summary["counts"],
                      "seconds": summary["train_seconds"]}))
    return 0


def register(sub) -> None:
    try:
        from privatize.redaction.engine import DEFAULT_MODEL
        from privatize.redaction.adapt import (DEFAULT_BATCH_ADAPT, DEFAULT_EPOCHS_ADAPT, DEFAULT_GENERAL_REHEARSAL,
                                               DEFAULT_HOLDOUT, DEFAULT_MAX_UPDATES, FORMATS, MIN_BATCH_ADAPT,
                                               MIN_EPOCHS_CAPPED, MIN_UPDATES_PER_EPOCH)
        from privatize.redaction.ner_training import DEFAULT_EPOCHS, DEFAULT_EXAMPLES
    except ImportError:  # the redaction component is absent: no train-ner command
        return

    p = sub.add_parser("train-ner", help="fine-tune the spaCy NER on generated PII data (offline) into a model dir")
    p.add_argument("--output", required=True, help="the model directory to write (must not exist)")
    p.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES,
                   help="gold records (about half presidio-research generated_large, half CustomerSim user turns), "
                        f"plus as many rehearsal sentences (default {DEFAULT_EXAMPLES})")
    p.add_argument("--epochs", type=int, default=None,
                   help=f"at most this many epochs; the best on the dev slice is kept (default {DEFAULT_EPOCHS}; "
                        f"with --annotated: this many, fewer past --max-updates, default {DEFAULT_EPOCHS_ADAPT})")
    p.add_argument("--seed", type=int, default=0, help="sampling, shuffling and initialisation seed (default 0)")
    p.add_argument("--data", default=None, help="required: the folder holding presidio_research, customersim and "
                   "squality_gutenberg (the project's development data; none ships with the package)")
    p.add_argument("--base", default=DEFAULT_MODEL, help=f"the spaCy model to start from (default {DEFAULT_MODEL})")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")
    a = p.add_argument_group("adaptation to an annotated sample (see privatize.redaction.adapt)")
    a.add_argument("--annotated", default=None, metavar="FILE",
                   help="adapt the NER to this annotated sample (with rehearsal), set pi's threshold on a held-out "
                        "slice and write a detector folder with its evaluation (--data and --examples unused)")
    a.add_argument("--format", default="jsonl", choices=FORMATS,
                   help="--annotated's format: jsonl (text, spans: start, end, type), tab (the Text Anonymization "
                        "Benchmark's JSON lines), multiwoz (MultiWOZ dialogues) (default jsonl)")
    a.add_argument("--holdout", type=float, default=DEFAULT_HOLDOUT,
                   help=f"share of records held out by a hash of their text (default {DEFAULT_HOLDOUT})")
    a.add_argument("--map", action="append", default=[], metavar="TYPE=LABEL",
                   help="train an annotated type as this spaCy label (PTName=PERSON); repeatable")
    a.add_argument("--complete", action="store_true",
                   help="the sample annotates everything this tenant redacts: the base model's other entities are "
                        "taught as outside (no rehearsal) and the detector redacts only the types the sample teaches")
    a.add_argument("--terms", action="append", default=[], metavar="TYPE=FILE",
                   help="a list of this tenant's terms, one per line, always redacted as TYPE wherever they stand as "
                        "whole words, any case (LOCATION=buildings.txt, PERSON=staff.txt); repeatable; stored hashed")
    a.add_argument("--no-sample-terms", action="store_true",
                   help="do not keep the terms the sample annotates (rare words and names mostly annotated where "
                        "they occur in its training part), which the detector otherwise always redacts")
    a.add_argument("--general-rehearsal", type=float, default=DEFAULT_GENERAL_REHEARSAL, metavar="R",
                   help="train beside the sample R times its characters of general sentences (the package's "
                        "stories) labelled by the base model, so that it keeps finding names the sample never shows "
                        f"(0: none; default {DEFAULT_GENERAL_REHEARSAL})")
    a.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help=f"pieces of text per update (default {DEFAULT_BATCH_ADAPT}, or as few as {MIN_BATCH_ADAPT} "
                        f"for a small sample, so that an epoch makes {MIN_UPDATES_PER_EPOCH} updates)")
    a.add_argument("--max-updates", type=int, default=DEFAULT_MAX_UPDATES, metavar="N",
                   help=f"stop after the epoch that reaches N updates, but not before {MIN_EPOCHS_CAPPED} epochs: a "
                        f"large sample needs fewer epochs (0: all --epochs; default {DEFAULT_MAX_UPDATES})")
    a.add_argument("--no-rehearsal", action="store_true", help="for comparison only: train without rehearsal")
    p.set_defaults(func=_train)
