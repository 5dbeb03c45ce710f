"""How long a tenant waits for an adapted detector (issue 51: 1,000 annotated notes in at most
10 minutes on 2 cores): ``privatize train-ner --annotated`` as a user runs it, on all 984
clinical development notes (``../shared/data/real_dev``, each note's patient as its ``group``,
so the 20% held-out slice is other patients), from the command's start to its exit: loading,
the base model's predictions, general rehearsal, training, terms, and the held-out
evaluation and calibration. The baseline, in the same run on the same file: the settings
before 2026-11-30 (``--epochs 10 --batch-size 16 --max-updates 0``; today's update call, which
copies no example, in both). Prints both wall times, the ratio, the
seconds per phase and both detectors' held-out recall and character precision.

    .venv/bin/python benchmarks/adapt_time.py [--no-baseline] [--data ../shared/data]
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

from _common import ROOT, machine, save_result  # noqa: E402  (puts the project on sys.path)

MAP = ("HCPName=PERSON", "PTName=PERSON", "RelativeProxyName=PERSON", "Date=DATE", "DateYear=DATE",
       "Location=GPE")
BASELINE = ("--epochs", "10", "--batch-size", "16", "--max-updates", "0")
TARGET_S = 600.0
_STAMP = re.compile(r"^train-ner: (.*)$")


def run(annotated: Path, out: Path, extra: tuple[str, ...]) -> dict:
    """One ``privatize train-ner --annotated`` process: wall seconds, its stderr lines timed
    as they came, and the JSON it printed."""
    cmd = [sys.executable, "-m", "privatize.cli", "train-ner", "--annotated", str(annotated), "--output", str(out),
           *[x for m in MAP for x in ("--map", m)], *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        m = _STAMP.match(line.rstrip("\n"))
        if m:
            lines.append((round(time.perf_counter() - t0, 1), m.group(1)[:160]))
            print(f"  {lines[-1][0]:7.1f}s {lines[-1][1]}", file=sys.stderr, flush=True)
    stdout = proc.stdout.read()
    if proc.wait() != 0:
        raise SystemExit(f"adapt_time: {' '.join(cmd[2:5])} failed (exit {proc.returncode})")
    wall = time.perf_counter() - t0
    doc = json.loads(stdout.strip().splitlines()[-1])
    det = json.loads((out / "detector.json").read_text(encoding="utf-8"))
    prov = det["provenance"]
    epochs = [h["seconds"] for h in prov["history"]]
    return {"args": list(extra), "wall_s": round(wall, 1), "adapt_s": prov["seconds"],
            "train_s": prov["train_seconds"], "epochs": len(epochs), "epoch_s": epochs,
            "batch_size": prov["batch_size"], "train_records": prov["train_records"],
            "held_out_records": prov["held_out_records"], "train_pieces": prov["train_pieces"],
            "held_out": doc["held_out"], "base_held_out": doc["base_held_out"], "log": lines}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-baseline", action="store_true", help="time the defaults only")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    args = ap.parse_args(argv)
    src = Path(args.data) / "real_dev" / "clinical_physionet_dev.jsonl"
    if not src.is_file():
        print(f"adapt_time: {src} not found (the shared data folder: --data)", file=sys.stderr)
        return 2
    rows = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
    out: dict = {"notes": len(rows), "patients": len({r["patient"] for r in rows}), "target_s": TARGET_S,
                 "runs": {}}
    with tempfile.TemporaryDirectory(prefix="adapt-time-") as work:
        work = Path(work)
        annotated = work / "notes.jsonl"
        annotated.write_text("".join(json.dumps({"text": r["text"], "spans": r["spans"], "group": r["patient"]}) + "\n"
                                     for r in rows), encoding="utf-8")
        plan = [("defaults", ())] + ([] if args.no_baseline else [("baseline", BASELINE)])
        for name, extra in plan:
            print(f"{name}: privatize train-ner --annotated ({len(rows)} notes) {' '.join(extra)}", flush=True)
            r = out["runs"][name] = run(annotated, work / name, extra)
            print(f"{name}: {r['wall_s']:.0f} s wall ({r['epochs']} epochs of {sum(r['epoch_s']) / r['epochs']:.0f} s, "
                  f"batch {r['batch_size']}); held out ({r['held_out_records']} notes): recall "
                  f"{r['held_out']['recall']:.4f}, character precision {r['held_out']['char_precision']:.4f}",
                  flush=True)
    d = out["runs"]["defaults"]
    out["met"] = d["wall_s"] <= TARGET_S
    if "baseline" in out["runs"]:
        out["ratio_to_baseline"] = round(d["wall_s"] / out["runs"]["baseline"]["wall_s"], 3)
    print(f"adapt_time: {len(rows)} notes in {d['wall_s']:.0f} s (target {TARGET_S:.0f} s: "
          f"{'met' if out['met'] else 'NOT met'})"
          + (f"; {out['ratio_to_baseline']:.2f}x the baseline's {out['runs']['baseline']['wall_s']:.0f} s"
             if "ratio_to_baseline" in out else ""), flush=True)
    out["machine_note"] = machine()
    save_result("adapt_time", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
