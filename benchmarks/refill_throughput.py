"""The ``refill`` stage (issue 21): sentences refilled per second on 1 and 2 CPUs, in
process (torch threads) and on Ray (the stage's actor pool, an embedded cluster of 1 or
2 CPUs), with the ``mask`` stage alone on the same sentences as the baseline of the same
run. Sentences are WikiText-2 test sentences masked with ``allow_list`` (about a fifth of
the words), filled Top-K by a filler from ``experiments/refill_eval.py``'s work folder (or
``--filler``).

    .venv/bin/python benchmarks/refill_throughput.py [--sentences 2000] [--filler DIR]

Writes benchmarks/results/refill_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, need_data, save_result


def sentences(n: int) -> list[str]:
    from train.wikitext import paragraphs

    out = []
    for p in paragraphs(need_data() / "wikitext2_tokenized" / "test.txt"):
        out += [s for s in re.split(r"(?<=[.!?])\s+", p) if len(s.split()) >= 5]
        if len(out) >= n:
            return out[:n]
    return out


def in_process(texts: list[str], filler: str, threads: int, device: str = "cpu", word_list: str | None = None,
               batch_size: int = 64) -> dict:
    import pyarrow as pa
    import torch

    from privatize.stages.mask import Mask, MaskSettings
    from privatize.stages.refill import Refill, RefillSettings

    torch.set_num_threads(threads)
    batch = pa.table({"doc_id": [str(i) for i in range(len(texts))], "text": texts})
    t0 = time.perf_counter()
    masked = Mask(MaskSettings(technique="allow_list", word_list=word_list)).process_batch(batch)
    t_mask = time.perf_counter() - t0
    masked = masked.drop_columns([c for c in masked.column_names if c.startswith("_stat.")])
    stage = Refill(RefillSettings(checkpoint=filler, strategy="topk", word_list=word_list, device=device,
                                  batch_size=batch_size))
    stage.setup()
    if device == "cuda":  # the first forward pass pays CUDA's start-up: not a refill cost
        stage.process_batch(masked.slice(0, 8))
    t0 = time.perf_counter()
    for k in range(0, len(texts), 256):
        out = stage.process_batch(masked.slice(k, 256))
    t_refill = time.perf_counter() - t0
    del out
    return {"mask_s": t_mask, "refill_s": t_refill, "masks": sum(t.count("<MASK>") for t in masked["text"].to_pylist())}


def on_ray(texts: list[str], filler: str, cpus: int) -> dict:
    from privatize.api import run
    from privatize.spec import parse_spec

    with tempfile.TemporaryDirectory() as d:
        corpus = Path(d) / "c.jsonl"
        corpus.write_text("".join(json.dumps({"doc_id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))
        times = {}
        for name, stages in (("mask", [{"kind": "mask", "technique": "allow_list"}]),
                             ("mask+refill", [{"kind": "mask", "technique": "allow_list"},
                                              {"kind": "refill", "checkpoint": filler, "strategy": "topk"}])):
            t0 = time.perf_counter()
            run(parse_spec({"stages": stages}), corpus, Path(d) / name.replace("+", "_"), runner="ray",
                num_cpus=cpus, batch_size=256)
            times[name] = time.perf_counter() - t0
    return times


def gpu_table(texts: list[str], filler: str, word_list: str | None) -> None:
    """CPU (1 and 2 torch threads) against the GPU, in one process, the same sentences."""
    import torch

    rows = []
    for device, threads, bs in (("cpu", 1, 64), ("cpu", 2, 64), ("cuda", 2, 64), ("cuda", 2, 512)):
        r = in_process(texts, filler, threads, device, word_list, bs)
        r.update(device=device, threads=threads, batch_size=bs, sentences_per_s=len(texts) / r["refill_s"])
        rows.append(r)
        print(f"{device} {threads} thread(s), {bs} windows per pass: refill {r['sentences_per_s']:.0f} sentences/s "
              f"({r['masks'] / r['refill_s']:.0f} masks/s)", flush=True)
    base = rows[0]["sentences_per_s"]
    print("\n| where | windows per pass | sentences/s | masks/s | vs 1 CPU thread |\n|---|---:|---:|---:|---:|")
    for r in rows:
        where = torch.cuda.get_device_name() if r["device"] == "cuda" else f"CPU, {r['threads']} thread(s)"
        print(f"| {where} | {r['batch_size']} | {r['sentences_per_s']:.0f} | {r['masks'] / r['refill_s']:.0f} | "
              f"{r['sentences_per_s'] / base:.2f}x |")
    save_result("refill_throughput_gpu", {"machine": machine(), "filler": filler, "sentences": len(texts), "rows": rows})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--filler", default=str(ROOT / "benchmarks" / "work" / "refill_eval" / "filler" / "model"))
    ap.add_argument("--gpu", action="store_true",
                    help="in process only: CPU at 1 and 2 threads against the GPU, batch sizes 64 and 512")
    ap.add_argument("--word-list", help="the allow list as a file (instead of wordfreq's)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: "ray:<cpus>" in a fresh process
    args = ap.parse_args()
    if not (Path(args.filler) / "config.json").is_file():
        sys.exit(f"no filler at {args.filler}: run experiments/refill_eval.py first, or give --filler")
    texts = sentences(args.sentences)
    if args.one:
        print(json.dumps(on_ray(texts, args.filler, int(args.one.split(":")[1]))))
        return
    print(f"# {machine()}; {len(texts)} WikiText-2 sentences, allow_list masks, Top-K refill, filler {args.filler}")
    if args.gpu:
        gpu_table(texts, args.filler, args.word_list)
        return
    result = {"machine": machine(), "sentences": len(texts), "in_process": {}, "ray": {}}
    for threads in (1, 2):
        r = in_process(texts, args.filler, threads)
        r["sentences_per_s"] = len(texts) / r["refill_s"]
        result["in_process"][threads] = r
        print(f"in process, {threads} thread(s): refill {r['sentences_per_s']:.0f} sentences/s "
              f"({r['masks']} masks, {r['masks'] / r['refill_s']:.0f} masks/s); mask alone "
              f"{len(texts) / r['mask_s']:.0f} sentences/s", flush=True)
    for cpus in (1, 2):  # each in its own process: an embedded Ray of that size
        out = subprocess.run([sys.executable, __file__, "--sentences", str(args.sentences), "--filler", args.filler,
                              "--one", f"ray:{cpus}"], capture_output=True, text=True, check=True)
        t = json.loads(out.stdout.strip().splitlines()[-1])
        refill_s = max(1e-9, t["mask+refill"] - t["mask"])
        result["ray"][cpus] = {**t, "refill_sentences_per_s": len(texts) / refill_s}
        print(f"Ray, {cpus} CPU(s): mask alone {t['mask']:.1f} s, mask + refill {t['mask+refill']:.1f} s: refill "
              f"{len(texts) / refill_s:.0f} sentences/s", flush=True)
    ip, ray = result["in_process"], result["ray"]
    print(f"2 vs 1: in process x{ip[2]['sentences_per_s'] / ip[1]['sentences_per_s']:.2f}, "
          f"Ray x{ray[2]['refill_sentences_per_s'] / ray[1]['refill_sentences_per_s']:.2f}")
    save_result("refill_throughput", result)


if __name__ == "__main__":
    main()
