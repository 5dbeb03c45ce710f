"""``privatize run`` and ``privatize verify``: run a pipeline spec on a corpus, and check
an output folder against its manifest.

``run SPEC --input PATH --output DIR [--batch-size N] [--strict] [--overwrite]
[--ray [ADDRESS]]`` goes through the one façade, :func:`privatize.api.run` (the local
runner, or Ray Data with ``--ray``: the given address, else ``RAY_ADDRESS``, else an
embedded local Ray); its last stdout line is a one-line JSON summary. In process, progress
goes to stderr: a bar per stage on a terminal (records, records/s, ETA), else a line per
stage every 10 s (``--progress-every``) and when it ends; ``--quiet`` shows none. With
``--ray`` a terminal shows Ray Data's own bars. ``verify DIR``
prints ``{"output", "ok", "problems"}`` and exits 1 when a shard does not match.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ORDER = 10  # where `privatize --help` lists this module's commands


def _run(args: argparse.Namespace) -> int:
    from privatize.api import RunOptions, run
    from privatize.output import MANIFEST

    tty = sys.stderr.isatty()
    if args.quiet:
        progress = False
    elif args.ray is not None:
        progress = tty  # Ray Data's own bars
    else:
        progress = "bar" if tty else "lines"
    options = RunOptions(batch_size=args.batch_size, strict=args.strict, overwrite=args.overwrite,
                         progress=progress, progress_every=args.progress_every)
    manifest = run(args.spec, args.input, args.output, runner="local" if args.ray is None else "ray",
                   spec_dir=str(Path(args.spec).parent), address=args.ray or None, options=options)
    summary = {"status": "ok", "output": str(Path(args.output).resolve()),
               "manifest": str((Path(args.output) / MANIFEST).resolve()),
               **manifest["counts"], "quarantine": manifest["quarantine"]["path"],
               "seconds": manifest.get("seconds")}
    print(json.dumps(summary))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from privatize.output import verify

    problems = verify(args.output)
    for p in problems:
        print(p, file=sys.stderr)
    print(json.dumps({"output": str(args.output), "ok": not problems, "problems": len(problems)}))
    return 0 if not problems else 1


def register(sub) -> None:
    r = sub.add_parser("run", help="run a pipeline spec on a corpus")
    r.add_argument("spec", help="pipeline spec (YAML or JSON)")
    r.add_argument("--input", required=True, help="input file or directory (JSONL, text, Parquet)")
    r.add_argument("--output", required=True, help="output directory (must not exist, unless --overwrite)")
    r.add_argument("--batch-size", type=int, default=1024)
    r.add_argument("--strict", action="store_true", help="record-level problems are errors, not quarantined")
    r.add_argument("--overwrite", action="store_true")
    r.add_argument("--quiet", action="store_true", help="no progress on stderr")
    r.add_argument("--progress-every", type=float, default=10.0, metavar="SECONDS",
                   help="seconds between progress lines when stderr is no terminal (default 10)")
    r.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on Ray Data: a cluster address, or none for RAY_ADDRESS or an embedded local Ray")
    r.set_defaults(func=_run)

    v = sub.add_parser("verify", help="check an output directory against its manifest")
    v.add_argument("output")
    v.set_defaults(func=_verify)
