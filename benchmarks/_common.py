"""The benchmarks' way to the shared helpers (data location, timing, one-core pinning,
results files), which live in :mod:`experiments.common` for the benchmarks and the
experiments alike: puts the repository root on ``sys.path`` (the scripts here are run by
path) and re-exports them."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.common import *  # noqa: E402,F401,F403
from experiments.common import DATA, ROOT  # noqa: E402,F401
