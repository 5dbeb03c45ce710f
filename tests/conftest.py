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


@pytest.fixture(scope="session")
def wikitext_docs(shared_data, tmp_path_factory) -> dict:
    """WikiText-2 paragraphs as JSONL: ``valid`` (1,841 paragraphs) and ``test``."""
    from train.wikitext import paragraphs, write_jsonl

    d = tmp_path_factory.mktemp("wikitext")
    src = shared_data / "wikitext2_tokenized"
    return {split: write_jsonl(paragraphs(src / f"{split}.txt"), d / f"{split}.jsonl") for split in ("valid", "test")}


@pytest.fixture(scope="session")
def wikitext_base(wikitext_docs, tmp_path_factory) -> Path:
    """A tiny causal LM pretrained (Ray Train) on WikiText-2 valid for 30 steps, its own
    1,024-token tokenizer: the base model the paper 002 and paper 003 evaluations adapt
    (``SmallLM.base_model``; each Ray Train run costs about 15 s before its first step)."""
    from experiments.refill_eval import SmallLM, base_model

    plan = SmallLM(vocab_size=1024, seq_len=128, batch_size=8, base_steps=30)
    optim = {"batch_size": 8, "lr": plan.lr, "warmup_steps": 5, "seed": 0, "epochs": 1000}
    common = {"version": 1, "checkpoint_every": 10_000_000, "report_every": 10_000_000}
    return base_model(plan, wikitext_docs["valid"], tmp_path_factory.mktemp("base"), common, optim, False)


@pytest.fixture(scope="session")
def tiny_filler(wikitext_docs, tmp_path_factory) -> Path:
    """A tiny BERT-style masked LM trained with ``privatize train`` kind ``mlm`` (Ray
    Train) on WikiText-2 valid for a few steps: the refill tests' filler. Its run summary
    is ``<folder>/../summary.json``."""
    from train.config import parse_config
    from train.run import run_training

    out = tmp_path_factory.mktemp("filler") / "run"
    cfg = parse_config({"kind": "mlm", "data": {"path": str(wikitext_docs["valid"]), "seq_len": 64},
                        "model": {"preset": "tiny"}, "tokenizer": {"vocab_size": 2048},
                        "optim": {"batch_size": 32, "max_steps": 40, "lr": 0.002, "warmup_steps": 5},
                        "checkpoint_every": 40, "report_every": 20, "output": str(out)})
    run_training(cfg, progress=False)
    return out / "model"
