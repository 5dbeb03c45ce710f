"""Write ``benchmarks/RESULTS.md``: per benchmark and experiment, its latest figure and a
short history.

Not a benchmark: it reads what the benchmarks and the experiments wrote and measures nothing.

* ``benchmarks/results/<name>.json`` and ``results/history/<name>/*.json``: what a script
  wrote through ``save_result`` (``experiments/common.py``; keyed by commit, machine and date);
* ``benchmarks/results/headlines.yaml``: the latest figure of each script, one line, with
  its date, machine and target, as the diary recorded it (the scripts' runs before the
  JSON harness existed, and the one-line reading of those after);
* ``benchmarks/results/DIARY.md``: every run as it was recorded, sessions 1 to 22, with
  methods and readings; each benchmark's section links to its entry there.

Order and the list of scripts come from the indexes: ``benchmarks/README.md``'s, then
``experiments/README.md``'s (a row whose description begins "not a" is a helper, not in
the table). Run:
``python benchmarks/results_table.py`` (``--check``: exit 1 if RESULTS.md is not what it
would write).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
INDEXES = {"benchmarks": HERE / "README.md", "experiments": HERE.parent / "experiments" / "README.md"}
MAX_FIGURES = 14
MAX_HISTORY = 6


def index(folder: str) -> tuple[list[str], set[str]]:
    """The names of ``folder``'s index (``benchmarks`` or ``experiments``), in its order, and
    those of them that are helpers (their description begins "not a")."""
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]*)\|", INDEXES[folder].read_text(), flags=re.M)
    return [r for r, _ in rows], {r for r, what in rows if what.startswith("not a")}


def scripts(folder: str | None = None) -> list[str]:
    """The scripts of the indexes (one folder's, or both: the benchmarks', then the
    experiments'), in their order, helpers left out."""
    out = []
    for f in ([folder] if folder else list(INDEXES)):
        names, helpers = index(f)
        out += [n for n in names if n not in helpers]
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def diary_anchors() -> list[tuple[str, str]]:
    """(heading text, GitHub anchor) of every heading of the diary, in order (a repeated
    heading's anchor gets GitHub's ``-1``, ``-2``... suffix)."""
    seen: dict[str, int] = {}
    out = []
    for line in (RESULTS / "DIARY.md").read_text().splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append((m.group(1).strip(), base if n == 0 else f"{base}-{n}"))
    return out


def diary_link(script: str, heading: str | None, anchors: list[tuple[str, str]]) -> str | None:
    """The anchor of ``heading`` inside the diary's section of ``script`` (the first such
    heading after ``## script``, else after it anywhere), or of the script's own section."""
    start = next((i for i, (h, _) in enumerate(anchors) if h == script), None)
    order = anchors[start:] + anchors[:start] if start is not None else anchors
    if heading:
        for h, a in order:
            if h == heading:
                return a
    return anchors[start][1] if start is not None else None


def flat(d, prefix: str = "") -> list[tuple[str, object]]:
    """Scalar leaves of a result as (dotted path, value); lists of numbers shortened."""
    out: list[tuple[str, object]] = []
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            out.extend(flat(v, path + "."))
        elif isinstance(v, list):
            if v and all(isinstance(x, (int, float)) for x in v) and len(v) <= 5:
                out.append((path, ", ".join(fmt(x) for x in v)))
        else:
            out.append((path, v))
    return out


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    return str(v)


def json_results(stem: str) -> tuple[dict | None, list[dict]]:
    """The latest JSON of a script (``<stem>.json``, or ``<stem>_*.json`` variants) and its
    history, newest first."""
    latest = None
    files = sorted(RESULTS.glob(f"{stem}.json")) + sorted(RESULTS.glob(f"{stem}[-_]*.json"))
    docs = []
    for f in files:
        try:
            docs.append(json.loads(f.read_text()))
        except ValueError:
            continue
    docs.sort(key=lambda d: str(d.get("date", "")), reverse=True)
    latest = docs[0] if docs else None
    hist = []
    for d in sorted(RESULTS.glob(f"history/{stem}*/*.json")):
        try:
            hist.append(json.loads(d.read_text()))
        except ValueError:
            continue
    hist.sort(key=lambda d: str(d.get("date", "")), reverse=True)
    return latest, hist


def section(script: str, head: dict | None, anchors: list[tuple[str, str]]) -> str:
    stem = script.rsplit(".", 1)[0]
    latest, hist = json_results(stem)
    lines = [f"## {script}", ""]
    if head and head.get("figure"):
        met = {True: "met", False: "**not met**"}.get(head.get("met"), "")
        target = f" Target: {head['target']}{' (' + met + ')' if met else ''}." if head.get("target") else ""
        lines += [f"{head['figure']} ({head.get('date')}, {head.get('machine')}).{target}", ""]
    elif head and head.get("note"):
        lines += [f"{head['note']}.", ""]
    if latest is not None:
        figures = [(k, v) for k, v in flat(latest) if k not in ("benchmark", "commit", "machine", "date")]
        lines += [f"Latest JSON: `results/{latest.get('benchmark', stem)}.json`, {latest.get('date')}, commit "
                  f"`{latest.get('commit')}`, {latest.get('machine')}.", ""]
        if figures:
            lines += ["| figure | value |", "|---|---|"]
            lines += [f"| `{k}` | {fmt(v)} |" for k, v in figures[:MAX_FIGURES]]
            if len(figures) > MAX_FIGURES:
                lines.append(f"| ... | {len(figures) - MAX_FIGURES} more in the JSON |")
            lines.append("")
    if len(hist) > 1:
        lines += ["Runs kept in `results/history/`:", "", "| date | commit | machine | benchmark |", "|---|---|---|---|"]
        lines += [f"| {h.get('date')} | `{h.get('commit')}` | {h.get('machine')} | {h.get('benchmark')} |"
                  for h in hist[:MAX_HISTORY]]
        lines.append("")
    link = diary_link(script, head.get("section") if head else None, anchors)
    if link:
        lines += [f"Methods and earlier runs: [the diary](results/DIARY.md#{link}).", ""]
    return "\n".join(lines)


def summary(names: list[str], heads: dict) -> list[str]:
    out = ["| script | latest figure | target | date |", "|---|---|---|---|"]
    for s in names:
        h = heads.get(s.rsplit(".", 1)[0]) or heads.get(s) or {}
        fig = (h.get("figure") or h.get("note") or "not recorded").replace("|", "\\|")
        met = {True: " (met)", False: " (**not met**)"}.get(h.get("met"), "")
        target = f"{h['target']}{met}".replace("|", "\\|") if h.get("target") else ""
        out.append(f"| [`{s}`](#{slug(s)}) | {fig} | {target} | {h.get('date') or ''} |")
    return out + [""]


def render() -> str:
    heads = yaml.safe_load((RESULTS / "headlines.yaml").read_text()) or {}
    bench, exp = scripts("benchmarks"), scripts("experiments")
    out = ["# Results: benchmarks and experiments", "",
           "Per benchmark and experiment, its latest figure and where it came from. Generated by "
           "`python benchmarks/results_table.py` from the JSON the scripts write (`benchmarks/results/`, "
           "keyed by commit, machine and date) and `results/headlines.yaml` (each script's latest "
           "figure as recorded). How to run each script: [README.md](README.md) (benchmarks: throughput, "
           "step time, latency) and [experiments/README.md](../experiments/README.md) (the papers' tables "
           "and quality). Every run as it was "
           "recorded, with methods and readings, sessions 1 to 22: [results/DIARY.md](results/DIARY.md).",
           "", "Machines are noisy: the figures that hold are ratios to a baseline measured in the same "
           "run. \"sandbox\" is the 2-core development machine; \"device\" a lent machine (16 cores, one "
           "H100 or H200).", "", "## Summary: benchmarks (`benchmarks/`)", ""]
    out += summary(bench, heads)
    out += ["## Summary: experiments (`experiments/`)", ""]
    out += summary(exp, heads)
    anchors = diary_anchors()
    for s in bench + exp:
        out.append(section(s, heads.get(s.rsplit(".", 1)[0]) or heads.get(s), anchors))
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if RESULTS.md differs from what would be written")
    args = p.parse_args(argv)
    text = render()
    target = HERE / "RESULTS.md"
    if args.check:
        same = target.read_text() == text
        print("RESULTS.md is up to date" if same else "RESULTS.md is out of date: run benchmarks/results_table.py")
        return 0 if same else 1
    tmp = target.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(target)
    print(f"wrote {target} ({len(text.splitlines())} lines, {len(scripts('benchmarks'))} benchmarks, "
          f"{len(scripts('experiments'))} experiments)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
