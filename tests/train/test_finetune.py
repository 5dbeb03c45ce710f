"""Fine-tuning a base as users do (issue 37): entity tokens added to a base's tokenizer get
embedding rows without changing what the model says about its existing tokens, and LoRA
(``peft``) trains only its adapters, under DP-SGD in every grad-sample mode, with the oracle
(no noise, no clipping equals plain training) holding for the adapters. In process: the
Ray Train runs are in test_train_ray.py."""

from __future__ import annotations

import numpy as np
import pytest

from train.batches import make_batch
from train.dp.engine import make_private
from train.loop import _init_model, train_step
from train.models import add_token_rows, adapter_state, build_model, preset_config
from train.setup import LoraPlan, ModelInit

V = 300
LORA = LoraPlan(r=4, alpha=8.0, dropout=0.0, target_modules=("q_proj", "v_proj", "down_proj"))


def _tiny(seed=0):
    return build_model(preset_config("tiny", vocab_size=V, bos_token_id=0, eos_token_id=0, pad_token_id=1), seed)


def _batches(n=3, b=4, t=16, vocab=V):
    rng = np.random.default_rng(0)
    ids = rng.integers(2, vocab, size=(n * b, t)).astype(np.int32)
    loss = (rng.random((n * b, t)) > 0.1).astype(np.uint8)
    return [make_batch(ids, loss, np.arange(k * b, (k + 1) * b), "cpu") for k in range(n)]


def _dp(model, opt, sigma, clip, mode):
    import torch

    return make_private(model, opt, grad_sample_mode=mode, max_grad_norm=clip, noise_multiplier=sigma,
                        accountant="prv", sample_rate=0.25, expected_batch_size=4, distributed=False,
                        generator=torch.Generator().manual_seed(1))


def _frozen(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" not in k}


def test_added_tokens_get_mean_rows_and_existing_logits_are_unchanged():
    import torch

    model = _tiny().eval()
    x = torch.randint(2, V, (2, 12))
    before = model(x).logits
    emb0, head0 = model.get_input_embeddings().weight.clone(), model.get_output_embeddings().weight.clone()
    add_token_rows(model, V + 5)
    assert model.config.vocab_size == V + 5
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert emb.shape == (V + 5, emb0.shape[1]) and head.shape == (V + 5, head0.shape[1])
    assert torch.equal(emb[:V], emb0) and torch.equal(head[:V], head0)
    for r in range(V, V + 5):  # each new row is the mean of the old ones, computed here independently
        assert torch.allclose(emb[r], emb0.sum(0) / V, atol=1e-6)
        assert torch.allclose(head[r], head0.sum(0) / V, atol=1e-6)
    after = model(x).logits
    assert after.shape[-1] == V + 5
    assert torch.equal(after[..., :V], before)  # same inputs, same logits for every existing token
    # a new token as input is the mean embedding, and the model runs on it
    assert torch.isfinite(model(torch.tensor([[V + 1, V + 3]])).logits).all()
    with pytest.raises(ValueError, match="fewer rows"):
        add_token_rows(model, V)


def test_a_grown_base_loads_in_the_worker(tmp_path):
    import torch

    _tiny(3).save_pretrained(tmp_path / "base")
    model = _init_model(ModelInit(seed=0, checkpoint=str(tmp_path / "base"), grow_to=V + 2))
    ref = _tiny(3).eval()
    x = torch.randint(2, V, (1, 9))
    assert model.training and model.config.vocab_size == V + 2
    assert torch.equal(model.eval()(x).logits[..., :V], ref(x).logits)


def test_lora_trains_only_the_adapters_and_refuses_unknown_modules(tmp_path):
    from privatize.errors import SpecError

    _tiny(3).save_pretrained(tmp_path / "base")
    model = _init_model(ModelInit(seed=0, checkpoint=str(tmp_path / "base"), lora=LORA))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    # 4 layers x 3 targets x (A, B)
    assert len(trainable) == 4 * 3 * 2
    with pytest.raises(SpecError, match="model.lora.target_modules: nope_proj not in the model"):
        _init_model(ModelInit(seed=0, checkpoint=str(tmp_path / "base"),
                              lora=LoraPlan(r=2, alpha=2.0, dropout=0.0, target_modules=("nope_proj",))))


@pytest.mark.parametrize("mode", ["hooks", "ghost", "bk"])
def test_dp_lora_without_noise_or_clipping_takes_plain_lora_steps(tmp_path, mode):
    """The oracle with adapters: DP-SGD on the adapters with no noise and a clipping norm no
    gradient reaches equals plain LoRA training; the frozen base stays bit for bit."""
    import torch

    _tiny(3).save_pretrained(tmp_path / "base")
    init = ModelInit(seed=0, checkpoint=str(tmp_path / "base"), lora=LORA)
    plain, private = _init_model(init), _init_model(init)
    base = _frozen(plain)
    opt_p = torch.optim.SGD([p for p in plain.parameters() if p.requires_grad], lr=0.5)
    opt_d = torch.optim.SGD([p for p in private.parameters() if p.requires_grad], lr=0.5)
    dp = _dp(private, opt_d, sigma=0.0, clip=1e6, mode=mode)
    for x, y in _batches():
        assert train_step(private, dp, opt_d, True, x, y) == pytest.approx(train_step(plain, None, opt_p, False, x, y),
                                                                            rel=1e-5)
    a, b = adapter_state(plain), adapter_state(private)
    assert a.keys() == b.keys() and len(a) == 24
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6, rtol=0), k
    assert any(float(v.abs().max()) > 0 for k, v in a.items() if "lora_B" in k)  # B starts at zero: it moved
    for k, v in _frozen(private).items():
        assert torch.equal(v, base[k]), k


@pytest.mark.parametrize("mode", ["hooks", "ghost", "bk"])
def test_dp_lora_with_noise_moves_the_adapter_and_not_the_base(tmp_path, mode):
    import torch

    _tiny(3).save_pretrained(tmp_path / "base")
    model = _init_model(ModelInit(seed=0, checkpoint=str(tmp_path / "base"), lora=LORA))
    base, start = _frozen(model), adapter_state(model)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    dp = _dp(model, opt, sigma=1.0, clip=0.1, mode=mode)
    for x, y in _batches():
        train_step(model, dp, opt, True, x, y)
    moved = {k: float((v - start[k]).abs().max()) for k, v in adapter_state(model).items()}
    assert all(m > 0 for m in moved.values())  # noise reaches every adapter tensor
    for k, v in _frozen(model).items():
        assert torch.equal(v, base[k]), k
    assert dp.accountant.get_epsilon(delta=1e-5) > 0


def test_a_merged_lora_model_loads_and_says_what_the_adapter_said(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    _tiny(3).save_pretrained(tmp_path / "base")
    model = _init_model(ModelInit(seed=0, checkpoint=str(tmp_path / "base"), lora=LORA))
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    for x, y in _batches():
        train_step(model, None, opt, False, x, y)
    x = torch.randint(2, V, (2, 10))
    with torch.no_grad():
        want = model.eval()(x).logits
    model.merge_and_unload().save_pretrained(tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert not any("lora" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        got = merged(x).logits
    assert torch.allclose(got, want, atol=1e-4)
    assert not torch.allclose(got, _tiny(3).eval()(x).logits, atol=1e-4)  # and it is not the base


def test_a_lora_run_whose_adapter_did_not_move_fails_loudly(tmp_path):
    """Opacus issue #820 (DP-LoRA runs that silently trained nothing): the worker's record of
    an adapter that never moved, or of a base that did, fails the run before any model is
    written; a moved adapter passes with its figures in the summary."""
    from privatize.errors import TrainingFailed
    from train.config import parse_config
    from train.final import check_lora
    from train.loop import _lora_moved, _lora_start

    _tiny(3).save_pretrained(tmp_path / "base")
    cfg = parse_config({"version": 1, "kind": "continue", "model": {"preset": None, "checkpoint": str(tmp_path / "base"),
                                                                    "lora": {"r": 4}}})
    model = _init_model(ModelInit(seed=0, checkpoint=str(tmp_path / "base"), lora=LORA))
    start = _lora_start(model)
    still = {"finals": [{"rank": 0, "lora": _lora_moved(model, start)}]}
    with pytest.raises(TrainingFailed, match="did not move"):
        check_lora(cfg, still)
    import torch

    with torch.no_grad():
        next(p for n, p in model.named_parameters() if "lora_B" in n).add_(0.01)
        rec = _lora_moved(model, start)
    assert rec["adapter_max_change"] == pytest.approx(0.01) and rec["base_unchanged"]
    assert check_lora(cfg, {"finals": [{"rank": 0, "lora": rec}]})["r"] == 4
    with torch.no_grad():
        model.get_input_embeddings().weight[0, 0] += 1.0  # the frozen base changed
    with pytest.raises(TrainingFailed, match="frozen base"):
        check_lora(cfg, {"finals": [{"rank": 0, "lora": _lora_moved(model, start)}]})
    assert check_lora(parse_config({"version": 1, "kind": "pretrain"}), still) is None


def test_lora_is_refused_where_it_cannot_apply():
    from privatize.errors import SpecError
    from train.config import parse_config

    with pytest.raises(SpecError, match="model.lora: adapters fine-tune a causal model.checkpoint"):
        parse_config({"version": 1, "kind": "pretrain", "model": {"preset": "tiny", "lora": {"r": 4}}})
    with pytest.raises(SpecError, match="model.lora"):
        parse_config({"version": 1, "kind": "continue", "model": {"checkpoint": "x", "lora": {"r": 0}}})
    with pytest.raises(SpecError, match="tokenizer.mode separate re-initialises the embeddings"):
        parse_config({"version": 1, "kind": "continue", "model": {"checkpoint": "x", "lora": {"r": 4}},
                      "tokenizer": {"mode": "separate"}})
