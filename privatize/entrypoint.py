"""What every Ray Jobs entrypoint (``python -m privatize.job``, ``train.job``,
``attacks.job``) does around its work, in one place: usage errors and bad input exit 2
with one line on stderr, an interrupt exits 130, success prints the one-line JSON
summary that the service reads as the job's last stdout line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from typing import Callable

from privatize.errors import PrivatizeError


class JobParser(argparse.ArgumentParser):
    """An argument parser whose usage errors exit 2 with one line, like bad input."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def run_entrypoint(name: str, verbose: bool, work: Callable[[], dict]) -> int:
    """Run ``work`` with the entrypoints' logging, warnings and exit codes; ``name``
    prefixes every message (``train: error: ...``)."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    warnings.showwarning = lambda message, *a, **k: print(f"{name}: warning: {message}", file=sys.stderr)
    try:
        summary = work()
    except PrivatizeError as exc:
        print(f"{name}: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(summary))
    return 0
