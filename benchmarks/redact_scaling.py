"""Redaction through the Ray runner from 1 to 16 CPUs on real-shaped text (issue 55).

The redaction-bound recipe (split by line, redact with the default detector) on the real
development halves, clinical notes and MultiWOZ dialogues (one document per note and per
dialogue, a turn per line), repeated to size, through ``privatize.run(..., runner="ray")``
in a fresh embedded Ray session per CPU count. Each count gets ``--mb-per-cpu`` x CPUs MB,
the largest count ``--mb`` (50): enough work per CPU that the steady state shows, without
the 1-CPU run taking a quarter of an hour.

Per count, from the run's own progress figures (records through the last stage, reported
as blocks finish):

- **start-up**: seconds from the call until the first block is through (Ray Data's
  planning, the reads, the actors' start and spaCy/Presidio loading);
- **steady state**: MB/s between 20% and 80% of the records through (what the CPUs do
  once every actor runs);
- **end to end**: seconds of the whole call (``ray.init`` excluded);
- CPU seconds of every process of the run by role (the driver, redaction actors, Ray
  Data's tasks, raylet and GCS), read from /proc: how much of the machine worked, and the
  driver's share.

Each run (the driver and every Ray process) is pinned to its count of cores: ``num_cpus``
alone only tells Ray's scheduler, and the driver, raylet and tasks would use the others.
Speed-ups are to the 1-CPU run: steady state directly; end to end at the largest count
against the timed 1-CPU run plus the rest of ``--mb`` at its steady throughput (one actor
works through its input in order, so the 1-CPU time of the large input is derived, not
timed, and the JSON says so). Start-up is read late by up to a block and a second (the
figures arrive as blocks finish, at most once a second). Targets (issue 55): >= 12x steady state, >= 10x end to end, from 1
to 16 CPUs on 50 MB.

    python benchmarks/redact_scaling.py [--cpus 1,16,2,8,4] [--mb 50] [--mb-per-cpu 2]
        [--warmup-mb 0.2] [--batch-size 16] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import ROOT, cpu_model, machine, need_data, save_result

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
FILES = 16
SPEC = {"version": 1, "stages": [{"kind": "split", "unit": "line"}, {"kind": "redact"}],
        "output": {"num_shards": 4}}


def base_documents() -> list[str]:
    """Every clinical development note, and every MultiWOZ development dialogue as its
    turns a line each (``USER: ...`` / ``SYSTEM: ...``), interleaved."""
    real = need_data() / "real_dev"
    notes, dialogues = [], []
    with open(real / "clinical_physionet_dev.jsonl", encoding="utf-8") as fh:
        notes = [json.loads(line)["text"] for line in fh if line.strip()]
    with open(real / "dialogue_multiwoz_val.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                dialogues.append("\n".join(f"{t['speaker']}: {t['text']}" for t in d["turns"]))
    out = []
    for i in range(max(len(notes), len(dialogues))):
        out.extend(x[i] for x in (notes, dialogues) if i < len(x))
    return out


def write_corpus(folder: Path, mb: float, docs: list[str]) -> tuple[float, int]:
    """The documents repeated until ``mb`` MB, over :data:`FILES` JSONL files; returns
    (MB written, documents)."""
    folder.mkdir(parents=True)
    handles = [open(folder / f"part-{f:02d}.jsonl", "w", encoding="utf-8") for f in range(FILES)]
    size, n, target = 0, 0, mb * 1e6
    try:
        while size < target:
            d = docs[n % len(docs)]
            handles[n % FILES].write(json.dumps({"doc_id": f"d{n}", "text": d}) + "\n")
            size += len(d.encode())
            n += 1
    finally:
        for h in handles:
            h.close()
    return size / 1e6, n


# ---- CPU seconds by role, from /proc ------------------------------------------------------------

def _proc(pid: int) -> tuple[str, int, float] | None:
    """(name, parent, CPU seconds) of a process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    return cmd, int(f[1]), (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _role(cmd: str) -> str:
    if "raylet" in cmd or "gcs_server" in cmd:
        return "raylet+gcs"
    if "redact" in cmd:  # ray::MapWorker(MapBatches(1_redact)) while it is that actor
        return "redact actors"
    if cmd.startswith("ray::") or "default_worker.py" in cmd:
        return "ray tasks and idle workers"
    if "dashboard" in cmd or "agent" in cmd or "log_monitor" in cmd or "monitor.py" in cmd:
        return "ray agents and monitors"
    return "other"


def descendants() -> dict[int, tuple[str, float]]:
    """(role, CPU seconds so far) of this process ("driver") and of every descendant."""
    me = os.getpid()
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            p = _proc(int(d))
            if p is not None:
                procs[int(d)] = p
    out = {me: ("driver", procs[me][2])} if me in procs else {}
    for pid, (cmd, _, secs) in procs.items():
        q, seen = pid, set()
        while q in procs and q not in seen and q != me:
            seen.add(q)
            q = procs[q][1]
        if q == me and pid != me:
            out[pid] = (_role(cmd), secs)
    return out


class RoleSampler:
    """CPU seconds of the driver and its descendants over a run, by role: sampled every
    half second, each process counted from its first reading (0 if it started during the
    run) to its last, under the role it was last seen in unless it was ever a redaction
    actor (an actor's process is named after its class only while it is one)."""

    def __init__(self):
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.role: dict[int, str] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _read(self, start: bool = False) -> None:
        for pid, (role, secs) in descendants().items():
            if start:
                self.first[pid] = secs
            self.last[pid] = secs
            if self.role.get(pid) != "redact actors":
                self.role[pid] = role

    def _run(self):
        while not self._stop.wait(0.5):
            self._read()

    def __enter__(self):
        self._read(start=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self._read()
        used: dict[str, float] = {}
        for pid, secs in self.last.items():
            used[self.role[pid]] = used.get(self.role[pid], 0.0) + secs - self.first.get(pid, 0.0)
        self.used = {k: round(v, 2) for k, v in used.items()}


# ---- one run ------------------------------------------------------------------------------------

def steady(curve: list[tuple[float, int]], total: int, mb: float, lo: float = 0.2,
           hi: float = 0.8) -> tuple[float | None, float | None]:
    """(start-up seconds, steady MB/s) from (seconds, records through) readings: the time
    of the first reading above zero, and the rate between the first readings at or past
    ``lo`` and ``hi`` of ``total``."""
    first = next((t for t, n in curve if n > 0), None)
    a = next(((t, n) for t, n in curve if n >= lo * total), None)
    b = next(((t, n) for t, n in curve if n >= hi * total), None)
    if a is None or b is None or b[0] <= a[0]:
        return first, None
    return first, mb * (b[1] - a[1]) / total / (b[0] - a[0])


def one_run(cpus: int, folder: Path, out: Path, batch_size: int) -> dict:
    import ray

    from privatize import RunOptions, run
    from privatize.ray import local_init_args
    from privatize.spec import parse_spec

    curve: list[tuple[float, int]] = []
    t0 = [0.0]

    def on_progress(fig: dict) -> None:
        curve.append((time.perf_counter() - t0[0], fig["stages"][-1]["records_in"]))

    # ray.init(num_cpus=c) only tells the scheduler: the driver, raylet, GCS and Ray Data's
    # tasks would still run on the machine's other cores. Confined to c cores (the children
    # inherit it), a run is what a c-core machine does.
    aff = os.sched_getaffinity(0)
    if cpus < len(aff):
        os.sched_setaffinity(0, sorted(aff)[:cpus])
    try:
        ray.init(num_cpus=cpus, include_dashboard=False, **local_init_args(cpus))
        try:
            with RoleSampler() as roles:
                t0[0] = time.perf_counter()
                m = run(parse_spec(SPEC), folder, out, runner="ray", spec_dir=str(folder.parent),
                        options=RunOptions(progress=False, batch_size=batch_size, on_progress=on_progress))
                secs = time.perf_counter() - t0[0]
        finally:
            ray.shutdown()
    finally:
        os.sched_setaffinity(0, aff)
    redact = m["stages"][-1]
    total = redact["records_in"]
    curve.append((secs, total))
    return {"seconds": secs, "curve": curve, "records": total, "cpu_s": roles.used,
            "stages": [{"kind": s["kind"], "records_in": s["records_in"], "seconds": s.get("seconds")}
                       for s in m["stages"]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpus", default="1,2", help="the CPU counts, in this order (a fresh embedded Ray each)")
    ap.add_argument("--mb", type=float, default=50.0, help="MB at the largest CPU count")
    ap.add_argument("--mb-per-cpu", type=float, default=2.0, help="MB per CPU at the other counts")
    ap.add_argument("--warmup-mb", type=float, default=0.0,
                    help="an untimed run on this many MB first, at the first count (a fresh machine compiles "
                         "bytecode and fills the disk cache on its first run)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--json", default=None, help="also write the figures here (default: results/ only)")
    args = ap.parse_args()
    counts = [int(c) for c in args.cpus.split(",")]
    largest = max(counts)
    docs = base_documents()
    work = Path(tempfile.mkdtemp(prefix="privatize-bench-redact-scaling-"))
    runs: dict[int, dict] = {}
    head = {"recipe": "split (line) + redact (default detector)",
            "corpus": "real development halves repeated: clinical notes + MultiWOZ dialogues",
            "batch_size": args.batch_size, "machine": machine(), "cpu_model": cpu_model(),
            "cpus_on_machine": os.cpu_count(), "timing": "ray.init excluded; actor start and model load included",
            "confined": "each run (driver and every Ray process) pinned to its count of cores"}
    print(f"redact scaling: CPUs {args.cpus}; {args.mb:g} MB at {largest}, {args.mb_per_cpu:g} MB per CPU below; "
          f"{machine()}, {cpu_model()}", flush=True)

    def result() -> dict:
        base = runs.get(1)
        rows = []
        for c, r in runs.items():
            row = {"cpus": c, "mb": round(r["mb"], 3), "docs": r["docs"], "records": r["records"],
                   "seconds": round(r["seconds"], 2), "startup_s": r["startup_s"],
                   "steady_mb_per_s": r["steady"], "end_to_end_mb_per_s": round(r["mb"] / r["seconds"], 4),
                   "cpu_s": r["cpu_s"], "busy_share": round(sum(r["cpu_s"].values()) / (c * r["seconds"]), 3),
                   "stages": r["stages"]}
            if base and base["steady"] and r["steady"]:
                row["steady_speedup"] = round(r["steady"] / base["steady"], 2)
            rows.append(row)
        out = {**head, "runs": rows}
        if base and base["steady"] and largest in runs:
            big = runs[largest]
            derived = base["seconds"] + (big["mb"] - base["mb"]) / base["steady"]
            out["end_to_end"] = {"mb": round(big["mb"], 3), "cpus": largest, "seconds": round(big["seconds"], 2),
                                 "one_cpu_seconds_derived": round(derived, 1),
                                 "how": "the timed 1-CPU run + the rest of the MB at its steady MB/s (not timed)",
                                 "speedup": round(derived / big["seconds"], 2)}
        return out

    try:
        if args.warmup_mb > 0:
            mb, n = write_corpus(work / "warm" / "in", args.warmup_mb, docs)
            t = time.perf_counter()
            one_run(counts[0], work / "warm" / "in", work / "warm" / "out", args.batch_size)
            print(f"  warm-up: {mb:.2f} MB, {counts[0]} CPU(s), untimed: {time.perf_counter() - t:.1f} s", flush=True)
        for c in counts:
            target = args.mb if c == largest else args.mb_per_cpu * c
            mb, n = write_corpus(work / f"c{c}" / "in", target, docs)
            r = one_run(c, work / f"c{c}" / "in", work / f"c{c}" / "out", args.batch_size)
            r["startup_s"], r["steady"] = steady(r["curve"], r["records"], mb)
            r["startup_s"] = None if r["startup_s"] is None else round(r["startup_s"], 2)
            r["steady"] = None if r["steady"] is None else round(r["steady"], 4)
            r["mb"], r["docs"] = mb, n
            runs[c] = r
            shutil.rmtree(work / f"c{c}", ignore_errors=True)
            cpu = r["cpu_s"]
            busy = sum(cpu.values()) / (c * r["seconds"])
            up = ""
            if 1 in runs and c != 1 and runs[1]["steady"] and r["steady"]:
                up = f", steady {r['steady'] / runs[1]['steady']:.2f}x the 1-CPU run"
            print(f"  {c:2d} CPU(s): {mb:6.2f} MB, {n} docs, {r['records']} lines: {r['seconds']:6.1f} s end to end "
                  f"({mb / r['seconds']:.3f} MB/s); start-up {r['startup_s']} s; steady {r['steady']} MB/s{up}",
                  flush=True)
            print(f"           CPU seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
                  + f"; busy {busy:.0%} of {c} CPU(s) x wall", flush=True)
            res = result()
            if args.json:
                Path(args.json).parent.mkdir(parents=True, exist_ok=True)
                Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res = result()
    if "end_to_end" in res:
        e = res["end_to_end"]
        s = next(r for r in res["runs"] if r["cpus"] == largest).get("steady_speedup")
        print(f"1 -> {largest} CPUs: steady state {s}x (target >= 12x: {'met' if s and s >= 12 else 'NOT met'}); "
              f"end to end on {e['mb']:.1f} MB {e['speedup']}x ({e['seconds']} s against {e['one_cpu_seconds_derived']} s "
              f"derived for 1 CPU; target >= 10x: {'met' if e['speedup'] >= 10 else 'NOT met'})")
    save_result(Path(args.json).stem if args.json else "redact_scaling", res)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
