"""Exact segment dedup including splitting, on one core: the ``split`` stage (sentences),
then the ``dedup`` GlobalStage (SHA-1 keys, 64 hash partitions, decide, apply) through
the functions every runner calls (``privatize.execution``), on the Gutenberg stories
repeated to >= 100 MB. Baseline, in the same run: a plain Python loop (regex sentence
split, ``hashlib.sha1``, a set, ``<MASK>`` for repeats). Target: >= 50 MB/s.

Each copy of the corpus starts every story with a different sentence, so the documents
differ but almost every sentence repeats (the worst case for the number of decisions).
With ``--distinct`` every sentence of copy k gets a prefix "k-" instead, so nearly every
segment is new: no saving from texts repeated inside a batch (``keys`` hashes each
distinct text of a batch once), every key goes through SHA-1.

    python benchmarks/dedup_throughput.py [MB] [--repeats N] [--batch-docs N] [--distinct]
"""

import argparse
import hashlib
import re
import time

from _common import gutenberg_texts, machine, median_time, one_core, save_result

one_core()

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from privatize.execution import key_rows, run_global_stage, run_stage_batch  # noqa: E402
from privatize.records import INTERNAL_SCHEMA  # noqa: E402
from privatize import RunOptions  # noqa: E402
from privatize.stages.dedup import Dedup, DedupSettings  # noqa: E402
from privatize.stages.split import Split, SplitSettings  # noqa: E402

_SPLIT = re.compile(r"(?<=[.!?])\s+")
_BOUNDARY = re.compile(r"([.!?][\"')\]]*)(\s+)")


def naive(texts: list[str]) -> list[str]:
    """The plain loop: regex sentence split, SHA-1 per sentence, a set, mask repeats."""
    seen, out = set(), []
    for t in texts:
        for s in _SPLIT.split(t):
            if not s:
                continue
            h = hashlib.sha1(s.encode("utf-8")).digest()
            if h in seen:
                out.append("<MASK>")
            else:
                seen.add(h)
                out.append(s)
    return out


def batches(texts: list[str], size: int) -> list[pa.Table]:
    out = []
    for i in range(0, len(texts), size):
        chunk = texts[i:i + size]
        n = len(chunk)
        out.append(pa.table({"doc_id": [f"d{i + j}" for j in range(n)], "text": chunk, "individual_id": [None] * n,
                             "meta": [None] * n, "_src": [0] * n, "_line": list(range(i, i + n)), "_seg": [0] * n,
                             "_quarantine": [None] * n}, schema=INTERNAL_SCHEMA))
    return out


def breakdown(split: Split, dedup: Dedup, bs: list[pa.Table]) -> dict[str, float]:
    """Seconds per step of one pass (the same work as ``ours``, timed piece by piece)."""
    t = {}
    t0 = time.perf_counter()
    segs = [run_stage_batch(split, 0, b) for b in bs]
    t["split"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    keyed = [key_rows(dedup, s) for s in segs]
    t["keys (SHA-1)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    run_global_stage(dedup, 1, segs)
    t["global stage (keys, partition, decide, route, apply)"] = time.perf_counter() - t0
    # the floor: one hashlib call per segment, nothing else
    texts = [s["text"].combine_chunks() for s in segs]
    t0 = time.perf_counter()
    for a in texts:
        offs = np.frombuffer(a.buffers()[1], np.int32)[a.offset:a.offset + len(a) + 1].tolist()
        buf = a.buffers()[2].to_pybytes()
        sha1 = hashlib.sha1
        [sha1(buf[x:y]).digest() for x, y in zip(offs, offs[1:])]
    t["(SHA-1 of every segment alone)"] = time.perf_counter() - t0
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mb", nargs="?", type=float, default=100.0, help="corpus size to reach (MB)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-docs", type=int, default=RunOptions().batch_size,
                    help="documents per batch (default: the runner's batch size)")
    ap.add_argument("--distinct", action="store_true", help="make (nearly) every sentence distinct")
    args = ap.parse_args()

    docs = gutenberg_texts()
    base_mb = sum(len(d.encode()) for d in docs) / 1e6
    reps = int(args.mb // base_mb) + 1
    if args.distinct:
        texts = [_BOUNDARY.sub(rf"\g<1>\g<2>{k}-", f"Copy {k} of story {i}. " + d) for k in range(reps)
                 for i, d in enumerate(docs)]
    else:
        texts = [f"Copy {k} of story {i}. " + d for k in range(reps) for i, d in enumerate(docs)]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    bs = batches(texts, args.batch_docs)
    split, dedup = Split(SplitSettings()), Dedup(DedupSettings(method="sha1"))

    def ours():
        segs = [run_stage_batch(split, 0, b) for b in bs]
        return run_global_stage(dedup, 1, segs)

    out = ours()
    n_seg = sum(b.num_rows for b in out)
    hits = sum(pc.sum(b["_stat.1.dedup_hits"]).as_py() or 0 for b in out)
    del out
    t_ours = median_time(ours, args.repeats)
    t_naive = median_time(lambda: naive(texts), args.repeats)
    parts = breakdown(split, dedup, bs)

    kind = "every sentence distinct per copy" if args.distinct else "repeated"
    print(f"corpus: Gutenberg x{reps} ({kind}) = {mb:.0f} MB in {len(bs)} batches of {args.batch_docs} documents; "
          f"{n_seg} segments, {hits} masked; one core ({machine()}); median of {args.repeats}")
    print(f"split + SHA-1 dedup (stages, partitioned): {mb / t_ours:7.1f} MB/s  ratio to naive {t_naive / t_ours:.2f}x")
    print(f"naive loop (regex split, sha1, set, mask): {mb / t_naive:7.1f} MB/s")
    print(f"target >= 50 MB/s: {'met' if mb / t_ours >= 50 else 'NOT met'}")
    print("one pass, step by step:")
    for name, secs in parts.items():
        print(f"  {name:<54} {secs:7.2f} s  {mb / secs:8.1f} MB/s")
    save_result("dedup_throughput" + ("-distinct" if args.distinct else ""), {
        "machine": machine(), "mb": mb, "batches": len(bs), "segments": n_seg, "masked": hits,
        "repeats": args.repeats, "stage_mb_s": mb / t_ours, "naive_mb_s": mb / t_naive, "ratio_to_naive": t_naive / t_ours,
        "target_mb_s": 50, "met": mb / t_ours >= 50, "breakdown_s": parts})


if __name__ == "__main__":
    main()
