"""The ``privatize`` command line: one console script for every subcommand.

Exit codes: 0 success, 1 failed verification or a job that failed, 2 bad input or usage.
The last line of ``run`` is a one-line JSON summary. Every subcommand lives in a module
with a ``register(subparsers)`` function: the built-in ones in ``privatize/commands/``
(every module there, found as the registries find their kinds: nothing to list; ``--help``
lists them by each module's ``ORDER``), others through the ``privatize.commands``
entry-point group.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
import warnings
from importlib.metadata import entry_points

from privatize.errors import PrivatizeError

log = logging.getLogger("privatize")



def builtin_commands() -> list:
    """Every module of :mod:`privatize.commands` with a ``register`` function (a helper module
    there without one is not a command), in the order ``--help`` lists them (each module's
    ``ORDER``, then its name)."""
    import privatize.commands as package

    mods = [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]
    return sorted((m for m in mods if callable(getattr(m, "register", None))),
                  key=lambda m: (getattr(m, "ORDER", 100), m.__name__))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors exit 2 with one line, like bad input
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="privatize", description="Privatize text corpora for language-model training.")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    for mod in builtin_commands():
        mod.register(sub)
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


def run_standalone(register_fn, argv: list[str] | None, prefix: list[str] | None = None) -> int:
    """Run commands registered by ``register_fn`` (a subparsers' registration, as a
    plugin's or the service's commands have) the way :func:`main` does: one-line errors,
    exit 2 for bad input."""
    p = argparse.ArgumentParser(prog="privatize")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)
    register_fn(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    return dispatch(p.parse_args([*(prefix or []), *argv]))


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
