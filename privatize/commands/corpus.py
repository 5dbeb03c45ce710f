"""``privatize make-corpus``: a seeded synthetic corpus with fake PII and gold spans
(``privatize.corpus.make_corpus``); prints its summary as one JSON line."""

from __future__ import annotations

import argparse
import json

ORDER = 20  # where `privatize --help` lists this module's commands


def _make_corpus(args: argparse.Namespace) -> int:
    from privatize.corpus import make_corpus

    info = make_corpus(args.out, n_docs=args.docs, seed=args.seed, repeat_fraction=args.repeat_fraction)
    print(json.dumps(info))
    return 0


def register(sub) -> None:
    m = sub.add_parser("make-corpus", help="generate a seeded corpus with fake PII and gold spans")
    m.add_argument("--out", required=True, help="output JSONL file")
    m.add_argument("--docs", type=int, default=200)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--repeat-fraction", type=float, default=0.2,
                   help="share of sentences that are boilerplate repeated across documents")
    m.set_defaults(func=_make_corpus)
