"""Crypto-LLM (paper 000) at small scale: Table 2 (tokens per character) and Figure 5
(continual pre-training on plaintext from a cipher-pretrained model vs from scratch).

Table 2: for plaintext and for ciphertext under keys of length 1, 10 and 100 (the
product's Vigenere cipher, a fresh random key each), a byte-level BPE tokenizer (the
product's, ``--vocab`` tokens) is trained on squality_gutenberg train and measured on dev.
The paper (SentencePiece, 32k, FineWeb-Edu): plain 0.228, key 1 0.229, key 10 0.304,
key 100 0.412; the ordering plain ~ key 1 < key 10 < key 100 should hold.

Figure 5: ``tiny`` preset, one shared tokenizer trained on cipher (key 10) and plain text;
stage 1 pre-trains on ciphertext, stage 2 continues on plaintext; the baseline pre-trains
on plaintext from scratch for the same steps. Loss curves plotted to
benchmarks/results/crypto_llm_fig5.png.

    .venv/bin/python -m experiments.crypto_llm table2 [--vocab 8192]
    .venv/bin/python -m experiments.crypto_llm fig5 [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from experiments.common import ROOT, machine, need_data, save_result


def _texts(split: str) -> list[str]:
    d = need_data() / "squality_gutenberg"
    return [json.loads(x)["document"] for x in open(d / f"{split}.jsonl", encoding="utf-8")]


def _encrypt(texts: list[str], length: int) -> list[str]:
    import pyarrow as pa

    from privatize.ciphers.vigenere import Vigenere
    from privatize.keys import new_key

    v = Vigenere(new_key("vigenere", length=length).letters)
    return v.encrypt_array(pa.array(texts)).to_pylist()


def table2(vocab: int) -> None:
    from train.tokenizer import tokens_per_char, train_tokenizer

    train, dev = _texts("train"), _texts("dev")
    print(f"# {machine()}; byte-level BPE, vocabulary {vocab}, trained on squality train "
          f"({sum(map(len, train)) / 1e6:.1f}M chars), measured on dev ({sum(map(len, dev)) / 1e6:.1f}M chars)")
    paper = {"plain": 0.228, "key 1": 0.229, "key 10": 0.304, "key 100": 0.412}
    rows = []
    for name, length in (("plain", 0), ("key 1", 1), ("key 10", 10), ("key 100", 100)):
        tr, dv = (train, dev) if not length else _encrypt_pair(train, dev, length)
        tok = train_tokenizer(tr, vocab, 2, 0)
        rows.append((name, tokens_per_char(tok, dv)))
        print(f"{name:8s} {rows[-1][1]:.3f} tokens/char (paper {paper[name]})", flush=True)
    order = [r[1] for r in rows]
    print("| text | tokens per character | paper (32k SentencePiece, FineWeb-Edu) |\n|---|---:|---:|")
    for name, v in rows:
        print(f"| {name} | {v:.3f} | {paper[name]} |")
    ordered = order[0] <= order[1] * 1.02 and order[1] < order[2] < order[3]
    print(f"ordering plain <= key 1 < key 10 < key 100: {ordered}")
    save_result("crypto_llm_table2", {"machine": machine(), "vocab": vocab, "paper": paper, "ordered": ordered,
                                      "tokens_per_char": dict(rows)})


def _encrypt_pair(train: list[str], dev: list[str], length: int) -> tuple[list[str], list[str]]:
    both = _encrypt(train + dev, length)  # one key for both
    return both[: len(train)], both[len(train):]


def fig5(steps: int, docs: int) -> None:
    import ray

    from privatize.ray import local_init_args
    from train.config import parse_config
    from train.run import run_training

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **local_init_args(2))
    plain = _texts("train")[:docs]
    cipher = _encrypt(plain, 10)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for name, texts in (("plain", plain), ("cipher", cipher)):
            with open(t / f"{name}.jsonl", "w", encoding="utf-8") as f:
                for x in texts:
                    f.write(json.dumps({"text": x}) + "\n")

        def cfg(kind, data, out, **kw):
            c = {"version": 1, "kind": kind, "data": {"path": str(t / f"{data}.jsonl"), "seq_len": 128},
                 "model": {"preset": "tiny"}, "optim": {"batch_size": 16, "max_steps": steps, "epochs": 50, "lr": 2e-3,
                                                         "warmup_steps": 20},
                 "workers": {"num_workers": 2}, "output": str(t / out), "checkpoint_every": 100000,
                 "report_every": 10}
            c.update(kw)
            return parse_config(c)

        s1 = run_training(cfg("pretrain", "cipher", "stage1", tokenizer={"also_on": [str(t / "plain.jsonl")]}),
                          progress=False)
        run_training(cfg("continue", "plain", "stage2", model={"preset": None, "checkpoint": str(t / "stage1" / "model")}),
                     progress=False)
        run_training(cfg("pretrain", "plain", "scratch", tokenizer={"path": str(t / "stage1" / "tokenizer")}),
                     progress=False)
        curves = {k: [json.loads(x) for x in (t / k / "metrics.jsonl").read_text().splitlines()]
                  for k in ("stage1", "stage2", "scratch")}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, label in (("stage2", "plaintext, continued from the cipher model (key 10)"),
                     ("scratch", "plaintext, from scratch")):
        ax.plot([r["step"] for r in curves[k]], [r["loss"] for r in curves[k]], label=label)
    ax.set_xlabel("step (batch 16 x 128 tokens)")
    ax.set_ylabel("training loss")
    ax.set_title("Crypto-LLM Fig. 5 at small scale (tiny preset, shared tokenizer)")
    ax.legend()
    fig.tight_layout()
    png = ROOT / "benchmarks" / "results" / "crypto_llm_fig5.png"
    fig.savefig(png, dpi=120)
    print(f"# {machine()}; tiny preset, {docs} squality stories, {steps} steps per stage, 2 Ray Train workers")
    print(f"stage 1 (ciphertext) final loss {curves['stage1'][-1]['loss']:.3f} ({s1['tokenizer']['vocab_size']} tokens)")
    print("| step | continued from cipher | from scratch |\n|---:|---:|---:|")
    for a, b in zip(curves["stage2"], curves["scratch"]):
        if a["step"] in (10, 50, 100, 150, 200, 250, steps) or a["step"] == curves["stage2"][-1]["step"]:
            print(f"| {a['step']} | {a['loss']:.3f} | {b['loss']:.3f} |")
    print(f"plot: {png}")
    save_result("crypto_llm_fig5", {"machine": machine(), "docs": docs, "steps": steps, "curves": curves,
                                    "plot": str(png.relative_to(ROOT))})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["table2", "fig5"])
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--docs", type=int, default=30)
    a = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    table2(a.vocab) if a.what == "table2" else fig5(a.steps, a.docs)


if __name__ == "__main__":
    main()
