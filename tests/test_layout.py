"""The repository's fixed layout and the files CI and users rely on, checked statically."""

import re
import tomllib

import yaml

from tests.conftest import ROOT


def test_design_card_layout_exists():
    for p in ("pyproject.toml", "services", "privatize", "train", "attacks", "deploy", "docker-compose.yml", "tests",
              "benchmarks", "Makefile", ".ci/run", "constraints.txt", "README.md", "CONTRIBUTING.md"):
        assert (ROOT / p).exists(), p


def test_readme_has_exactly_the_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    assert "pip install -e" not in text


def test_every_direct_dependency_is_pinned_in_the_lock():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = meta["dependencies"] + meta["optional-dependencies"]["dev"]
    pinned = {line.split("==")[0].lower().replace("_", "-")
              for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line}
    for d in deps:
        name = re.split(r"[\[<>=;! ]", d, maxsplit=1)[0].strip().lower().replace("_", "-")
        assert name in pinned, name


def test_compose_file_parses_and_builds_the_dockerfile():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    svc = compose["services"]["privatize"]
    assert (ROOT / svc["build"]["dockerfile"]).is_file()
    assert (ROOT / "privatize" / "specs" / svc["command"][1].split("/")[-1]).is_file()


def test_every_benchmark_is_indexed_writes_json_through_the_harness_and_has_a_headline():
    """Issue 34: benchmarks/README.md lists every script of benchmarks/ and experiments/README.md
    every module of experiments/ (issue 49), every benchmark and experiment writes its JSON
    through ``save_result`` (``experiments/common.py``), and RESULTS.md is what
    ``results_table.py`` makes of ``benchmarks/results/`` (so a result that is not in the table
    cannot be committed). A row whose description begins "not a" is a helper."""
    import subprocess
    import sys

    heads = yaml.safe_load((ROOT / "benchmarks" / "results" / "headlines.yaml").read_text())
    for folder in ("benchmarks", "experiments"):
        here = ROOT / folder
        rows = dict(re.findall(r"^\| `([^`]+)` \| ([^|]*)\|", (here / "README.md").read_text(), flags=re.M))
        scripts = {p.name for p in here.iterdir() if p.suffix in (".py", ".sh")}
        assert scripts <= set(rows), f"not in {folder}/README.md's index: {sorted(scripts - set(rows))}"
        assert set(rows) <= scripts, f"indexed in {folder}/README.md, no such file: {sorted(set(rows) - scripts)}"
        helpers = {name for name, what in rows.items() if what.startswith("not a")}
        for name in sorted(s for s in scripts if s.endswith(".py") and s not in helpers):
            assert "save_result(" in (here / name).read_text(), f"{folder}/{name}: no JSON through the harness"
        missing = {s.rsplit(".", 1)[0] for s in set(rows) - helpers} - set(heads)
        assert not missing, f"no headline in benchmarks/results/headlines.yaml: {sorted(missing)}"
    bench = ROOT / "benchmarks"
    assert not list(bench.glob("*.png")), "images go under benchmarks/results/"
    r = subprocess.run([sys.executable, str(bench / "results_table.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
