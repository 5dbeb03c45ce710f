"""Shared helpers for the benchmarks: data location, timing, results."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / ".." / "shared" / "data").resolve()
sys.path.insert(0, str(ROOT))


def need_data() -> Path:
    if not DATA.is_dir():
        sys.exit(f"benchmark needs {DATA} (the shared data folder beside the project)")
    return DATA


def gutenberg_texts() -> list[str]:
    d = need_data() / "squality_gutenberg"
    return [json.loads(line)["document"] for f in ("train", "dev", "test")
            for line in open(d / f"{f}.jsonl", encoding="utf-8")]


def individuals_corpus(mb: float, individuals: int) -> tuple[list[str], list[str]]:
    """Gutenberg paragraphs repeated to ``mb`` MB as records of ``individuals`` people,
    each opened by a sentence unique to it (so that identifiers exist): (texts, people)."""
    paras = [p for d in gutenberg_texts() for p in d.split("\n\n") if len(p) > 200]
    texts, people, size, i = [], [], 0, 0
    while size < mb * 1e6:
        p = f"Record {i} of reader {i % individuals} ends here. " + paras[i % len(paras)]
        texts.append(p)
        people.append(f"person-{(i * 7919) % individuals:06d}")
        size += len(p.encode())
        i += 1
    return texts, people


def median_time(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def wikitext_corpus(work: Path) -> Path:
    """WikiText-2 valid and test paragraphs as one JSONL in ``work``: the public corpus of
    the evaluations' base models."""
    from train.wikitext import paragraphs, write_jsonl

    wiki = need_data() / "wikitext2_tokenized"
    return write_jsonl(paragraphs(wiki / "valid.txt") + paragraphs(wiki / "test.txt"), work / "wikitext2.jsonl")


def machine() -> str:
    return f"{os.cpu_count()}-core {platform.machine()} {platform.system()}, Python {platform.python_version()}"


def one_core() -> None:
    """Pin the process to one core where the OS allows it."""
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except (AttributeError, OSError):
        pass
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(v, "1")


def save_result(name: str, result: dict) -> Path:
    """Write ``benchmarks/results/<name>.json`` (the raw figures RESULTS.md cites)."""
    out = ROOT / "benchmarks" / "results" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return out
