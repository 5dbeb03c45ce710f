"""The ``privatize`` command line: one console script for every subcommand.

Exit codes: 0 success, 1 failed verification or a job that failed, 2 bad input or usage.
The last line of ``run`` is a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path

from privatize.errors import PrivatizeError

log = logging.getLogger("privatize")

BUILTIN_COMMANDS = ["privatize.commands.crypto", "privatize.commands.detect"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors exit 2 with one line, like bad input
        self.exit(2, f"{self.prog}: error: {message}\n")


def _cmd_run(args: argparse.Namespace) -> int:
    from privatize.runner import RunOptions, run_pipeline
    from privatize.spec import load_spec

    spec = load_spec(args.spec)
    spec_dir = str(Path(args.spec).parent)
    progress = sys.stderr.isatty()
    if args.ray is not None:
        from privatize.ray_runner import RayRunOptions, run_pipeline_ray

        manifest = run_pipeline_ray(spec, args.input, args.output, spec_dir=spec_dir, address=args.ray or None,
                                    options=RayRunOptions(batch_size=args.batch_size, strict=args.strict,
                                                          overwrite=args.overwrite, progress=progress))
    else:
        manifest = run_pipeline(spec, args.input, args.output, spec_dir=spec_dir,
                                options=RunOptions(batch_size=args.batch_size, strict=args.strict,
                                                   overwrite=args.overwrite, progress=progress))
    summary = {"status": "ok", "output": str(Path(args.output).resolve()),
               "manifest": str((Path(args.output) / "manifest.json").resolve()),
               **manifest["counts"], "quarantine": manifest["quarantine"]["path"],
               "seconds": manifest.get("seconds")}
    print(json.dumps(summary))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from privatize.output import verify

    problems = verify(args.output)
    for p in problems:
        print(p, file=sys.stderr)
    print(json.dumps({"output": str(args.output), "ok": not problems, "problems": len(problems)}))
    return 0 if not problems else 1


def _cmd_make_corpus(args: argparse.Namespace) -> int:
    from privatize.corpus import make_corpus

    info = make_corpus(args.out, n_docs=args.docs, seed=args.seed, repeat_fraction=args.repeat_fraction)
    print(json.dumps(info))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="privatize", description="Privatize text corpora for language-model training.")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a pipeline spec on a corpus")
    r.add_argument("spec", help="pipeline spec (YAML or JSON)")
    r.add_argument("--input", required=True, help="input file or directory (JSONL, text, Parquet)")
    r.add_argument("--output", required=True, help="output directory (must not exist, unless --overwrite)")
    r.add_argument("--batch-size", type=int, default=1024)
    r.add_argument("--strict", action="store_true", help="record-level problems are errors, not quarantined")
    r.add_argument("--overwrite", action="store_true")
    r.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on Ray Data: a cluster address, or none for RAY_ADDRESS or an embedded local Ray")
    r.set_defaults(func=_cmd_run)

    v = sub.add_parser("verify", help="check an output directory against its manifest")
    v.add_argument("output")
    v.set_defaults(func=_cmd_verify)

    m = sub.add_parser("make-corpus", help="generate a seeded corpus with fake PII and gold spans")
    m.add_argument("--out", required=True, help="output JSONL file")
    m.add_argument("--docs", type=int, default=200)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--repeat-fraction", type=float, default=0.2,
                   help="share of sentences that are boilerplate repeated across documents")
    m.set_defaults(func=_cmd_make_corpus)

    for modname in BUILTIN_COMMANDS:
        importlib.import_module(modname).register(sub)
    for ep in entry_points(group="privatize.commands"):
        ep.load()(sub)
    return p


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"privatize: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    warnings.showwarning = _show_warning
    return dispatch(args)


def dispatch(args: argparse.Namespace) -> int:
    """Run a parsed command (``args.func``) the one way every ``privatize`` entry point
    does: logging by ``-v``, one-line errors, exit 2 for bad input, 130 on Ctrl-C."""
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args.func(args) or 0)
    except PrivatizeError as exc:
        msg = str(exc).replace("\n", " ")
        print(f"privatize: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("privatize: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
