"""The demo's public data ships with the package (issue 54, item 1): the main job's 400 + 200
CustomerSim dialogues and the public base's Gutenberg stories, small, with their licences,
and installed as package data."""

from __future__ import annotations

import json
import random
import tomllib
from pathlib import Path

import pytest

from privatize.corpus import DEMO_DATA, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
FILES = ["customersim/train.jsonl.gz", "customersim/test.jsonl.gz", "gutenberg/stories.jsonl.gz"]


def test_the_dialogues_are_the_main_jobs_samples_with_gold_spans():
    for split, n in (("train", 400), ("test", 200)):
        rows = read_jsonl(DEMO_DATA / "customersim" / f"{split}.jsonl.gz")
        assert len(rows) == n and len({r["id"] for r in rows}) == n
        assert all(r["kind"] == "dial" and r["id"].startswith(f"{split}/dial-") for r in rows)
        for r in rows:
            assert r["text"].startswith("SYS:") and r["spans"]
            assert all(r["text"][s["start"]:s["end"]] == s["text"] for s in r["spans"])
    sizes = sum((DEMO_DATA / "customersim" / f).stat().st_size for f in ("train.jsonl.gz", "test.jsonl.gz"))
    assert sizes < 1_000_000


@pytest.mark.data
def test_the_dialogues_are_the_seeded_samples_of_the_full_set(shared_data):
    """The shipped files are what the main job draws from the full CustomerSim, in order: a
    checkout with the full set and a clone without it train on the same 400 dialogues."""
    for split, n, seed in (("train", 400, 0), ("test", 200, 9)):
        full = [r for r in read_jsonl(shared_data / "customersim" / f"{split}.jsonl") if r["kind"] != "canary"]
        assert read_jsonl(DEMO_DATA / "customersim" / f"{split}.jsonl.gz") == random.Random(seed).sample(full, n)


def test_every_file_has_its_origin_and_licence_beside_it():
    readme = (DEMO_DATA / "README.md").read_text()
    for f in FILES:
        assert f in readme  # listed with its size and hash
    assert "MIT" in readme and "wyshi/lm_privacy" in readme
    assert "public domain" in readme and "nyu-mll/SQuALITY" in readme
    assert "MIT License" in (DEMO_DATA / "customersim" / "LICENSE").read_text()
    assert "gutenberg.org" in (DEMO_DATA / "gutenberg" / "GUTENBERG_LICENSE.txt").read_text()
    assert "wikitext" not in {p.parent.name.lower() for p in DEMO_DATA.rglob("*")}  # no share-alike text
    stories = read_jsonl(DEMO_DATA / "gutenberg" / "stories.jsonl.gz")
    assert len(stories) == 75 and all(s["doc_id"].startswith("gutenberg-") for s in stories)
    assert set(stories[0]) == {"doc_id", "text"}  # SQuALITY's CC BY summaries are not shipped


def test_the_data_is_package_data():
    """Each shipped file matches a ``[tool.setuptools.package-data]`` pattern, so a
    non-editable install has it too."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["privatize"]
    pkg = ROOT / "privatize"
    shipped = {p.relative_to(pkg) for g in globs for p in pkg.glob(g)}
    for f in [p for p in DEMO_DATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts]:
        assert f.relative_to(pkg) in shipped, f
    assert json.dumps(sorted(map(str, shipped)))  # (the globs match at all)
