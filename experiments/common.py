"""Shared helpers of the benchmarks (``benchmarks/``, run by path) and the experiments
(``python -m experiments.<name>``): data location, timing, one-core pinning, and the results
files both write (``benchmarks/results/``, which RESULTS.md is made from)."""

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


def cpu_model() -> str:
    """The processor's model name (/proc/cpuinfo), or what ``platform`` says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            return next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")),
                        platform.processor() or "?")
    except OSError:
        return platform.processor() or "?"


def one_core() -> None:
    """Pin the process to one core where the OS allows it."""
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except (AttributeError, OSError):
        pass
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(v, "1")


# ---- the harness: timing with a same-run baseline, and results keyed by commit, machine, date ----

def commit() -> str:
    """The checked-out commit, ``+dirty`` when tracked files differ from it."""
    import subprocess

    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def run_key() -> dict:
    """What a result is keyed by: commit, machine and UTC date-time."""
    import datetime

    return {"commit": commit(), "machine": machine(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def timed(fn, repeats: int = 5) -> dict:
    """The median of ``repeats`` timed runs of ``fn``, by wall clock and by process CPU time
    (on a shared machine the CPU figure is the steadier one), with every run's wall time."""
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"wall_s": statistics.median(wall), "cpu_s": statistics.median(cpu), "runs_wall_s": wall,
            "repeats": repeats}


def compare(candidate: dict, baseline: dict) -> dict:
    """The ratio of a candidate's time to a baseline's, both from :func:`timed` in the same run
    (speed-up: baseline time over candidate time)."""
    return {"speedup_wall": baseline["wall_s"] / candidate["wall_s"],
            "speedup_cpu": baseline["cpu_s"] / max(candidate["cpu_s"], 1e-12)}


def save_result(name: str, result: dict) -> Path:
    """Write a benchmark's or an experiment's figures as JSON keyed by commit, machine and date:
    ``benchmarks/results/<name>.json`` (the latest, which RESULTS.md cites) and
    ``benchmarks/results/history/<name>/<date>_<commit>.json`` (kept)."""
    payload = {"benchmark": name, **run_key(), **result}
    text = json.dumps(payload, indent=2, default=str) + "\n"
    out = ROOT / "benchmarks" / "results" / f"{name}.json"
    hist = ROOT / "benchmarks" / "results" / "history" / name / (
        f"{payload['date'].replace(':', '')}_{payload['commit'].replace('+', '_')}.json")
    hist.parent.mkdir(parents=True, exist_ok=True)
    for path in (hist, out):
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    try:  # RESULTS.md shows the latest JSON of every benchmark and experiment: write it again
        import importlib.util

        spec = importlib.util.spec_from_file_location("results_table", ROOT / "benchmarks" / "results_table.py")
        results_table = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(results_table)
        results_table.main([])
    except Exception as exc:  # noqa: BLE001 - the JSON is what matters; say why the table was not
        print(f"benchmarks/RESULTS.md not rewritten: {exc}", file=sys.stderr)
    return out
