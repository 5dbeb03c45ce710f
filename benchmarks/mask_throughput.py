"""The ``mask`` stage (issue 21, paper 002): masked share of words per technique on
CustomerSim and WikiText-2 (paper Table 2 reports 1.3-30.4%), and throughput per core of
the two techniques that need no model, against two baselines measured in the same run:
the word scan alone (``WORD.finditer`` over the same text, no lookups, no output), and
the per-word path (``Mask._ranges_one`` then ``mask_text``, one text at a time: what the
stage ran before its batch scan, and still runs for texts holding reserved tokens).

Usage: ``python benchmarks/mask_throughput.py [--mb 8] [--tagger-docs 300]``.
Each figure is the median of three passes. Writes
``benchmarks/results/mask_throughput.json``. Goal: >= 20 MB/s per core for
``allow_list`` and ``vocab_threshold``.
"""

from __future__ import annotations

import argparse
import json
import time

from _common import machine, median_time, need_data, one_core, save_result

one_core()

import pyarrow as pa  # noqa: E402

from privatize.stages.mask import WORD, Mask, MaskSettings, _originals, mask_text  # noqa: E402


def corpora() -> dict[str, list[str]]:
    data = need_data()
    cs = [json.loads(line)["text"] for line in open(data / "customersim" / "test.jsonl", encoding="utf-8")]
    wiki = [p for p in (data / "wikitext2_tokenized" / "test.txt").read_text(encoding="utf-8").split("\n")
            if p.strip() and not p.strip().startswith("=")]
    return {"customersim": cs, "wikitext2": wiki}


def masked_share(texts: list[str], settings: dict) -> dict:
    stage = Mask(MaskSettings(**settings))
    out = stage.process_batch(pa.table({"doc_id": [str(i) for i in range(len(texts))], "text": texts}))
    words, masked = sum(out["_stat.words"].to_pylist()), sum(out["_stat.words_masked"].to_pylist())
    return {"words": words, "words_masked": masked, "share": masked / words}


def throughput(texts: list[str], settings: dict, batch: int = 1024) -> tuple[float, float]:
    """Batches of 1,024 rows, the runners' default (``RunOptions.batch_size``)."""
    stage = Mask(MaskSettings(**settings))
    stage.setup()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    batches = [pa.table({"doc_id": [str(i) for i in range(k, min(k + batch, len(texts)))],
                         "text": texts[k:k + batch]}) for k in range(0, len(texts), batch)]
    return mb, median_time(lambda: [stage.process_batch(b) for b in batches], 3)


def scan_baseline(texts: list[str]) -> float:
    return median_time(lambda: [sum(1 for _ in WORD.finditer(t)) for t in texts], 3)


def per_word_baseline(texts: list[str], settings: dict) -> float:
    stage = Mask(MaskSettings(**settings))
    stage.setup()

    def run() -> None:
        for t in texts:
            ranges, _, _ = stage._ranges_one(t)
            new, merged = mask_text(t, ranges)
            _originals(t, new, merged)

    return median_time(run, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=8.0, help="MB of text for the throughput runs")
    ap.add_argument("--tagger-docs", type=int, default=300, help="documents per corpus for entity_tagger")
    args = ap.parse_args()

    result = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "shares": {}, "throughput": {}}
    techniques = {"allow_list": {"technique": "allow_list"}, "vocab_threshold": {"technique": "vocab_threshold"},
                  "entity_tagger": {"technique": "entity_tagger"}}
    for name, texts in corpora().items():
        for tech, st in techniques.items():
            sample = texts[:args.tagger_docs] if tech == "entity_tagger" else texts
            r = masked_share(sample, st)
            result["shares"][f"{name}/{tech}"] = r
            print(f"{name:12s} {tech:16s} masked {100 * r['share']:5.1f}% of {r['words']:,} words")
    # throughput: WikiText-2 repeated to --mb
    wiki = corpora()["wikitext2"]
    texts, size = [], 0
    while size < args.mb * 1e6:
        for t in wiki:
            texts.append(t)
            size += len(t.encode())
    base = scan_baseline(texts)
    for tech in ("allow_list", "vocab_threshold"):
        mb, secs = throughput(texts, techniques[tech])
        loop = per_word_baseline(texts, techniques[tech])
        result["throughput"][tech] = {"mb": mb, "seconds": secs, "mb_per_s": mb / secs,
                                      "scan_only_mb_per_s": mb / base, "ratio_to_scan": base / secs,
                                      "per_word_mb_per_s": mb / loop, "ratio_to_per_word": loop / secs}
        print(f"{tech:16s} {mb / secs:6.2f} MB/s per core ({mb:.1f} MB in {secs:.2f} s): {base / secs:.2f}x the "
              f"word scan alone ({mb / base:.2f} MB/s), {loop / secs:.2f}x the per-word path "
              f"({mb / loop:.2f} MB/s) (goal 20 MB/s: {'met' if mb / secs >= 20 else 'NOT met'})")
    print("wrote", save_result("mask_throughput", result))


if __name__ == "__main__":
    main()
