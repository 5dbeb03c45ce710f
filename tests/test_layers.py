"""The import layers of pyproject.toml's ``[tool.importlinter]`` hold, checked by import-linter
(``lint-imports``) on the code as it is, and a deliberately wrong import in a copy breaks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("privatize", "train", "attacks", "services", "experiments")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with ``root`` first on the path (its pyproject.toml, its packages)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from importlinter.cli import lint_imports_command; "
            "lint_imports_command(['--no-cache'])")
    return subprocess.run([sys.executable, "-c", code, str(root)], cwd=root, capture_output=True, text=True,
                          timeout=300)


def test_the_layers_hold():
    r = lint_imports(ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert contracts >= 8 and f"{contracts} kept, 0 broken" in r.stdout, r.stdout[-1500:]


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    shutil.copy(ROOT / "pyproject.toml", root)
    for p in PACKAGES:
        shutil.copytree(ROOT / p, root / p, ignore=shutil.ignore_patterns("__pycache__"))
    return root


CYCLE = "no import cycles among the modules"


@pytest.mark.parametrize("module, line, contracts", [
    # a stage that reaches up to the job entrypoint (refill once did): above its layer, and a cycle
    ("privatize/stages/split.py", "from privatize.job import run_job", ("privatize: job above runners", CYCLE)),
    # the bottom layer importing a stage (the service once imported refill for a regex)
    ("privatize/refs.py", "from privatize.stages.mask import WORD", ("privatize: job above runners", CYCLE)),
    # training reaching up to the service
    ("train/loop.py", "from services.settings import Settings", ("packages: services and experiments",)),
    # a word list importing the recognizers that use it
    ("privatize/redaction/words.py", "from privatize.redaction.names import NameLineRecognizer",
     ("redaction: the detector above styles", CYCLE)),
    # issue 49: a cycle among a package's modules (the attack registry importing the attacks that
    # import it; the ledger importing the training kind that calls it), even inside a function;
    # each is also above its layer
    ("attacks/registry.py", "import attacks.kinds.mia", (CYCLE, "attacks: the job and CLI")),
    ("services/ledger.py", "def _f():\n    from services.trainings import latest_metrics",
     (CYCLE, "services: the CLI and the HTTP")),
    # the bottom of train reaching up to its config; DP's budget reaching up to the clipping
    ("train/wikitext.py", "from train.config import TrainConfig", ("train: entry points above the run",)),
    ("train/dp/budget.py", "from train.dp.bk import BookKeeping", ("train.dp: the engine above the ledger",)),
    # the job machinery reaching up to a job kind (it finds kinds through the registry); the
    # database layer reaching up to the HTTP surface
    ("services/jobs.py", "def _f():\n    from services.trainings import TRAINING_REF",
     ("services: the CLI and the HTTP", CYCLE)),
    ("services/storage.py", "def _f():\n    from services.routes import jobs", ("services: the CLI and the HTTP", CYCLE)),
    # the registry reaching up to a corpus statistic (no cycle: only the layer); the results
    # reaching up to the report that renders them
    ("attacks/registry.py", "from attacks.corpus_stats import ngram_entropies", ("attacks: the job and CLI",)),
    ("attacks/results.py", "def _f():\n    from attacks.report import write_report", ("attacks: the job and CLI", CYCLE)),
])
def test_a_wrong_import_breaks_a_layer(copy, module, line, contracts):
    path = copy / module
    original = path.read_text()
    try:
        path.write_text(original + f"\n{line}  # deliberately wrong\n")
        r = lint_imports(copy)
    finally:
        path.write_text(original)
    out = r.stdout.replace("\n", " ")
    assert r.returncode == 1, r.stdout[-2000:]
    assert f"{len(contracts)} broken" in r.stdout and r.stdout.count("BROKEN") == len(contracts), r.stdout[-2000:]
    assert all(c in out for c in contracts), r.stdout[-2000:]


def test_no_private_name_is_imported_across_packages():
    """Issue 34: a package uses another's public names only (``train.data.read_table``, not
    ``_read_table``); inside one package, private helpers may be shared."""
    import ast

    crossing = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    top = node.module.split(".")[0]
                    if top in PACKAGES and top != pkg:
                        crossing += [f"{path.relative_to(ROOT)}: from {node.module} import {a.name}"
                                     for a in node.names if a.name.startswith("_")]
    assert not crossing, crossing
