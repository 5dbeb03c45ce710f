"""Nothing installed reads outside its package (issue 54, item 2): no module under privatize,
train, attacks or services builds a path to ``../shared`` (the development data beside a
checkout, which an installed package or a new clone does not have). Data locations are
arguments or settings; defaults point at the data shipped in ``privatize/data``. Prose may
say where larger data can be found; code may not default to it."""

from __future__ import annotations

import ast
from pathlib import Path

import regex as re

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("privatize", "train", "attacks", "services")
# a path to the shared data, in a string or built with pathlib: "../shared", "shared/data",
# "shared" / "data", parent / "shared", ".." / "shared"
PATTERNS = [re.compile(p) for p in (
    r"\.\./shared\b",
    r"\bshared/data\b",
    r"""["']shared["']\s*/\s*["']data["']""",
    r"""(?:parent|parents\[\d+\]|["']\.\.["'])\s*/\s*["']shared["']""",
)]


def _docstrings(tree: ast.AST) -> set[int]:
    """Line numbers of every docstring (module, class, function): prose, not defaults."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def offending_lines(source: str) -> list[tuple[int, str]]:
    prose = _docstrings(ast.parse(source))
    hits = []
    for n, line in enumerate(source.splitlines(), 1):
        code = line.split("#", 1)[0]
        if n not in prose and any(p.search(code) for p in PATTERNS):
            hits.append((n, line.strip()))
    return hits


def test_no_module_builds_a_path_to_the_shared_data():
    found = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            found += [f"{f.relative_to(ROOT)}:{n}: {line}" for n, line in offending_lines(f.read_text(encoding="utf-8"))]
    assert not found, "library code names the shared data beside a checkout:\n" + "\n".join(found)


def test_the_scan_finds_what_it_is_meant_to():
    bad = ['DATA = ROOT.parent / "shared" / "data"\n',
           'D = (Path(__file__).parents[2] / ".." / "shared" / "data").resolve()\n',
           'p.add_argument("--data", default="../shared/data")\n',
           'HELP = f"default {ROOT}/shared/data"\n']
    for src in bad:
        assert offending_lines(src), src
    ok = ['"""Larger data: a checkout may have it at ``../shared/data``."""\n',
          'x = 1  # not ../shared/data\n',
          'mode = "shared"\n']
    for src in ok:
        assert not offending_lines(src), src
