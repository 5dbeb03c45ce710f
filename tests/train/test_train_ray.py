"""Training runs on real Ray Train workers (tiny models, few steps, CPU and gloo)."""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from train.config import parse_config
from train.dp.budget import crt_confidentiality
from train.run import run_training
from tests.conftest import all_cpus_free, driver_imports, side_by_side
from tests.listeners import Listeners, ray_worker_wildcard_listeners

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.data]


def _cfg(**kw) -> dict:
    base = {"version": 1, "data": {"seq_len": 32}, "model": {"preset": "tiny"}, "tokenizer": {"vocab_size": 1024},
            "optim": {"batch_size": 8, "lr": 0.003}, "workers": {"num_workers": 1},
            "checkpoint_every": 1000, "report_every": 1000}
    for k, v in kw.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and k in base else v
    return base


def _worker_lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "workers.jsonl").read_text().splitlines()]


def _side_by_side(*cfgs) -> list[dict]:
    """``run_training`` of each config at once (:func:`tests.conftest.side_by_side`)."""
    return side_by_side(*(functools.partial(run_training, c, progress=False) for c in cfgs))


@pytest.mark.parametrize("split, unit", [("all", None), ("public", None), ("private", "record"),
                                         ("private", "individual")])
def test_small_data_packed_in_process_is_ray_datas_blocks(train_ray, crt_shards, tmp_path, split, unit):
    """``data.packing: local`` (what ``auto`` picks for small data) packs the same blocks as
    Ray Data's tasks, in the same order: the oracle is Ray Data's plan on the CRT shards
    (four Parquet files, a split column, owners under ``dp.unit: individual``)."""
    from train.data import block_refs, from_refs, pack_local, plan_blocks, read_texts
    from train.tokenizer import train_tokenizer

    train_tokenizer(read_texts(str(crt_shards), "text"), 600).save_pretrained(tmp_path / "tok")
    args = (str(crt_shards), "text", split, str(tmp_path / "tok"), 32, True, None, None, ())
    units = {"per_record": unit == "record", "owners": unit == "individual"}
    local = pack_local(*args, **units)
    ray_ds = plan_blocks(*args, **units).materialize()
    a, b = from_refs(block_refs(local)), from_refs(block_refs(ray_ds))
    assert len(a) == ray_ds.count() == local.count() > 10
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.loss, b.loss)
    assert (a.owner is None) == (unit != "individual") and (a.owner is None or np.array_equal(a.owner, b.owner))
    counted = pack_local(*args, **units, counts_only=True)
    assert counted.count() == local.count() and set(counted.columns) == set(local.columns) - {"loss"}


def test_crt_on_two_ray_train_workers(train_ray, crt_shards, tmp_path):
    """The CRT recipe's shards: public steps then DP-SGD steps each epoch, in two Ray Train
    worker processes whose parameters end identical; the confidentiality report follows
    the formula from the run's own epsilon. The DP unit is the individual (issue 36):
    each step samples customers and the ranks split them whole, each clipping its
    customers' gradients; N and the default delta are over the private split's customers."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    # per-individual packing gives each sentence a block of its own: 16 tokens, 16 a batch
    cfg = parse_config(_cfg(kind="crt", data={"path": str(crt_shards), "seq_len": 16}, output=str(tmp_path / "run"),
                            optim={"epochs": 2, "batch_size": 16}, dp={"noise_multiplier": 1.0, "max_grad_norm": 1.0,
                                                                       "unit": "individual", "lr": 0.001},
                            crt={"gamma": 0.05, "delta_2": 0.01, "source": "a test's own figures"},
                            workers={"num_workers": 2}))
    def ours(signum, frame):  # the process's own Ctrl-C handler, as a CLI has
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, ours)
    try:
        with Listeners(train_ray.get_runtime_context().gcs_address) as listeners:
            s = run_training(cfg, progress=False)
        # Ray Train's fit() installs a handler of its own (abort the run, exit 0): gone after the run
        assert signal.getsignal(signal.SIGINT) is ours
    finally:
        signal.signal(signal.SIGINT, before)
    run = tmp_path / "run"
    pids = {w["pid"] for w in _worker_lines(run)}
    assert s["workers"]["ranks"] == [0, 1] and len(pids) == 2 and os.getpid() not in pids
    # issue 36: rank 0's torch store listened on every interface for the whole run; on one
    # machine the workers meet through a file store and gloo talks over loopback
    assert all(w["rendezvous"] == {"store": "FileStore", "gloo_ifname": "lo"} for w in _worker_lines(run))
    assert listeners.seen_workers and not listeners.beyond_loopback, listeners.beyond_loopback
    assert listeners.wildcard <= ray_worker_wildcard_listeners(train_ray)  # nothing beside Ray's own
    assert len(s["workers"]["final_param_digests"]) == 1  # both ranks hold the same parameters
    assert s["examples"]["public"] > 0 and s["examples"]["private"] > 0
    t = pq.read_table(sorted(crt_shards.glob("shards/*.parquet")), columns=["individual_id", "private", "text"])
    t = t.filter(pc.and_(t["private"], pc.greater(pc.utf8_length(t["text"]), 0)))
    customers = len(set(t["individual_id"].to_pylist()))
    assert 1 < customers <= 25 and None not in t["individual_id"].to_pylist()
    assert s["unit"]["name"] == "individual" and s["unit"]["units"] == customers
    assert s["delta"] == pytest.approx(1 / (10 * customers))
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    phases = {r["phase"] for r in records}
    # the last step is a private one, at dp.lr (0.001, not optim.lr's 0.003) on the cosine
    w, n = cfg.optim.warmup_steps, s["steps"]
    assert records[-1]["phase"] == "private" and records[-1]["lr"] == pytest.approx(
        0.001 * (0.1 + 0.45 * (1 + math.cos(math.pi * (n - 1 - w) / (n - w)))))
    c = s["confidentiality"]
    assert 0 < s["epsilon"] < 50 and s["dp_steps"] == 2 * round(s["examples"]["private"] / 16)
    assert (c["epsilon"], c["delta"]) == pytest.approx(crt_confidentiality(s["epsilon"], s["delta"], 0.05, 0.01))
    assert c["provenance"]["gamma"] == {"origin": "claimed in the training config", "source": "a test's own figures"}
    assert s["steps"] == 2 * -(-s["examples"]["public"] // 16) + s["dp_steps"] and phases <= {"public", "private"}
    # each phase stepped an optimizer of its own: the DP noise never entered the public
    # steps' Adam moments (shared, they shrank every later public step ~100-fold on MultiWOZ)
    import torch

    state = torch.load(next((run / "checkpoints").rglob("state.pt")), weights_only=False)
    steps = {k: {int(v["step"]) for v in state[k]["state"].values()} for k in ("optimizer", "public_optimizer")}
    assert steps == {"optimizer": {s["dp_steps"]}, "public_optimizer": {s["steps"] - s["dp_steps"]}}
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(run / "model")
    tok = AutoTokenizer.from_pretrained(run / "model")
    assert model.config.vocab_size == len(tok) and "<MASK>" in tok.get_vocab()
    from privatize.ciphers.entity import TOKEN_RE

    entity = [t for t in tok.get_vocab() if TOKEN_RE.fullmatch(t)]
    assert entity and all(tok.tokenize(f"x {t} y").count(t) == 1 for t in entity[:20])  # single tokens
    # a one-node cluster: Ray Train ran its controller, not its preemption watcher (no other
    # node to lose), and the run left the setting as it found it; no run started Ray Train's
    # placement-group cleaner (train.raytrain)
    from ray._private.state import actors  # the GCS's table: this cluster runs no dashboard

    ran = {a["ActorClassName"] for a in actors().values()}
    assert "TrainController" in ran and not {"PreemptionWatcher", "PlacementGroupCleaner"} & ran
    assert "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER" not in os.environ


CIPHER_BASE = "four public stories, enciphered (key length 10)"


@pytest.fixture(scope="module")
def cipher_base(_train_ray_session, stories, tmp_path_factory):
    """Stage 1 of the two-stage recipe: a pre-training on the stories' ciphertext (key
    length 10) with the ``shared`` tokenizer (trained on the cipher and the plain text, as
    the authors' code). Its summary and its run folder; also the public base the CRT LoRA
    run starts from."""
    all_cpus_free(_train_ray_session)
    out = tmp_path_factory.mktemp("cipher-base") / "s1"
    s1 = run_training(parse_config(_cfg(kind="pretrain", data={"path": str(stories["cipher"]),
                                                               "description": CIPHER_BASE},
                                        tokenizer={"also_on": [str(stories["plain"])]},
                                        optim={"max_steps": 6}, output=str(out))), progress=False)
    return s1, out


def test_two_stage_cipher_then_plaintext_in_both_tokenizer_modes(train_ray, stories, cipher_base, tmp_path):
    """Stage 1 on ciphertext (``cipher_base``); stage 2 continues on plaintext with its
    tokenizer (``shared``), or trains its own and re-initialises the embeddings
    (``separate``, as the paper describes). Every checkpoint loads with from_pretrained."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    s1, s1_dir = cipher_base
    m1 = AutoModelForCausalLM.from_pretrained(s1_dir / "model")
    tok1 = AutoTokenizer.from_pretrained(s1_dir / "model")
    plain = stories["plain"].read_text()[:2000]
    # the shared tokenizer knows plain English as well as the ciphertext it was trained beside
    assert len(tok1(plain)["input_ids"]) / len(plain) < 0.5
    modes = ("shared", "separate")
    stage2 = _side_by_side(*(parse_config(_cfg(kind="continue", data={"path": str(stories["plain"])},
                                               model={"preset": None, "checkpoint": str(s1_dir / "model")},
                                               tokenizer={"mode": mode, "vocab_size": 600}, optim={"max_steps": 6},
                                               output=str(tmp_path / mode))) for mode in modes))
    for mode, s2 in zip(modes, stage2):
        m2 = AutoModelForCausalLM.from_pretrained(tmp_path / mode / "model")
        same_tok = s1["tokenizer"]["fingerprint"] == s2["tokenizer"]["fingerprint"]
        assert same_tok == (mode == "shared") and s2["tokenizer"]["trained"] == (mode == "separate"), mode
        assert m2.config.vocab_size == s2["tokenizer"]["vocab_size"] == len(
            AutoTokenizer.from_pretrained(tmp_path / mode / "model"))
        w1, w2 = m1.state_dict(), m2.state_dict()
        assert w1["model.layers.0.mlp.up_proj.weight"].shape == w2["model.layers.0.mlp.up_proj.weight"].shape
        if mode == "separate":  # a new vocabulary: new embedding rows, layers carried over
            assert m2.config.vocab_size != m1.config.vocab_size
        assert s2["steps"] == 6 and s2["final_loss"] > 0


def _dp_cfg(stories, out: Path) -> dict:
    return _cfg(kind="dp", data={"path": str(stories["plain"])}, output=str(out),
                optim={"max_steps": 60, "batch_size": 8}, dp={"noise_multiplier": 1.2, "max_grad_norm": 1.0},
                checkpoint_every=20, report_every=20)


def test_a_killed_worker_resumes_to_the_uninterrupted_result(train_ray, stories, tmp_path):
    """SIGKILL the Ray Train worker after its first checkpoint: the run restarts from the
    checkpoint and ends with the weights and epsilon of an uninterrupted run."""
    from concurrent.futures import ThreadPoolExecutor

    run = tmp_path / "killed"
    driver_imports()
    # the reference trains beside the run that is killed (one CPU each; the restarted worker
    # takes the CPU the killed one held)
    with ThreadPoolExecutor(2) as pool:
        ref_run = pool.submit(run_training, parse_config(_dp_cfg(stories, tmp_path / "ref")), progress=False)
        killed_run = pool.submit(run_training, parse_config(_dp_cfg(stories, run)), progress=False)
        killed = None
        deadline = time.time() + 240
        while time.time() < deadline and not killed_run.done():
            m = run / "metrics.jsonl"
            steps = [json.loads(x)["step"] for x in m.read_text().splitlines()] if m.exists() else []
            if steps and steps[-1] >= 20 and list((run / "checkpoints" / "train").glob("checkpoint_*")):
                killed = {"pid": _worker_lines(run)[0]["pid"], "step": steps[-1],
                          "finished": (run / "summary.json").exists()}
                os.kill(killed["pid"], signal.SIGKILL)
                break
            time.sleep(0.02)
        ref, s = ref_run.result(timeout=300), killed_run.result(timeout=300)
    assert killed is not None and not killed["finished"] and killed["step"] < ref["steps"]
    pids = [w["pid"] for w in _worker_lines(run)]
    assert len(pids) == 2 and pids[0] == killed["pid"] and pids[1] != killed["pid"]  # a second worker took over
    assert s["workers"]["final_param_digests"] == ref["workers"]["final_param_digests"]
    assert s["epsilon"] == pytest.approx(ref["epsilon"], rel=1e-12) and s["dp_steps"] == ref["dp_steps"] == s["steps"]
    assert s["steps"] == 60  # the kill came after the checkpoint at step 20, before the end

    # the budget is never reset: the reference run, reopened (as if stopped after its last
    # checkpoint) with twice the steps, may not spend past a target just above what it spent
    (tmp_path / "ref" / "summary.json").unlink()
    more = _dp_cfg(stories, tmp_path / "ref")
    more["optim"]["max_steps"], more["dp"]["target_epsilon"] = 120, round(ref["epsilon"] * 1.05, 4)
    from privatize.errors import SpecError

    with pytest.raises(SpecError, match=r"^dp.target_epsilon: resuming this run to \d+ DP steps \(60 taken\) "
                                        r"would spend epsilon [\d.]+ > target"):
        run_training(parse_config(more), progress=False)
    more["dp"]["noise_multiplier"] = 2.0
    with pytest.raises(SpecError, match=r"^dp.noise_multiplier: this run started with 1.2"):
        run_training(parse_config(more), progress=False)


def _cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-m", "privatize.cli", "train", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_bad_configs_fail_in_one_line_and_write_nothing(train_ray, stories, crt_shards, tmp_path, capsys):
    import yaml

    from privatize.cli import main

    def write(name: str, data: dict) -> str:
        p = tmp_path / f"{name}.yaml"
        p.write_text(yaml.safe_dump(data))
        return str(p)

    # an unknown field: the real CLI process, exit 2, one line with the field path
    r = _cli(write("unknown", {**_cfg(kind="pretrain"), "optim": {"batch_size": 8, "learning_rate": 1}}),
             "--data", str(stories["plain"]), "--output", str(tmp_path / "o1"))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "optim.learning_rate: Extra inputs are not permitted" in r.stderr and not (tmp_path / "o1").exists()
    cases = {
        # 0.5 noise for 160 steps spends far more than 0.1
        "overspend": ({**_dp_cfg(stories, tmp_path / "o2"), "dp": {"noise_multiplier": 0.5, "target_epsilon": 0.1}},
                      r"dp.noise_multiplier: 0.5 over \d+ steps .* > dp.target_epsilon 0.1"),
        # the cipher's shards have no CRT split
        "missing split": (_cfg(kind="dp", data={"path": str(stories["cipher"]), "split": "private"},
                               dp={"noise_multiplier": 1.0}, output=str(tmp_path / "o3")),
                          r"data.split: private: .* has no 'private' column"),
        # a continue from the CRT model with the stories' tokenizer
        "other tokenizer": (_cfg(kind="continue", data={"path": str(stories["plain"])},
                                 model={"preset": None, "checkpoint": str(tmp_path / "ck")},
                                 tokenizer={"path": str(tmp_path / "tk")}, output=str(tmp_path / "o4")),
                            r"tokenizer.path: .* is not the tokenizer .* was trained with"),
    }
    from train.models import build_model, preset_config
    from train.tokenizer import train_tokenizer

    tok_a = train_tokenizer(["alpha beta gamma"] * 50, 300, 1)
    tok_a.save_pretrained(tmp_path / "ck")
    build_model(preset_config("tiny", len(tok_a)), 0).save_pretrained(tmp_path / "ck")
    train_tokenizer(["delta epsilon zeta"] * 50, 300, 1).save_pretrained(tmp_path / "tk")
    for name, (data, pattern) in cases.items():
        capsys.readouterr()
        assert main(["train", write(name.replace(" ", "_"), data)]) == 2, name
        err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("privatize: error")]
        import re

        assert len(err) == 1 and re.search(pattern, err[0]), (name, err)
        assert not Path(data["output"]).exists(), name


def test_mlm_filler_trains_in_ray_train_workers(tiny_filler):
    """``privatize train`` kind mlm (the session's tiny filler, 40 steps on WikiText-2):
    a BERT masked LM with its tokenizer, trained in a Ray Train worker, loss going down."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    run = tiny_filler.parent
    summary = json.loads((run / "summary.json").read_text())
    assert summary["kind"] == "mlm" and summary["steps"] == 40
    assert os.getpid() not in summary["workers"]["pids"]
    losses = [json.loads(x)["loss"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and losses[1] < losses[0]
    model = AutoModelForMaskedLM.from_pretrained(tiny_filler)
    tok = AutoTokenizer.from_pretrained(tiny_filler)
    assert type(model).__name__ == "BertForMaskedLM" and tok.mask_token == "<MASK>"
    assert model.config.vocab_size == len(tok)


def test_workers_the_cluster_cannot_hold_fail_in_one_line_and_free_the_cluster(train_ray, stories, tmp_path,
                                                                               monkeypatch):
    """Three one-CPU workers on the 2-CPU test cluster: Ray Train's own default retries the
    start forever (one CI run hung here for an hour); the run tries for
    ``workers.start_timeout_s``, fails with what it asked for and what the cluster has, and
    leaves every CPU free."""
    from privatize.ray.cluster import RunStalled

    monkeypatch.setenv("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", "2")
    cfg = parse_config(_cfg(kind="pretrain", data={"path": str(stories["plain"])}, optim={"max_steps": 2},
                            workers={"num_workers": 3, "start_timeout_s": 4}, output=str(tmp_path / "run")))
    t0 = time.monotonic()
    with pytest.raises(RunStalled, match=r"^workers: 3 worker\(s\) x 1 CPU could not start in 2 tries of 2 s "
                                         r"\(workers.start_timeout_s 4; the cluster has [\d.]+ of 2 CPUs free\)$"):
        run_training(cfg, progress=False)
    assert time.monotonic() - t0 < 120
    deadline = time.monotonic() + 30
    while train_ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert train_ray.available_resources().get("CPU", 0) == 2


def test_a_dp_run_is_audited_and_the_audit_stays_below_the_accountant(train_ray, crt_shards, tmp_path):
    """``audit``: 64 canaries drawn from the run's audit seed (kept in its privacy plan), the
    inserted half added to the DP split (so counted by its sample rate), all scored after
    training. The audited epsilon is a lower bound: above the accountant's epsilon it would
    mean broken DP code. The first run takes ``dp.unit: record``: blocks never mix records,
    and the record's epsilon and delta are the group bound of the block's, computed by hand
    from the records' token counts. The audited run takes ``dp.unit: individual``: each
    canary is an individual of its own beside the 25 customers."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from train.dp.audit import SEED_FIELD, canaries
    from train.data import read_texts

    def cfg(out, dp=None, **kw):  # the CRT recipe's shards: one record per sentence, in 8-token blocks: a few each
        return parse_config(_cfg(kind="dp", data={"path": str(crt_shards), "seq_len": 8}, output=str(tmp_path / out),
                                 dp=dp or {"noise_multiplier": 1.2, "unit": "record"}, **kw))

    base, s = _side_by_side(cfg("b", optim={"max_steps": 2}),
                            cfg("run", optim={"max_steps": 30, "batch_size": 8}, audit={"canaries": 64},
                                dp={"noise_multiplier": 1.2, "unit": "individual"}))
    tok = AutoTokenizer.from_pretrained(tmp_path / "b" / "model")
    texts = read_texts(str(crt_shards), "text")
    blocks = [-(-(len(tok(t, add_special_tokens=False)["input_ids"]) + 1) // 8) for t in texts if t]
    u = base["unit"]
    assert u["name"] == "record" and u["units"] == len(blocks) and u["blocks_per_unit_max"] == max(blocks) > 1
    assert base["examples"]["train"] == sum(blocks)  # no block holds two records
    k, e, d = max(blocks), u["block_epsilon"], u["block_delta"]
    assert base["epsilon"] == pytest.approx(k * e) and base["delta"] == pytest.approx(k * math.exp((k - 1) * e) * d)
    assert base["delta"] <= 1 / (10 * len(blocks)) * (1 + 1e-9)
    # issue 52: the live epsilon the run reports is the record's too, not the block's (a k-th of it)
    live = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines() if '"epsilon"' in x]
    plan = json.loads((tmp_path / "b" / "privacy_plan.json").read_text())
    assert live and live[-1]["epsilon"] == pytest.approx(base["epsilon"], rel=1e-6) and base["epsilon"] > e
    assert e == pytest.approx(plan["planned_epsilon"], rel=1e-6) and base["epsilon"] == pytest.approx(
        plan["unit_epsilon"], rel=1e-6)

    a = s["audit"]
    seed = json.loads((tmp_path / "run" / "privacy_plan.json").read_text())[SEED_FIELD]
    _, inserted = canaries(seed, 64, 8, 0, s["tokenizer"]["vocab_size"])
    assert a["canaries"] == 64 and a["inserted"] == int(inserted.sum()) and 0 < a["inserted"] < 64
    assert s["examples"]["train"] == base["examples"]["train"] + a["inserted"]
    t = pq.read_table(sorted(crt_shards.glob("shards/*.parquet")), columns=["individual_id", "text"]).to_pylist()
    customers = len({r["individual_id"] for r in t if r["text"]})
    assert s["unit"]["name"] == "individual" and s["unit"]["units"] == customers + a["inserted"]
    assert a["guesses"] == 2 * a["k"] and 0 <= a["correct"] <= a["guesses"]
    # a canary is one individual: the audit bounds the individual's epsilon, at its delta
    assert 0 <= a["epsilon_lower_bound"] <= a["accountant_epsilon"] == s["epsilon"]
    assert "exceeds_accountant" not in a and a["delta"] == s["delta"] == pytest.approx(1 / (10 * s["unit"]["units"]))


def test_crt_with_dp_lora_from_a_public_base(train_ray, cipher_base, crt_shards, tmp_path):
    """Issue 37, as users train: a base pre-trained on public stories (``cipher_base``: their
    ciphertext, no entity tokens), then CRT with LoRA adapters on privatized shards. The base's tokenizer gains the data's
    entity tokens, only the adapters train (book-keeping DP-SGD), the saved model is the
    merged checkpoint and loads as a plain causal LM, the adapter sits beside it, and the
    summary names the base and what it was trained on. The phases share one optimizer
    state here (``dp.optimizer_state: shared``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from privatize.ciphers.entity import TOKEN_RE

    base_dir = cipher_base[1] / "model"
    base_tok = AutoTokenizer.from_pretrained(base_dir)
    assert not any(TOKEN_RE.fullmatch(t) for t in base_tok.get_vocab())
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    s = run_training(parse_config(_cfg(
        kind="crt", data={"path": str(crt_shards), "packing": "local"},  # blocks packed in the driver
        model={"preset": None, "checkpoint": str(base_dir), "lora": lora},
        optim={"lr": 0.01}, dp={"noise_multiplier": 1.0, "max_grad_norm": 1.0, "grad_sample_mode": "bk",
                                "optimizer_state": "shared"},
        crt={"gamma": 0.05, "delta_2": 0.01, "source": "a test's own figures"}, output=str(tmp_path / "crt"))),
        progress=False)
    run = tmp_path / "crt"
    tok = AutoTokenizer.from_pretrained(run / "model")
    added = [t for t in tok.get_vocab() if TOKEN_RE.fullmatch(t)]
    assert added and len(tok) == len(base_tok) + len(added) == s["tokenizer"]["vocab_size"]
    assert all(tok.tokenize(f"x {t} y").count(t) == 1 for t in added[:20])
    merged = AutoModelForCausalLM.from_pretrained(run / "model")
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    assert merged.config.vocab_size == len(tok) and not any("lora" in n for n, _ in merged.named_parameters())
    m, b = merged.state_dict(), base.state_dict()
    n = len(base_tok)
    assert torch.equal(m["model.embed_tokens.weight"][:n], b["model.embed_tokens.weight"])
    assert torch.allclose(m["model.embed_tokens.weight"][n:], b["model.embed_tokens.weight"].mean(0).expand(len(added), -1))
    assert torch.equal(m["model.layers.0.mlp.up_proj.weight"], b["model.layers.0.mlp.up_proj.weight"])  # not adapted
    assert not torch.equal(m["model.layers.0.self_attn.q_proj.weight"], b["model.layers.0.self_attn.q_proj.weight"])
    assert (run / "adapter" / "adapter_config.json").is_file() and (run / "adapter" / "adapter_model.safetensors").is_file()
    assert s["lora"]["adapter_max_change"] > 0 and s["lora"]["base_unchanged"] and s["lora"]["r"] == 4
    assert s["base"]["kind"] == "pretrain" and s["base"]["trained_on"] == CIPHER_BASE
    assert json.loads((run / "model" / "training.json").read_text())["base"]["trained_on"] == CIPHER_BASE
    assert 0 < s["epsilon"] < 50 and s["dp_steps"] > 0
    # dp.optimizer_state shared: every step, public or private, stepped the one optimizer
    state = torch.load(next((run / "checkpoints").rglob("state.pt")), weights_only=False)
    assert state["public_optimizer"] is None
    assert {int(v["step"]) for v in state["optimizer"]["state"].values()} == {s["steps"]}
