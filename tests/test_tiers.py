"""The test tiers (tests/conftest.py, `make test-fast`): every name the slow rules list still
names something, so a renamed fixture, module or test cannot drop its tests into the fast tier
unnoticed."""

from __future__ import annotations

import re

from tests.conftest import ROOT, SLOW_FIXTURES, SLOW_MODULES, SLOW_TESTS, slow_reason


def test_every_slow_fixture_is_defined_in_a_test_file():
    sources = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py"))
    defined = set(re.findall(r"^def (\w+)\(", sources, flags=re.M))
    assert set(SLOW_FIXTURES) <= defined, f"not defined under tests/: {sorted(set(SLOW_FIXTURES) - defined)}"


def test_every_slow_module_and_test_exists():
    for path in SLOW_MODULES:
        assert (ROOT / path).is_file(), path
    for nodeid in SLOW_TESTS:
        path, name = nodeid.split("::")
        assert re.search(rf"^def {name}\(", (ROOT / path).read_text(encoding="utf-8"), flags=re.M), nodeid


class _Item:
    def __init__(self, nodeid, fixturenames=(), marks=()):
        self.nodeid, self.fixturenames, self._marks = nodeid, list(fixturenames), set(marks)

    def get_closest_marker(self, name):
        return name if name in self._marks else None


def test_the_rules():
    assert slow_reason(_Item("tests/x/test_a.py::test_b", ["tmp_path"])) is None
    assert slow_reason(_Item("tests/x/test_a.py::test_b", ["tmp_path"], ["slow"])) == "marked slow"
    assert "local Ray" in slow_reason(_Item("tests/x/test_a.py::test_b", ["probe", "ray_session"]))
    assert "service" in slow_reason(_Item("tests/x/test_a.py::test_b[postgres-s3]", ["service"]))
    assert slow_reason(_Item("tests/x/test_a.py::test_b", marks=["ray"])) == "marked ray"
    assert slow_reason(_Item("tests/train/test_train_ray.py::test_anything")) is not None
    nodeid = next(iter(SLOW_TESTS))
    assert slow_reason(_Item(nodeid + "[param]")) == SLOW_TESTS[nodeid]
