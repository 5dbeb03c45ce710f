"""Shared fixtures. Tests that need ../shared/data skip on a user's machine without it,
but fail under CI=true: CI must never go green having tested nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = (ROOT / ".." / "shared" / "data").resolve()

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(condition: bool, reason: str) -> None:
    """Skip when ``condition`` is false, except in CI, where it is a failure."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    need(SHARED_DATA.is_dir(), f"{SHARED_DATA} not found (the shared data folder beside the project)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


def pytest_collection_modifyitems(session, config, items):
    """The integration suite first. A pytest process runs one local Ray: the integration
    suite starts it with its probe installed in every worker, and the other suites join
    it. A suite that started Ray earlier would have it restarted under the integration
    suite, and Ray Data keeps handles to actors of the earlier session that the restart
    leaves dangling (a plan then fails with "Can't find actor ..." instead of running)."""
    items.sort(key=lambda item: 0 if "tests/integration/" in item.nodeid.replace("\\", "/") else 1)
