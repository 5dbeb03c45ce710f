"""A new training kind is one class and its registration: this module defines one (plain steps
on the public split of CRT's shards, nothing private read) and, with no other edit, a config
naming it parses, plans and runs on a Ray Train worker."""

from __future__ import annotations

import json

import pytest

from train.config import parse_config
from train.kinds import TrainKind, register_train_kind, train_kinds
from train.batches import plan_phases


@register_train_kind
class PublicOnly(TrainKind):
    """A toy: the public split only (what a data owner might train before any DP budget)."""

    name = "test-public-only"
    protection = "none (the public split only)"

    def splits(self, cfg):
        return {"public": "public"}

    def phases(self, plain, dp):
        return [plain("public", "public")]

    def check(self, cfg):
        if cfg.optim.epochs > 3:
            raise ValueError("optim.epochs: the toy kind trains at most 3 epochs")


def _cfg(**kw) -> dict:
    return {"version": 1, "kind": "test-public-only", "data": {"seq_len": 32}, "model": {"preset": "tiny"},
            "tokenizer": {"vocab_size": 1024}, "optim": {"batch_size": 8, "lr": 0.003},
            "workers": {"num_workers": 1}, "checkpoint_every": 1000, "report_every": 1000, **kw}


def test_the_kind_is_registered_and_its_own_rules_hold():
    from attacks.results import kind_protection

    assert "test-public-only" in train_kinds()
    # the report's protection label is the kind's own (issue 49: no list of kinds in attacks)
    assert kind_protection("test-public-only") == "none (the public split only)"
    assert kind_protection("dp") == "DP-SGD" and kind_protection("a-kind-not-installed") == "a-kind-not-installed"
    assert plan_phases("test-public-only", {"public": 17}, 8)[0].steps == 3
    from privatize.errors import SpecError

    with pytest.raises(SpecError, match="optim.epochs: the toy kind trains at most 3 epochs"):
        parse_config(_cfg(optim={"batch_size": 8, "epochs": 4}))
    with pytest.raises(SpecError, match=r"unknown training kind 'nope' \(registered: continue, crt, dp, mlm, pretrain, "
                                        r"test-public-only\)"):
        parse_config(_cfg(kind="nope"))


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.data
def test_a_config_of_the_new_kind_runs_in_ray_train(train_ray, crt_shards, tmp_path):
    from train.run import run_training

    s = run_training(parse_config(_cfg(data={"path": str(crt_shards)}, output=str(tmp_path / "run"))),
                     progress=False)
    assert s["kind"] == "test-public-only" and set(s["examples"]) == {"public"} and s["examples"]["public"] > 0
    assert s["steps"] == -(-s["examples"]["public"] // 8) and "epsilon" not in s
    from attacks.results import training_info

    assert training_info(str(tmp_path / "run"), None).protection == "none (the public split only)"
    phases = {json.loads(x)["phase"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()}
    assert phases == {"public"}
