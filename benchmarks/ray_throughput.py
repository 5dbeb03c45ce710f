"""The Ray Data runner against the in-process runner, on the same specs and files.

Modes (each prints its figures, the ratio to its baseline, and the targets):

``cipher`` / ``dedup``
    Steady-state throughput at 1 CPU: a ``ray.init(num_cpus=1)`` session is started
    first and warmed up with a run on the first 50 documents of each file (both excluded from the time: worker
    processes start and import once per session), then ``privatize.run(..., runner="ray")`` runs the spec on the
    Gutenberg stories repeated to ``--mb`` MB (default 1024) in 8 JSONL files; the
    baseline is ``privatize.run`` (in-process) on the same files in the same run, in a
    spawned child process pinned to one core. Both write the same shards (checked). ``--repeat`` (default 3) pairs
    run interleaved, each Ray run in a fresh session; the ratio is of the median times.
    Target: Ray >= 0.8x in-process.
    Also printed: the CPU seconds each run used (for Ray: the driver and every Ray
    process, from /proc), since Ray's 1 logical CPU does not stop its processes from
    using the machine's other core; ``--pin-ray`` confines them to the baseline's core.
``redact``
    The redaction-bound recipe (split by line, redact) on ``--docs`` 500-word PII-dense
    documents (presidio-research sentences) at each of ``--cpus`` (default 1,2; e.g.
    ``1,16,2,8,4``), a fresh Ray session each: seconds, MB/s, MB/s per CPU and the speed-up
    to the 1-CPU run, written to ``--json`` (default benchmarks/results/ray_redact_scaling.json)
    after every run. Target: >= 1.7x from 1 to 2.
``stream``
    ``--mb`` MB (default 1100) of JSONL (every copy's sentences made distinct, so the
    dedup decisions are as sparse as in a real corpus) through the CRT preprocessing recipe
    (split, dedup, split_private, whole-text cipher) with the object store at Ray's
    75 MiB minimum, in a fresh Ray session; completes, shards verified; peak resident
    memory of the driver and of all Ray processes together, sampled every 0.25 s.
``identifiers``
    The ``identifiers`` stage (graph build of paper 003, ``direct: none``, ``max_n`` from
    ``--max-n``, default 2) on ``--mb`` MB of Gutenberg paragraphs, each record of one of
    100,000 individuals, at 1 and then 2 CPUs (fresh sessions, shards compared): seconds
    and MB/s per stage, and the peak resident memory of the driver and of every Ray
    process; run it at several ``--mb`` to see how memory grows with the corpus.

Records/s and MB/s per stage come from the manifest (``seconds`` per stage).

    python benchmarks/ray_throughput.py cipher|dedup|redact|stream|identifiers [--mb N] [--docs N] [--cpus 1,2,...]
        [--json PATH] [--repeat N] [--pin-ray] [--distinct]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import ROOT, cpu_model, gutenberg_texts, machine, need_data, save_result

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

FILES = 8
PIN_RAY = False


_BOUNDARY = re.compile(r"([.!?][\"')\]]*)(\s+)")


def write_corpus(folder: Path, mb: float, distinct: bool = False) -> tuple[list[Path], float]:
    """Gutenberg stories, each copy with a distinct first sentence, as FILES JSONL files.
    With ``distinct`` every sentence of copy k starts "k-" (few repeats: sparse dedup
    decisions, as in a real corpus)."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = gutenberg_texts()
    lines = []
    size = 0
    k = 0
    while size < mb * 1e6:
        for i, d in enumerate(docs):
            text = _BOUNDARY.sub(rf"\g<1>\g<2>{k}-", d) if distinct else d
            line = json.dumps({"doc_id": f"c{k}-s{i}", "text": f"Copy {k} of story {i}. " + text}) + "\n"
            lines.append(line)
            size += len(line.encode())
        k += 1
    paths = []
    per = (len(lines) + FILES - 1) // FILES
    for f in range(FILES):
        p = folder / f"part-{f}.jsonl"
        with open(p, "w", encoding="utf-8") as fh:
            fh.writelines(lines[f * per:(f + 1) * per])
        paths.append(p)
    return paths, sum(p.stat().st_size for p in paths) / 1e6


def write_keys(folder: Path) -> None:
    from privatize.keys import new_key, write_key_file

    (folder / "keys").mkdir(parents=True, exist_ok=True)
    write_key_file(new_key("vigenere", length=100), folder / "keys" / "text.key")


SPECS = {
    "cipher": {"version": 1, "stages": [{"kind": "encrypt_text", "key": "file:keys/text.key"}],
               "output": {"num_shards": 8}},
    "dedup": {"version": 1, "stages": [{"kind": "split", "unit": "sentence"},
                                        {"kind": "dedup", "method": "sha1", "unit": "segment", "action": "mask"}],
              "output": {"num_shards": 8}},
    "stream": {"version": 1, "stages": [{"kind": "split", "unit": "sentence"},
                                         {"kind": "dedup", "method": "sha1", "unit": "segment", "action": "mask",
                                          "min_length": 20},
                                         {"kind": "split_private"},
                                         {"kind": "encrypt_text", "key": "file:keys/text.key"}],
               "output": {"num_shards": 16}},
    "redact": {"version": 1, "stages": [{"kind": "split", "unit": "line"}, {"kind": "redact"}],
               "output": {"num_shards": 2}},
}


def per_stage(manifest: dict, mb: float) -> list[str]:
    out = []
    for s in manifest["stages"]:
        secs = s.get("seconds") or 0.0
        rate = f"{s['records_in'] / secs:10.0f} rec/s {mb / secs:8.1f} MB/s" if secs else "(no time recorded)"
        out.append(f"    stage {s['index']} {s['kind']:<14} {s['records_in']:>9} in, {secs:7.2f} s  {rate}")
    return out


def shard_hashes(out: Path) -> list[str]:
    m = json.loads((out / "manifest.json").read_text())
    return [s["sha256"] for s in m["shards"]]


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _pss(pid: int) -> int:
    """Proportional set size: shared pages (the object store's) divided among the
    processes that map them, so that a sum over processes counts each page once."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0")[0].decode(errors="replace").rsplit("/", 1)[-1][:32]
    except OSError:
        return "?"


def _ray_pids(me: int) -> list[int]:
    """The Ray processes this driver started (raylet, GCS, workers: its descendants), or
    where it joined a cluster it did not start, every Ray process on the machine."""
    parent, cmds = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{d}/stat") as fh:
                parent[int(d)] = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"ray::" in cmd or b"/ray/" in cmd or b"raylet" in cmd or b"gcs_server" in cmd:
            cmds[int(d)] = cmd

    def mine(pid: int) -> bool:
        seen = set()
        while pid in parent and pid not in seen:
            seen.add(pid)
            pid = parent[pid]
            if pid == me:
                return True
        return False

    ours = [p for p in cmds if mine(p)]
    return ours or list(cmds)


def cpu_seconds() -> dict[int, float]:
    """CPU seconds (user + system) so far of this process and of every Ray process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in [os.getpid(), *_ray_pids(os.getpid())]:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
            out[pid] = (int(f[11]) + int(f[12])) / tick
        except (OSError, ValueError, IndexError):
            pass
    return out


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two :func:`cpu_seconds` (processes started in between count
    from zero; ones that exited in between are missed: Ray keeps its workers)."""
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


class PeakRSS:
    """Peak resident memory (from /proc): of this process, and of this process plus every
    Ray process (raylet, GCS, workers): as the sum of resident sets (which counts a shared
    page, the object store's, once per process that maps it) and as the sum of
    proportional set sizes (each page once: the memory the run takes)."""

    def __init__(self):
        self.me = os.getpid()
        self.peak_driver = 0
        self.peak_total = 0
        self.peak_pss = 0
        self.at_peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.25):
            drv = _rss(self.me)
            pids = _ray_pids(self.me)
            total = drv + sum(_rss(p) for p in pids)
            each = {p: _pss(p) for p in pids}
            pss = _pss(self.me) + sum(each.values())
            if pss > self.peak_pss:
                self.peak_pss, self.at_peak = pss, {f"{_name(p)}[{p}]": v for p, v in each.items()}
            self.peak_driver = max(self.peak_driver, drv)
            self.peak_total = max(self.peak_total, total)

    def __enter__(self):
        self._t.start()
        return self

    def breakdown(self, top: int = 6) -> str:
        """The largest processes at the proportional peak, by name."""
        out = []
        for name, size in sorted(self.at_peak.items(), key=lambda kv: -kv[1])[:top]:
            out.append(f"{name} {size / 2**30:.2f}")
        return ", ".join(out)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def _in_process_child(spec_text: str, work: str, core: int) -> tuple[dict, float, float]:
    """In a child process pinned to ``core``: (manifest, seconds, CPU seconds)."""
    from privatize import RunOptions, run
    from privatize.spec import parse_spec

    os.sched_setaffinity(0, {core})
    c = time.process_time()
    t = time.perf_counter()
    m = run(parse_spec(spec_text), Path(work) / "in", Path(work) / "out-local", spec_dir=work,
            options=RunOptions(progress=False))
    return m, time.perf_counter() - t, time.process_time() - c


def _in_process_run(mode: str, work: Path, aff: set[int]) -> tuple[dict, float, float]:
    """The baseline, in-process and pinned to one core, in a child process, so every
    Ray session starts from the same small driver (with the in-process run's heap kept
    in the driver, the distinct-text dedup spilled 4.5 GB; ``ray.init`` sizes the object
    store from the memory available), and every baseline from a fresh heap."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    shutil.rmtree(work / "out-local", ignore_errors=True)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_in_process_child, SPECS[mode], str(work), sorted(aff)[0]).result()


def _ray_run(spec, work: Path, files: list[Path]) -> tuple[dict, float, float, float, int]:
    """A fresh ``ray.init(num_cpus=1)`` session, a warm-up run, then the timed run:
    (manifest, warm-up seconds, seconds, CPU seconds, worker processes started)."""
    import ray

    from privatize import RunOptions, run
    from privatize.ray import local_init_args

    for d in ("out-ray", "out-warm", "warm"):
        shutil.rmtree(work / d, ignore_errors=True)
    # with --pin-ray the driver stays on one core and Ray's processes inherit it
    ray.init(num_cpus=1, include_dashboard=False, **local_init_args(1))
    try:
        # warm-up on the first 50 documents of every input file: as many read tasks at
        # once as the timed run, so every worker process it needs is started and has
        # imported its modules (local_init_args keeps them alive between runs)
        warm = work / "warm"
        warm.mkdir()
        for i, f in enumerate(files):
            with open(f, encoding="utf-8") as src, open(warm / f"w{i}.jsonl", "w", encoding="utf-8") as dst:
                dst.writelines(line for _, line in zip(range(50), src))
        t = time.perf_counter()
        run(spec, warm, work / "out-warm", runner="ray", spec_dir=str(work), options=RunOptions(progress=False))
        t_warm = time.perf_counter() - t
        c = cpu_seconds()
        t = time.perf_counter()
        m = run(spec, work / "in", work / "out-ray", runner="ray", spec_dir=str(work),
                             options=RunOptions(progress=False))
        secs = time.perf_counter() - t
        after = cpu_seconds()
        return m, t_warm, secs, cpu_used(c, after), len(set(after) - set(c))
    finally:
        ray.shutdown()


def run_throughput(mode: str, mb_target: float, work: Path, repeat: int, distinct: bool = False) -> None:
    """``repeat`` interleaved pairs (in-process, then Ray in a fresh session), so a slow
    spell of a shared machine hits both sides; the target is judged on the ratio of the
    median times."""
    from privatize.spec import parse_spec

    files, mb = write_corpus(work / "in", mb_target, distinct=distinct)
    write_keys(work)
    spec = parse_spec(SPECS[mode])
    aff = os.sched_getaffinity(0)
    if PIN_RAY:  # the driver on the baseline's core: Ray's processes inherit it
        os.sched_setaffinity(0, {sorted(aff)[0]})
    pairs = []
    for r in range(repeat):
        m_local, t_local, cpu_local = _in_process_run(mode, work, aff)
        m_ray, t_warm, t_ray, cpu_ray, started = _ray_run(spec, work, files)
        same = shard_hashes(work / "out-local") == shard_hashes(work / "out-ray")
        pairs.append((t_local, t_ray, cpu_local, cpu_ray, t_warm, started, same))
        print(f"  pair {r + 1}/{repeat}: in-process {t_local:.1f} s, Ray {t_ray:.1f} s: {t_local / t_ray:.2f}x; "
              f"shards byte-identical: {same}", flush=True)
    med = lambda i: statistics.median(p[i] for p in pairs)  # noqa: E731
    t_local, t_ray, cpu_local, cpu_ray = med(0), med(1), med(2), med(3)
    t_warm, started, same = max(p[4] for p in pairs), max(p[5] for p in pairs), all(p[6] for p in pairs)
    ratio = t_local / t_ray
    corpus = " (every copy's sentences distinct)" if distinct else ""
    print(f"{mode}: {mb:.0f} MB{corpus} in {FILES} JSONL files, {m_local['counts']['input_records']} documents, "
          f"{m_local['counts']['output_records']} output records; {machine()}; median of {repeat} interleaved pairs")
    print(f"  in-process (one core):        {t_local:7.1f} s  {mb / t_local:7.1f} MB/s  "
          f"CPU {cpu_local:.1f} s")
    for line in per_stage(m_local, mb):
        print(line)
    pinned = "pinned to the same one core" if PIN_RAY else "not pinned (Ray may use both cores)"
    print(f"  Ray Data ({pinned}), ray.init(num_cpus=1) and a warm-up run (at most {t_warm:.1f} s, 50 documents "
          f"per file) excluded: "
          f"{t_ray:7.1f} s  {mb / t_ray:7.1f} MB/s  CPU {cpu_ray:.1f} s (driver + every Ray process: "
          f"{cpu_ray / cpu_local:.2f}x the in-process CPU; at most {started} worker process(es) started during a run)")
    for line in per_stage(m_ray, mb):
        print(line)
    worst = min(p[0] / p[1] for p in pairs)
    print(f"  ratio Ray / in-process: {ratio:.2f}x (pairs {', '.join(f'{p[0] / p[1]:.2f}x' for p in pairs)}; "
          f"worst {worst:.2f}x; target >= 0.8x: {'met' if ratio >= 0.8 else 'NOT met'}); "
          f"shards byte-identical: {same}")


def redaction_docs(n: int) -> list[str]:
    items = json.loads((need_data() / "presidio_research" / "synth_dataset_v2.json").read_text(encoding="utf-8"))
    docs, cur, count, i = [], [], 0, 0
    while len(docs) < n:
        sent = items[i % len(items)]["full_text"].replace("\n", " ")
        i += 1
        cur.append(sent)
        count += len(sent.split())
        if count >= 500:
            docs.append(" ".join(cur))
            cur, count = [], 0
    return docs


def run_redact(n_docs: int, work: Path, cpu_counts: tuple[int, ...] = (1, 2), json_path: Path | None = None,
               warmup_docs: int = 0) -> None:
    """The redact recipe on the same ``n_docs`` documents at each of ``cpu_counts`` (in
    the order given, a fresh embedded Ray session each); the figures, the speed-up to the
    1-CPU run and the shards' hashes go to ``json_path`` after every run (so a run cut
    short leaves what it measured). With ``warmup_docs``, an untimed run on that many of
    the documents first, at the first CPU count (on a fresh machine the first run would
    otherwise also pay for compiling every module's bytecode and filling the disk cache)."""
    import ray

    from privatize import RunOptions, run
    from privatize.ray import local_init_args
    from privatize.spec import parse_spec

    (work / "in").mkdir(parents=True, exist_ok=True)
    docs = redaction_docs(n_docs)
    per = (len(docs) + FILES - 1) // FILES
    for f in range(FILES):
        with open(work / "in" / f"part-{f}.jsonl", "w", encoding="utf-8") as fh:
            for j, d in enumerate(docs[f * per:(f + 1) * per]):
                fh.write(json.dumps({"doc_id": f"f{f}-{j}", "text": d}) + "\n")
    mb = sum(len(d.encode()) for d in docs) / 1e6
    spec = parse_spec(SPECS["redact"])
    secs, hashes, stages = {}, {}, {}
    aff = os.sched_getaffinity(0)
    json_path = json_path or ROOT / "benchmarks" / "results" / "ray_redact_scaling.json"
    print(f"redact recipe: {len(docs)} documents of ~500 words ({mb:.2f} MB), CPUs {', '.join(map(str, cpu_counts))}; "
          f"{machine()}, {cpu_model()}", flush=True)
    if warmup_docs > 0:
        (work / "warm-in").mkdir()
        with open(work / "warm-in" / "part-0.jsonl", "w", encoding="utf-8") as fh:
            for j, d in enumerate(docs[:warmup_docs]):
                fh.write(json.dumps({"doc_id": f"w{j}", "text": d}) + "\n")
        ray.init(num_cpus=cpu_counts[0], include_dashboard=False, **local_init_args(cpu_counts[0]))
        try:
            t = time.perf_counter()
            run(spec, work / "warm-in", work / "out-warm", runner="ray", spec_dir=str(work),
                options=RunOptions(progress=False, batch_size=16))
            print(f"  warm-up ({min(warmup_docs, len(docs))} documents, {cpu_counts[0]} CPU(s), untimed): "
                  f"{time.perf_counter() - t:.1f} s", flush=True)
        finally:
            ray.shutdown()

    def result() -> dict:
        base = secs.get(1)
        first = hashes[next(iter(hashes))] if hashes else None
        return {
            "recipe": "split (line) + redact", "docs": len(docs), "mb": round(mb, 4), "batch_size": 16,
            "machine": machine(), "cpu_model": cpu_model(), "cpus_on_machine": os.cpu_count(),
            "pin_ray_1cpu": PIN_RAY, "warmup_docs": warmup_docs,
            "timing": "ray.init excluded; actor start and model load included",
            "runs": [{"cpus": c, "seconds": round(secs[c], 3), "docs_per_s": round(len(docs) / secs[c], 3),
                      "mb_per_s": round(mb / secs[c], 4), "mb_per_s_per_cpu": round(mb / secs[c] / c, 4),
                      "speedup_vs_1cpu": round(base / secs[c], 3) if base else None,
                      "efficiency_vs_1cpu": round(base / secs[c] / c, 3) if base else None,
                      "stages": stages[c], "shards_same_as_first": hashes[c] == first}
                     for c in secs],
            "shards_identical": len({tuple(h) for h in hashes.values()}) <= 1,
        }

    for cpus in cpu_counts:
        if PIN_RAY and cpus == 1:  # Ray's own processes (driver, raylet, GCS) on that core too
            os.sched_setaffinity(0, {sorted(aff)[0]})
        ray.init(num_cpus=cpus, include_dashboard=False, **local_init_args(cpus))
        try:
            t = time.perf_counter()
            m = run(spec, work / "in", work / f"out-{cpus}", runner="ray", spec_dir=str(work),
                                 options=RunOptions(progress=False, batch_size=16))
            secs[cpus] = time.perf_counter() - t
        finally:
            ray.shutdown()
            os.sched_setaffinity(0, aff)
        hashes[cpus] = shard_hashes(work / f"out-{cpus}")
        stages[cpus] = [{"kind": s["kind"], "records_in": s["records_in"], "seconds": s.get("seconds")}
                        for s in m["stages"]]
        up = f", {secs[1] / secs[cpus]:5.2f}x the 1-CPU run" if 1 in secs and cpus != 1 else ""
        print(f"  {cpus:2d} CPU(s): {secs[cpus]:6.1f} s  {len(docs) / secs[cpus]:7.2f} docs/s  "
              f"{mb / secs[cpus]:6.3f} MB/s ({mb / secs[cpus] / cpus:.3f} per CPU){up}", flush=True)
        for line in per_stage(m, mb):
            print(line)
        shutil.rmtree(work / f"out-{cpus}", ignore_errors=True)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result(), indent=2) + "\n")
    pinned = ("the 1-CPU run pinned to one core with Ray's own processes" if PIN_RAY
              else "not pinned: at 1 CPU Ray's own processes may use other cores")
    print(f"redact recipe: {len(docs)} documents of ~500 words ({mb:.2f} MB); {machine()}")
    print(f"  ({pinned}; ray.init excluded, actor start and model load included)")
    if 1 in secs:
        for c in sorted(secs):
            print(f"  {c:2d} CPU(s): {secs[c]:6.1f} s  {mb / secs[c]:6.3f} MB/s  speed-up {secs[1] / secs[c]:5.2f}x  "
                  f"(efficiency {secs[1] / secs[c] / c:.2f})")
    if 1 in secs and 2 in secs:
        scale = secs[1] / secs[2]
        print(f"  scaling 1 -> 2 CPUs: {scale:.2f}x (target >= 1.7x: {'met' if scale >= 1.7 else 'NOT met'})")
    print(f"  shards identical at every CPU count: {result()['shards_identical']}; figures in {json_path}")
    save_result(json_path.stem, result())


def run_stream(mb_target: float, work: Path) -> None:
    import ray

    from privatize.output import verify
    from privatize import RunOptions, run
    from privatize.ray import local_init_args
    from privatize.spec import parse_spec

    files, mb = write_corpus(work / "in", mb_target, distinct=True)
    write_keys(work)
    spec = parse_spec(SPECS["stream"])
    store = 75 * 1024 * 1024
    ray.init(num_cpus=2, object_store_memory=store, include_dashboard=False, **local_init_args(2))
    try:
        with PeakRSS() as peak:
            t = time.perf_counter()
            m = run(spec, work / "in", work / "out", runner="ray", spec_dir=str(work),
                                 options=RunOptions(progress=False))
            secs = time.perf_counter() - t
    finally:
        ray.shutdown()
    problems = verify(work / "out")
    print(f"stream: {mb:.0f} MB of JSONL, object store {store >> 20} MiB, 2 CPUs; {machine()}")
    print(f"  completed in {secs:.1f} s ({mb / secs:.1f} MB/s); {m['counts']['output_records']} output records; "
          f"verify: {'ok' if not problems else problems}")
    print(f"  peak resident memory: driver {peak.peak_driver / 2**30:.2f} GiB, "
          f"driver + Ray processes {peak.peak_total / 2**30:.2f} GiB (input {mb / 1024:.2f} GB)")
    for line in per_stage(m, mb):
        print(line)


def _write_individuals(mb_target: float, folder: Path) -> None:
    from _common import individuals_corpus

    texts, people = individuals_corpus(mb_target, 100_000)
    folder.mkdir(parents=True, exist_ok=True)
    per = (len(texts) + FILES - 1) // FILES
    for f in range(FILES):
        with open(folder / f"part-{f}.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"id": f"d{i}", "individual_id": people[i], "text": texts[i]}) + "\n"
                          for i in range(f * per, min(len(texts), (f + 1) * per)))
    (folder.parent / "counts.json").write_text(json.dumps({"records": len(texts), "individuals": len(set(people))}))


def run_identifiers(mb_target: float, work: Path, max_n: int, cpu_counts: tuple[int, ...] = (1, 2),
                    store_gb: float | None = None) -> None:
    import ray

    from privatize import RunOptions, run
    from privatize.ray import local_init_args
    from privatize.spec import parse_spec

    # the corpus is made and written by a child process, so that this driver (whose memory
    # is measured) never holds it
    child = multiprocessing.get_context("fork").Process(target=_write_individuals, args=(mb_target, work / "in"))
    child.start()
    child.join()
    if child.exitcode:
        raise SystemExit(f"writing the corpus failed (exit {child.exitcode})")
    counts = json.loads((work / "counts.json").read_text())
    mb = sum(p.stat().st_size for p in (work / "in").iterdir()) / 1e6
    spec = parse_spec({"version": 1, "stages": [{"kind": "identifiers", "direct": "none", "max_n": max_n}],
                       "output": {"num_shards": 8}})
    print(f"identifiers (max_n {max_n}, direct none): {mb:.0f} MB of JSONL, {counts['records']} records of "
          f"{counts['individuals']} individuals; {machine()}")
    hashes, secs = {}, {}
    for cpus in cpu_counts:
        store = int(store_gb * 2**30) if store_gb else None
        ray.init(num_cpus=cpus, include_dashboard=False, object_store_memory=store, **local_init_args(cpus))
        try:
            with PeakRSS() as peak:
                t = time.perf_counter()
                m = run(spec, work / "in", work / f"out-{cpus}", runner="ray", options=RunOptions(progress=False))
                secs[cpus] = time.perf_counter() - t
        finally:
            ray.shutdown()
        hashes[cpus] = shard_hashes(work / f"out-{cpus}")
        st = m["stages"][0]["stats"]
        print(f"  {cpus} CPU(s): {secs[cpus]:6.1f} s, {mb / secs[cpus]:5.2f} MB/s end to end ({mb / secs[cpus] / cpus:.2f} "
              f"per CPU); peak resident memory: driver {peak.peak_driver / 2**30:.2f} GiB, driver + Ray processes "
              f"{peak.peak_total / 2**30:.2f} GiB as resident sets, {peak.peak_pss / 2**30:.2f} GiB as proportional "
              f"sets (shared pages once; object store {'default' if not store_gb else f'{store_gb:g} GiB'})")
        print(f"    at that peak (GiB): {peak.breakdown()}")
        print(f"    {st['identifiers_n1']} of {st['terms_n1']} distinct words are identifiers; "
              f"{st['indirect_spans']} identifier spans written")
        for line in per_stage(m, mb):
            print(line)
    if len(secs) == 2:
        print(f"  scaling 1 -> 2 CPUs: {secs[1] / secs[2]:.2f}x; shards identical: {hashes[1] == hashes[2]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["cipher", "dedup", "redact", "stream", "identifiers"])
    ap.add_argument("--max-n", type=int, default=2, help="identifiers: the longest term")
    ap.add_argument("--cpus", default="1,2",
                    help="identifiers, redact: the CPU counts to run, in this order (embedded Ray of each size)")
    ap.add_argument("--json", default=None,
                    help="redact: where to write the figures (default benchmarks/results/ray_redact_scaling.json)")
    ap.add_argument("--mb", type=float, default=None)
    ap.add_argument("--store-gb", type=float, default=None,
                    help="identifiers: the object store's size (default: Ray's, 30%% of memory); Ray spills beyond it")
    ap.add_argument("--docs", type=int, default=240, help="documents for the redact mode")
    ap.add_argument("--warmup", type=int, default=0,
                    help="redact: an untimed run on this many documents first (default none)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--repeat", type=int, default=3, help="cipher/dedup: interleaved pairs of runs (median)")
    ap.add_argument("--distinct", action="store_true",
                    help="cipher/dedup: make every copy's sentences distinct (sparse dedup decisions, as in a "
                         "real corpus; by default 99%% of the segments are repeats)")
    ap.add_argument("--pin-ray", action="store_true",
                    help="cipher/dedup: pin Ray (raylet, workers, driver) to the baseline's one core too; "
                         "redact: pin the whole 1-CPU run to one core")
    args = ap.parse_args()
    global PIN_RAY
    PIN_RAY = args.pin_ray
    work = Path(tempfile.mkdtemp(prefix=f"privatize-bench-{args.mode}-"))
    try:
        if args.mode in ("cipher", "dedup"):
            run_throughput(args.mode, args.mb or 1024, work, max(1, args.repeat), args.distinct)
        elif args.mode == "redact":
            run_redact(args.docs, work, tuple(int(c) for c in args.cpus.split(",")),
                       Path(args.json) if args.json else None, args.warmup)
        elif args.mode == "identifiers":
            run_identifiers(args.mb or 250, work, args.max_n, tuple(int(c) for c in args.cpus.split(",")),
                            args.store_gb)
        else:
            run_stream(args.mb or 1100, work)
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
