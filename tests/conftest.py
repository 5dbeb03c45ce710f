"""Shared fixtures. Tests that need ../shared/data skip on a user's machine without it,
but fail under CI=true: CI must never go green having tested nothing."""

from __future__ import annotations

import faulthandler
import logging
import os
import threading
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


WATCHDOG_GRACE_S = float(os.environ.get("PRIVATIZE_TEST_WATCHDOG_GRACE_S", "120"))
"""How long past its pytest-timeout a test may still run before the watchdog ends the run."""


def _test_timeout(item) -> float:
    """The item's pytest-timeout as pytest-timeout itself reads it (marker, then
    ``--timeout`` / ``PYTEST_TIMEOUT`` / the ini); 0 (no watchdog) without the plugin."""
    try:
        from pytest_timeout import _get_item_settings
    except ImportError:
        return 0.0
    if not hasattr(item.config, "_env_timeout"):  # the plugin is installed but not loaded
        return 0.0
    return float(_get_item_settings(item).timeout or 0)


_REAL_STDERR: list[int] = []
"""A duplicate of the process's stderr taken before any test's output is captured: where
the watchdog writes (pytest's fd capture has fd 2 in a temporary file during a test)."""


def pytest_configure(config):
    if not _REAL_STDERR:  # capture is suspended here: fd 2 is the terminal (or CI's log)
        _REAL_STDERR.append(os.dup(2))


def _stderr_fd() -> int:
    return _REAL_STDERR[0] if _REAL_STDERR else 2


def _end_hung_run(nodeid: str, limit: float) -> None:
    """The watchdog's end of a pytest process whose test outlived its timeout and the
    grace: every thread's stack, then one line naming the test (the last line CI shows),
    exit code 3. Without it, a test blocked where pytest-timeout's signal cannot reach it (a
    C call that does not return to the interpreter) holds CI until its own limit, the test
    unnamed. (Under pytest-xdist, the worker ends and xdist reports it crashed.)"""
    try:
        fd = _stderr_fd()
        os.write(fd, f"\n==== watchdog: {nodeid} still running after {limit:.0f} s; every thread's stack:\n".encode())
        faulthandler.dump_traceback(file=fd, all_threads=True)
        os.write(fd, f"==== watchdog: HUNG TEST {nodeid}: ran past its timeout and {WATCHDOG_GRACE_S:g} s more; "
                     "this pytest process ends here (exit 3)\n".encode())
    finally:
        os._exit(3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Arm the watchdog for the test's setup, call and teardown (see :func:`_end_hung_run`).
    Its timer is a Python thread, which needs the GIL; a C call that blocks holding it is
    caught 30 s later by faulthandler's own C thread (the stacks, exit 1)."""
    timeout = _test_timeout(item)
    if timeout <= 0 or item.config.getoption("usepdb", False) or item.config.getoption("trace", False):
        yield
        return
    limit = timeout + WATCHDOG_GRACE_S
    timer = threading.Timer(limit, _end_hung_run, args=(item.nodeid, limit))
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(limit + 30, file=_stderr_fd(), exit=True)
    try:
        yield
    finally:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """The root logger as it was before the test: a command run in process
    (``logging.basicConfig`` in the CLIs' ``main``) otherwise leaves a handler on the test's
    captured stderr, closed once the test ends, and every later log record (httpx's request
    lines in the end-to-end tests) fails with "I/O operation on closed file"."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    need(SHARED_DATA.is_dir(), f"{SHARED_DATA} not found (the shared data folder beside the project)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


# ---- test tiers -------------------------------------------------------------------------
# `make test-fast` runs `-m "not slow"`: everything in process. A test is `slow` when it
# (directly or through a fixture) starts something outside the pytest process or a cluster
# inside it. Marked here from the fixtures a test uses (item.fixturenames is the transitive
# closure), so a new test that asks for one of these is slow without a hand marker:

SLOW_FIXTURES = {
    # a local Ray (ray.init): the integration suite's, the training suite's, the canaries module's
    "ray_session": "starts a local Ray",
    "_train_ray_session": "starts a local Ray (Ray Train)",
    "ray_probe": "starts a local Ray",
    # Ray Train runs (session fixtures that pretrain a model with train.run)
    "wikitext_base": "Ray Train runs (the paper 002/003 base, trained beside the refill filler)",
    "tiny_filler": "Ray Train runs (the refill filler, trained beside the paper 002/003 base)",
    "_wikitext_models": "two Ray Train runs side by side (the two above)",
    # the API service as a subprocess (uvicorn, its embedded Ray head; PostgreSQL + S3 back end)
    "service": "starts the service (uvicorn subprocess and its Ray head)",
    "other_service": "starts the service on the other back end",
    # an external PostgreSQL (skips without PRIVATIZE_TEST_DATABASE_URL)
    "pg_engine": "needs a PostgreSQL server",
    # `transformers serve`, a real LLM server process
    "served_model": "starts `transformers serve`",
}

# (services/test_kind_plugin.py's `server`, uvicorn in a thread of this process with jobs run in
# process, stays in the fast tier: about 1.5 s, nothing started outside the process.)

# Modules that start Ray, Ray Train or another process in the test body or in a fixture
# whose name says nothing (e.g. `trained`): each test of the module is slow.
SLOW_MODULES = {
    "tests/attacks/test_attacks_detect.py": "Ray Train runs in its `trained` fixture",
    "tests/integration/test_ray_multinode.py": "starts Ray nodes",
    "tests/integration/test_ray_parity.py": "the Ray runner against a local Ray",
    "tests/train/test_train_multinode.py": "the actor store of Ray Train on several nodes",
    "tests/train/test_train_ray.py": "Ray Train runs",
}

# Single tests that start processes themselves or compute for tens of seconds in process (the
# fast tier's budget is 4 minutes on 2 cores; `--durations` of `make test-fast` names candidates):
SLOW_TESTS = {
    "tests/test_watchdog.py::test_a_test_the_timeout_signal_cannot_reach_ends_the_run_naming_it":
        "runs pytest in a subprocess until its watchdog ends it",
    "tests/train/test_train_units.py::test_book_keeping_under_ddp_takes_the_one_process_plain_steps":
        "starts two torch.distributed worker processes and their TCP store",
    "tests/attacks/test_exposure_trie.py::test_trie_equals_naive_on_every_5_digit_candidate":
        "naive scoring of all 10^5 candidates (about 20 s)",
    "tests/train/test_privacy.py::test_the_bounded_prv_child_answers_the_noise_and_its_epsilon":
        "starts the bounded PRV child (a fresh interpreter importing torch and Opacus, about 9 s)",
    "tests/train/test_privacy.py::test_prv_runs_within_its_budget_or_gives_way_to_rdp":
        "starts the bounded PRV child twice, once to its memory limit (about 16 s)",
    "tests/privatize/test_ner_adapt.py::test_rehearsal_keeps_names_and_dates":
        "trains two more spaCy detectors, without rehearsal and with general sentences only (about 23 s)",
}

# markers that imply `slow` (a test marked `ray` needs a real Ray, `server` a server process)
SLOW_MARKERS = ("ray", "server")


def slow_reason(item) -> str | None:
    """Why ``item`` belongs to the slow tier, or None for the in-process (fast) tier."""
    if item.get_closest_marker("slow") is not None:
        return "marked slow"
    for name in getattr(item, "fixturenames", ()):
        if name in SLOW_FIXTURES:
            return f"fixture {name}: {SLOW_FIXTURES[name]}"
    nodeid = item.nodeid.replace("\\", "/")
    path, test = nodeid.split("::", 1)[0], nodeid.split("[", 1)[0]
    if path in SLOW_MODULES:
        return f"module: {SLOW_MODULES[path]}"
    if test in SLOW_TESTS:
        return SLOW_TESTS[test]
    for m in SLOW_MARKERS:
        if item.get_closest_marker(m) is not None:
            return f"marked {m}"
    return None


def pytest_collection_modifyitems(session, config, items):
    """The tiers: a test that starts Ray, Ray Train, a server or an LLM server is marked
    ``slow`` (``slow_reason``), so ``-m "not slow"`` runs only what stays in process.

    Then the integration suite first. A pytest process runs one local Ray: the integration
    suite starts it with its probe installed in every worker, and the other suites join
    it. A suite that started Ray earlier would have it restarted under the integration
    suite, and Ray Data keeps handles to actors of the earlier session that the restart
    leaves dangling (a plan then fails with "Can't find actor ..." instead of running)."""
    for item in items:
        reason = slow_reason(item)
        if reason is not None and reason != "marked slow":
            item.add_marker(pytest.mark.slow(reason=reason))
    items.sort(key=lambda item: 0 if "tests/integration/" in item.nodeid.replace("\\", "/") else 1)


@pytest.fixture(scope="session")
def wikitext_docs(shared_data, tmp_path_factory) -> dict:
    """WikiText-2 paragraphs as JSONL: ``valid`` (1,841 paragraphs) and ``test``."""
    from train.wikitext import paragraphs, write_jsonl

    d = tmp_path_factory.mktemp("wikitext")
    src = shared_data / "wikitext2_tokenized"
    return {split: write_jsonl(paragraphs(src / f"{split}.txt"), d / f"{split}.jsonl") for split in ("valid", "test")}


def driver_imports() -> None:
    """The transformers names a training's driver uses, imported once: transformers' lazy
    imports are not thread-safe (two threads importing a name for the first time: an
    ImportError in one), so tests that run trainings in threads call this first."""
    from transformers import (AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM,  # noqa: F401
                              AutoTokenizer, BertConfig, LlamaConfig, PreTrainedTokenizerFast)


def side_by_side(*calls):
    """Each of ``calls`` (callables without arguments) at once, one thread each: the results
    in order, or the first error raised. For Ray Train runs that fit the test cluster's 2
    CPUs together (on 2 cores two one-worker runs at once take about 3/4 of the time of one
    after the other)."""
    from concurrent.futures import ThreadPoolExecutor

    driver_imports()
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(c) for c in calls]]


def all_cpus_free(ray):
    """Ray, once every CPU is free: a Ray Train run starts only once what earlier tests ran
    has released its CPUs (up to 60 s), and the test fails naming the actors still holding
    them rather than waiting behind them."""
    import time

    total = ray.cluster_resources().get("CPU", 0)
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < total and time.monotonic() < deadline:
        time.sleep(0.5)
    if ray.available_resources().get("CPU", 0) < total:
        from ray._private.state import actors  # the GCS's table: this cluster runs no dashboard

        # every actor not dead: one still being created holds its CPUs too (a Ray Data pool's
        # MapWorker left pending once held 0.75 CPU for 20 minutes, session 48)
        alive = [f"{a['ActorClassName']} (pid {a['Pid']}, {a['State']})" for a in actors().values()
                 if a["State"] != "DEAD"]
        pytest.fail(f"{ray.available_resources().get('CPU', 0):g} of {total:g} CPUs free after 60 s; "
                    f"alive actors: {', '.join(alive) or 'none'}")
    return ray


@pytest.fixture(scope="session")
def _wikitext_models(wikitext_docs, tmp_path_factory) -> tuple[Path, Path]:
    """``wikitext_base`` and ``tiny_filler``, trained side by side (one Ray Train worker
    each, :func:`side_by_side`)."""
    from experiments.refill_eval import SmallLM, base_model
    from train.config import parse_config
    from train.run import run_training

    plan = SmallLM(vocab_size=1024, seq_len=128, batch_size=8, base_steps=30)
    optim = {"batch_size": 8, "lr": plan.lr, "warmup_steps": 5, "seed": 0, "epochs": 1000}
    common = {"version": 1, "checkpoint_every": 10_000_000, "report_every": 10_000_000}
    out = tmp_path_factory.mktemp("filler") / "run"
    cfg = parse_config({"kind": "mlm", "data": {"path": str(wikitext_docs["valid"]), "seq_len": 64},
                        "model": {"preset": "tiny"}, "tokenizer": {"vocab_size": 2048},
                        "optim": {"batch_size": 32, "max_steps": 40, "lr": 0.002, "warmup_steps": 5},
                        "checkpoint_every": 40, "report_every": 20, "output": str(out)})
    import ray

    from privatize.ray.cluster import connect

    connect(None)  # once, before the two runs (each would start a Ray of its own)
    all_cpus_free(ray)  # the two runs need both CPUs of the test cluster
    base_dir, _ = side_by_side(
        lambda: base_model(plan, wikitext_docs["valid"], tmp_path_factory.mktemp("base"), common, optim, False),
        lambda: run_training(cfg, progress=False))
    return base_dir, out / "model"


@pytest.fixture(scope="session")
def wikitext_base(_wikitext_models) -> Path:
    """A tiny causal LM pretrained (Ray Train) on WikiText-2 valid for 30 steps, its own
    1,024-token tokenizer: the base model the paper 002 and paper 003 evaluations adapt
    (``SmallLM.base_model``; each Ray Train run costs about 15 s before its first step)."""
    return _wikitext_models[0]


@pytest.fixture(scope="session")
def tiny_filler(_wikitext_models) -> Path:
    """A tiny BERT-style masked LM trained with ``privatize train`` kind ``mlm`` (Ray
    Train) on WikiText-2 valid for a few steps: the refill tests' filler. Its run summary
    is ``<folder>/../summary.json``."""
    return _wikitext_models[1]
