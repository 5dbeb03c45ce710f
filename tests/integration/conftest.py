"""One real local Ray for the integration suite (``ray.init(num_cpus=2)`` costs seconds:
start it once), plus a probe that proves where stage code ran.

The probe is a ``worker_process_setup_hook``: in every Ray worker it wraps the stage
methods (``process_batch``, ``keys``, ``decide``, ``apply``) so each call leaves a file
``<pid>-<node>-<kind>.<method>`` in the folder named by ``PRIVATIZE_TEST_PROBE``. The
tests install the same wrappers in the driver for in-process runs.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from tests.conftest import ROOT

PROBE_ENV = "PRIVATIZE_TEST_PROBE"
PROBED_METHODS = ("process_batch", "keys", "decide", "apply")


def _probed(fn, kind: str, name: str):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        folder = os.environ.get(PROBE_ENV)
        if folder and os.path.isdir(folder):
            node = "driver"
            try:
                import ray

                if ray.is_initialized():
                    node = ray.get_runtime_context().get_node_id()[:12]
            except Exception:  # noqa: BLE001 - the probe must never break a stage
                pass
            Path(folder, f"{os.getpid()}-{node}-{kind}.{name}").touch()
        return fn(self, *args, **kwargs)

    wrapper.__probed__ = True
    return wrapper


def probe_targets() -> list[tuple[type, str]]:
    from privatize.execution import UniqueIds
    from privatize.stages import registered_kinds

    classes = [cls for _, cls in registered_kinds().values()] + [UniqueIds]
    return [(cls, m) for cls in classes for m in PROBED_METHODS if m in cls.__dict__]


def install_probe() -> None:
    """The worker setup hook (also callable in the driver): wrap every stage method."""
    for cls, name in probe_targets():
        fn = cls.__dict__[name]
        if not getattr(fn, "__probed__", False):
            setattr(cls, name, _probed(fn, cls.kind, name))


def probe_calls(folder: Path) -> list[tuple[int, str, str]]:
    """(pid, node, kind.method) of every probed call recorded in ``folder``."""
    out = []
    for p in folder.iterdir():
        pid, node, what = p.name.split("-", 2)
        out.append((int(pid), node, what))
    return out


def ray_env(probe_dir: Path | None = None) -> dict:
    """Environment for a process (or the raylet it starts) whose workers import this
    checkout: workers inherit the environment, not the driver's ``sys.path``."""
    env = dict(os.environ)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.pop("RAY_ADDRESS", None)
    if probe_dir is not None:
        env[PROBE_ENV] = str(probe_dir)
    return env


@pytest.fixture(scope="session")
def ray_session(tmp_path_factory):
    """The suite's one local Ray (2 CPUs), with the probe installed in its workers."""
    import ray

    probe_dir = tmp_path_factory.mktemp("probe")
    saved = dict(os.environ)
    os.environ.update(ray_env(probe_dir))
    os.environ.pop("RAY_ADDRESS", None)
    if ray.is_initialized():
        ray.shutdown()
    from privatize.ray import local_init_args

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **local_init_args(2),
             runtime_env={"worker_process_setup_hook": "tests.integration.conftest.install_probe"})
    try:
        yield probe_dir
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture()
def probe(ray_session, monkeypatch):
    """An empty probe folder for this test, and the probe wrappers in the driver."""
    for p in ray_session.iterdir():
        p.unlink()
    for cls, name in probe_targets():
        fn = cls.__dict__[name]
        if not getattr(fn, "__probed__", False):
            monkeypatch.setattr(cls, name, _probed(fn, cls.kind, name))
    return ray_session
