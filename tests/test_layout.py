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
