"""Crypto-LLM Table 8 at small scale: unigram and 2- to 4-gram conditional entropies
(bits) of a corpus and of its Vigenere ciphertexts with keys of length 1, 10 and 100.

Corpus: the squality_gutenberg stories (``--docs``). Tokens: a byte-level BPE tokenizer
(the project's, ``--vocab``) trained on each text kind, as a model trained on that kind
would see it (the paper counts its tokenizer's tokens). Baseline in the same run: the
plaintext row. The paper's ordering to compare: key 1 equals plaintext; keys 10 and 100
raise the unigram entropy and lower the 3- and 4-gram conditional entropies.

    .venv/bin/python -m experiments.corpus_entropy [--docs 60] [--vocab 8192]
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from experiments.common import gutenberg_texts, machine, save_result

PAPER = {"plaintext": (10.760, 7.373, 4.608, 2.106), "key 1": (10.756, 7.372, 4.614, 2.109),
         "key 10": (12.276, 7.233, 4.116, 1.839), "key 100": (12.446, 8.049, 3.741, 1.624)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--vocab", type=int, default=8192)
    args = ap.parse_args()

    from attacks.corpus_stats import ngram_entropies
    from privatize.ciphers.vigenere import Vigenere
    from privatize.keys import new_key
    from train.tokenizer import train_tokenizer

    plain = gutenberg_texts()[: args.docs]
    kinds = {"plaintext": plain}
    for length in (1, 10, 100):
        v = Vigenere(new_key("vigenere", length=length).letters)
        kinds[f"key {length}"] = [v.encrypt(t) for t in plain]
    rows = {}
    for name, texts in kinds.items():
        tok = train_tokenizer(texts, args.vocab)
        ids = tok(texts, add_special_tokens=False)["input_ids"]
        rows[name] = {"tokens": sum(map(len, ids)), **ngram_entropies(ids, unit="token", max_n=4)}
    print(f"{'text':<10} {'tokens':>9} {'unigram':>8} {'2-gram':>7} {'3-gram':>7} {'4-gram':>7}   paper")
    for name, r in rows.items():
        print(f"{name:<10} {r['tokens']:>9,} {r['unigram']:>8.3f} {r['2']:>7.3f} {r['3']:>7.3f} {r['4']:>7.3f}   "
              + " / ".join(f"{x:.3f}" for x in PAPER[name]))
    res = {"benchmark": "corpus_entropy", "date": datetime.now(UTC).strftime("%Y-%m-%d"), "machine": machine(),
           "docs": len(plain), "vocab": args.vocab, "rows": rows, "paper": PAPER}
    print(json.dumps(res))
    save_result("corpus_entropy", res)


if __name__ == "__main__":
    main()
