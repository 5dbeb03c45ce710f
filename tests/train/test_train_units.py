"""Presets, tokenizer, packing, sampling, the loss, and the DP-SGD equivalence oracle, in
this process (no Ray)."""

import copy
import os

import numpy as np
import pytest

from train.data import pack
from train.batches import IGNORE, MaskedLMLoss, batch_indices, make_batch, plan_phases, position
from train.dp.engine import make_private
from train.loop import lr_lambda, train_step
from train.plan import Phase
from train.setup import MLMPlan
from train.models import PRESETS, build_model, parameter_count, preset_config
from train.tokenizer import EOS, PAD, fingerprint, load_tokenizer, train_tokenizer


@pytest.mark.parametrize("name,expected", [("tiny", 2_098_304), ("small", 25_172_352), ("paper-551m", 551_339_520)])
def test_preset_parameter_counts(name, expected):
    """Hand count: 2 V h (untied embeddings) + L (4 h^2 + 3 h i + 2 h) + h. The 551M preset
    is the Crypto-LLM paper's 551.3M model."""
    import torch
    from transformers import AutoModelForCausalLM

    p = PRESETS[name]
    v, h, n, i = p["vocab_size"], p["hidden_size"], p["num_hidden_layers"], p["intermediate_size"]
    assert 2 * v * h + n * (4 * h * h + 3 * h * i + 2 * h) + h == expected
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(preset_config(name))
    assert parameter_count(model) == expected
    assert model.get_input_embeddings().weight is not model.get_output_embeddings().weight


TEXTS = ["The cat sat on the mat. " * 3, "Call Person_[QUJD+/==] on <MASK> today.",
         "Person_[QUJD+/==] met Location_[eHl6] in town.", "Plain prose, nothing secret here at all."] * 20


def test_tokenizer_special_tokens_are_single_and_roundtrip(tmp_path):
    tok = train_tokenizer(TEXTS, vocab_size=400, min_frequency=1)
    ids = tok("Call Person_[QUJD+/==] on <MASK>", add_special_tokens=False)["input_ids"]
    toks = tok.convert_ids_to_tokens(ids)
    assert "Person_[QUJD+/==]" in toks and "<MASK>" in toks
    assert tok.decode(ids) == "Call Person_[QUJD+/==] on <MASK>"
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again("Call Person_[QUJD+/==] on <MASK>", add_special_tokens=False)["input_ids"] == ids
    assert fingerprint(load_tokenizer(str(tmp_path))) == fingerprint(tok)
    assert again.eos_token == EOS and again.pad_token == PAD and again.mask_token == "<MASK>"


def test_pack_concatenates_documents_and_masks_loss():
    out = pack([[5, 6, 9], [7], [8, 9, 9, 9]], seq_len=4, eos=1, pad=0, mask_id=9)
    # 5 6 9 1 | 7 1 8 9 | 9 9 1 pad
    assert out["ids"].tolist() == [[5, 6, 9, 1], [7, 1, 8, 9], [9, 9, 1, 0]]
    assert out["loss"].tolist() == [[1, 1, 0, 1], [1, 1, 1, 0], [0, 0, 1, 0]]
    assert pack([[5, 9]], 4, 1, 0, None)["loss"].tolist() == [[1, 1, 1, 0]]


def test_phases_positions_and_batches():
    phases = plan_phases("crt", {"public": 50, "private": 40}, batch_size=10)
    assert [(p.name, p.dp, p.steps) for p in phases] == [("public", False, 5), ("private", True, 4)]
    assert plan_phases("pretrain", {"train": 51}, 10)[0].steps == 6  # the last batch partial, never dropped
    assert [p.steps for p in plan_phases("crt", {"public": 0, "private": 40}, 10)] == [0, 4]
    assert position(plan_phases("crt", {"public": 0, "private": 40}, 10), 5) == (1, 1, 1)
    # dp.batch_size: the private phase's own batch (40 / 4 = 10 Poisson steps at rate 1/10),
    # the public phase keeps optim.batch_size
    own = plan_phases("crt", {"public": 50, "private": 40}, 10, dp_batch_size=4)
    assert [(p.steps, p.sample_rate) for p in own] == [(5, 0.2), (10, 0.1)]
    assert plan_phases("dp", {"train": 40}, 10, dp_batch_size=8)[0].steps == 5
    assert position(phases, 0) == (0, 0, 0) and position(phases, 5) == (0, 1, 0) and position(phases, 12) == (1, 0, 3)
    plain = Phase("train", False, 5, "train")
    b = [batch_indices(plain, 50, 10, 3, 0, k, 0) for k in range(5)]
    assert sorted(np.concatenate(b).tolist()) == list(range(50))  # one epoch: every example once
    dp = Phase("private", True, 4, "private")
    draws = [batch_indices(dp, 4000, 10, 3, 0, k, 1) for k in range(200)]
    assert np.array_equal(draws[7], batch_indices(dp, 4000, 10, 3, 0, 7, 1))  # stateless: resumable
    assert np.mean([len(d) for d in draws]) == pytest.approx(1000, rel=0.02)  # Poisson, q = 1/4
    assert np.std([len(d) for d in draws]) > 10  # batch sizes vary


def test_masked_loss_is_the_per_example_mean_over_targets():
    import torch

    logits = torch.randn(2, 3, 5)
    y = torch.tensor([[1, IGNORE, 2], [IGNORE, IGNORE, IGNORE]])
    lp = torch.log_softmax(logits, -1)
    first = -(lp[0, 0, 1] + lp[0, 2, 2]) / 2
    per = MaskedLMLoss("none")(logits, y)
    assert torch.allclose(per, torch.stack([first, torch.tensor(0.0)]))
    assert torch.allclose(MaskedLMLoss()(logits, y), first / 2)


def _tiny(seed=0):
    return build_model(preset_config("tiny", vocab_size=300, bos_token_id=0, eos_token_id=0, pad_token_id=1), seed)


def _batches(n=3, b=4, t=16):
    rng = np.random.default_rng(0)
    ids = rng.integers(2, 300, size=(n * b, t)).astype(np.int32)
    loss = (rng.random((n * b, t)) > 0.1).astype(np.uint8)
    return [make_batch(ids, loss, np.arange(k * b, (k + 1) * b), "cpu") for k in range(n)]


def _dp(model, opt, sigma, clip, mode="hooks"):
    import torch

    gen = torch.Generator().manual_seed(1)
    return make_private(model, opt, grad_sample_mode=mode, max_grad_norm=clip, noise_multiplier=sigma,
                        accountant="prv", sample_rate=0.25, expected_batch_size=4, distributed=False, generator=gen)


@pytest.mark.parametrize("mode", ["hooks", "ghost", "bk"])
@pytest.mark.parametrize("optim", ["sgd", "adamw"])
def test_dp_sgd_without_noise_or_clipping_takes_the_plain_steps(mode, optim):
    """Equivalence oracle: fixed batches, zero noise, a clipping norm no gradient reaches:
    DP-SGD's steps equal plain training's (weights to 1e-6). With noise they differ and
    the accountant reports epsilon > 0."""
    import torch

    # Adam divides each update by the gradient's running scale: with its default eps
    # (1e-8) float rounding in a near-zero gradient (summed per example here, per batch
    # there) becomes an update of about lr. eps=1e-6 keeps such residues residues
    make = (lambda ps: torch.optim.SGD(ps, lr=0.05)) if optim == "sgd" else \
        (lambda ps: torch.optim.AdamW(ps, lr=1e-3, eps=1e-6))
    plain, private, noisy = _tiny(), _tiny(), _tiny()
    opt_p = make(plain.parameters())
    opt_d = make(private.parameters())
    opt_n = make(noisy.parameters())
    dp = _dp(private, opt_d, sigma=0.0, clip=1e6, mode=mode)
    dpn = _dp(noisy, opt_n, sigma=1.0, clip=1.0, mode=mode)
    for x, y in _batches():
        lp = train_step(plain, None, opt_p, False, x, y)
        ld = train_step(private, dp, opt_d, True, x, y)
        train_step(noisy, dpn, opt_n, True, x, y)
        assert ld == pytest.approx(lp, rel=1e-5)
    atol = 1e-6 if optim == "sgd" else 1e-5
    for (k, a), b in zip(plain.state_dict().items(), private.state_dict().values()):
        assert torch.allclose(a, b, atol=atol, rtol=0), k
    assert max((a - c).abs().max().item() for a, c in zip(plain.parameters(), noisy.parameters())) > 1e-3
    assert dpn.accountant.get_epsilon(1e-5) > 0 and len(dpn.accountant.history) == 1


@pytest.mark.parametrize("clip", [0.05, 1e6])
def test_book_keeping_clips_each_example_as_a_per_example_loop_does(clip):
    """Oracle for ``bk``: each example's gradient by its own backward pass, clipped with
    Opacus' factor min(1, C / (norm + 1e-6)) and summed, against one book-keeping pass;
    with C = 0.05 every example is clipped (the factors differ per example), with 1e6
    none is. Also the Opacus ``hooks`` mode's clipped sum on the same batch, and the
    per-example norms."""
    import torch
    from opacus.grad_sample.utils import wrap_model

    from train.dp.bk import BookKeeping

    model = _tiny()
    x, y = _batches(n=1, b=5)[0]
    y[3] = IGNORE  # an example with no targets: zero gradient, factor 1
    grads, norms = [], []
    for i in range(5):
        model.zero_grad()
        MaskedLMLoss("sum")(model(input_ids=x[i:i + 1], use_cache=False).logits[:, :-1], y[i:i + 1]).backward()
        g = [p.grad.clone() for p in model.parameters()]
        norms.append(torch.sqrt(sum((t ** 2).sum() for t in g)))
        grads.append(g)
    norms = torch.stack(norms)
    factor = (clip / (norms + 1e-6)).clamp(max=1.0)
    expected = [sum(factor[i] * grads[i][k] for i in range(5)) for k in range(len(grads[0]))]
    assert norms[3] == 0 and (norms[[0, 1, 2, 4]] > 0.05).all()

    model.zero_grad()
    bk = BookKeeping(model, clip)
    with bk.capture():
        MaskedLMLoss("none")(model(input_ids=x, use_cache=False).logits[:, :-1], y).sum().backward()
    got_norms = bk.clip_and_sum()
    assert torch.allclose(got_norms, norms, rtol=1e-4, atol=1e-6)
    for (name, p), e in zip(model.named_parameters(), expected):
        assert torch.allclose(p.grad, e, rtol=1e-3, atol=1e-6), name
    assert all(p.requires_grad for p in model.parameters())  # unfrozen after the capture

    # Opacus' hooks mode clips the same way
    gsm = wrap_model(copy.deepcopy(model), grad_sample_mode="hooks", batch_first=True, loss_reduction="sum")
    MaskedLMLoss("sum")(gsm(input_ids=x, use_cache=False).logits[:, :-1], y).backward()
    for (name, p), e in zip(gsm._module.named_parameters(), expected):
        assert torch.allclose(p.grad_sample.sum(0) if clip > 1 else
                              torch.einsum("n,n...->...", factor, p.grad_sample), e, rtol=1e-3, atol=1e-6), name


def test_book_keeping_clips_lora_adapters_as_a_per_example_loop_does(monkeypatch):
    """DP-LoRA by book-keeping: the adapters' A matrices of q/k/v/o in every layer share a
    shape, as do their B matrices, so they are clipped in two stacks (one batched product
    each, ``BookKeeping.fuse``). Oracle: each example's adapter gradient by its own
    backward pass, clipped with Opacus' factor and summed; and the same book-keeping with
    the stacks off, record by record."""
    import torch

    import train.dp.bk as bk_mod
    from train.dp.bk import BookKeeping
    from train.models import with_lora
    from train.setup import LoraPlan

    def lora_model():
        model = with_lora(_tiny(), LoraPlan(r=4, alpha=8.0, dropout=0.0,
                                            target_modules=("q_proj", "k_proj", "v_proj", "o_proj")), 0)
        g = torch.Generator().manual_seed(3)
        for name, p in model.named_parameters():
            if "lora_B" in name:  # peft starts B at zero: A's gradient would be zero too
                p.data = torch.randn(p.shape, generator=g) * 0.1
        return model

    x, y = _batches(n=1, b=5)[0]
    clip = 0.02
    model = lora_model()
    params = [p for p in model.parameters() if p.requires_grad]
    assert len(params) == 4 * 2 * 4  # 4 layers x q/k/v/o x (A, B)
    grads = []
    for i in range(5):
        model.zero_grad()
        MaskedLMLoss("sum")(model(input_ids=x[i:i + 1], use_cache=False).logits[:, :-1], y[i:i + 1]).backward()
        grads.append([p.grad.clone() for p in params])
    norms = torch.stack([torch.sqrt(sum((t ** 2).sum() for t in g)) for g in grads])
    factor = (clip / (norms + 1e-6)).clamp(max=1.0)
    assert (factor < 1).all() and factor.max() / factor.min() > 1.05  # every example clipped, differently
    expected = [sum(factor[i] * grads[i][k] for i in range(5)) for k in range(len(params))]

    sizes = []
    made = bk_mod._Stack.__init__

    def counted(self, recs):
        sizes.append(len(recs))
        made(self, recs)

    monkeypatch.setattr(bk_mod._Stack, "__init__", counted)
    got = {}
    for fuse in (True, False):
        model.zero_grad()
        bk = BookKeeping(model, clip, fuse=fuse)
        with bk.capture():
            MaskedLMLoss("none")(model(input_ids=x, use_cache=False).logits[:, :-1], y).sum().backward()
        got_norms = bk.clip_and_sum()
        assert torch.allclose(got_norms, norms, rtol=1e-4, atol=1e-7)
        got[fuse] = [p.grad.clone() for p in params]
        for k, (g, e) in enumerate(zip(got[fuse], expected)):
            assert torch.allclose(g, e, rtol=1e-3, atol=1e-7), (fuse, k)
        assert sizes == ([16, 16] if fuse else [])  # 16 A matrices of one shape, 16 B matrices
        sizes.clear()
    for a, b in zip(got[True], got[False]):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-9)


def test_book_keeping_under_bf16_autocast_agrees_with_fp32():
    """Under autocast (bf16, here on CPU) a layer's input is float32 and its output
    gradient bf16, and the per-example products run in bf16: the norms and the clipped
    sums still come out close to float32's."""
    import torch

    from train.dp.bk import BookKeeping

    x, y = _batches(n=1, b=4)[0]
    grads, norms = {}, {}
    for bf16 in (False, True):
        model = _tiny()
        bk = BookKeeping(model, 0.5)
        with bk.capture(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            MaskedLMLoss("none")(model(input_ids=x, use_cache=False).logits[:, :-1], y).sum().backward()
        norms[bf16] = bk.clip_and_sum()
        grads[bf16] = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert grads[True].dtype == torch.float32 and norms[True].dtype == torch.float32
    assert torch.allclose(norms[True], norms[False], rtol=0.02)
    assert torch.linalg.vector_norm(grads[True] - grads[False]) < 0.05 * torch.linalg.vector_norm(grads[False])


def test_book_keeping_refuses_what_it_cannot_clip():
    import torch

    from train.dp.bk import BookKeeping

    conv = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Conv1d(4, 4, 1))
    with pytest.raises(ValueError, match="supports Linear, Embedding.*Conv1d"):
        BookKeeping(conv, 1.0)
    tied = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    tied[1].weight = tied[0].weight
    with pytest.raises(ValueError, match="untied weights"):
        BookKeeping(tied, 1.0)


@pytest.mark.parametrize("mode", ["hooks", "bk"])
def test_crt_alternates_plain_and_dp_steps_on_one_model(mode):
    """A public (plain) step with the hooks off equals a plain step; the following private
    step is DP-SGD (here without noise or clipping, so it equals a plain step too)."""
    import torch

    plain, crt = _tiny(), _tiny()
    opt_p, opt_c = torch.optim.SGD(plain.parameters(), lr=0.05), torch.optim.SGD(crt.parameters(), lr=0.05)
    dp = _dp(crt, opt_c, sigma=0.0, clip=1e6, mode=mode)
    for i, (x, y) in enumerate(_batches(n=4)):
        train_step(plain, None, opt_p, False, x, y)
        train_step(crt, dp, opt_c, bool(i % 2), x, y)
    assert sum(h[2] for h in dp.accountant.history) == 2  # only the private steps are accounted
    for a, b in zip(plain.parameters(), crt.parameters()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


def test_dp_lr_scales_only_the_private_steps_of_the_schedule():
    """``dp.lr``: CRT's private steps take dp.lr / optim.lr times the schedule's rate, its
    public steps the schedule's own. By hand: 2 epochs of 3 public and 2 private steps, no
    warmup; step 3 is private, at 0.1 + 0.45 (1 + cos(0.3 pi)) = 0.8145 of the peak."""
    phases = [Phase("public", False, 3, "public"), Phase("private", True, 2, "private")]
    plain, scaled = lr_lambda(0, 10), lr_lambda(0, 10, phases, 0.25)
    assert scaled(3) == pytest.approx(0.25 * 0.8145, abs=1e-4) and plain(3) == pytest.approx(0.8145, abs=1e-4)
    private = [k for k in range(10) if scaled(k) != plain(k)]
    assert private == [3, 4, 8, 9]
    assert all(scaled(k) == pytest.approx(0.25 * plain(k)) for k in private)
    assert scaled(0) == 1.0 and scaled(10) == plain(10) == pytest.approx(0.1)


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_rms_norm_per_example_gradients_match_a_per_example_loop(mode):
    """train.dp.grad_samplers' RMSNorm sampler (registered for hooks and ghost clipping)
    against autograd on one example at a time."""
    import torch
    from opacus.grad_sample.utils import wrap_model

    import train.dp.grad_samplers  # noqa: F401

    model = _tiny()
    x, y = _batches(n=1, b=3)[0]
    norm = model.model.layers[1].post_attention_layernorm
    expected = []
    for i in range(3):
        model.zero_grad()
        MaskedLMLoss()(model(input_ids=x[i:i + 1], use_cache=False).logits[:, :-1], y[i:i + 1]).backward()
        expected.append(norm.weight.grad.clone())
    expected = torch.stack(expected)
    kw = {"max_grad_norm": 1e9} if mode == "ghost" else {}
    gsm = wrap_model(copy.deepcopy(model), grad_sample_mode=mode, batch_first=True, loss_reduction="mean", **kw)
    gnorm = gsm._module.model.layers[1].post_attention_layernorm
    from opacus.grad_sample import GradSampleModule

    from train.dp.grad_samplers import rms_norm_grad_sample

    assert GradSampleModule.GRAD_SAMPLERS[type(gnorm)] is rms_norm_grad_sample  # not the functorch fallback
    loss = MaskedLMLoss()(gsm(input_ids=x, use_cache=False).logits[:, :-1], y)
    loss.backward()
    if mode == "hooks":
        assert torch.allclose(gnorm.weight.grad_sample, expected, atol=1e-5, rtol=1e-4)
    else:  # ghost clipping keeps only the per-example norms
        assert torch.allclose(gnorm.weight._norm_sample, expected.norm(dim=1), atol=1e-5, rtol=1e-4)


# ---- kind mlm (the refill stage's filler) ------------------------------------------

def test_mlm_preset_parameter_counts():
    """Hand count for BERT with a tied output layer: embeddings (V + P + 1) h + 2 h (norm);
    per layer 4 h^2 + 4 h (attention) + 2 h i + i + h (MLP) + 4 h (two norms); the head's
    transform h^2 + h + 2 h and its output bias V."""
    import torch
    from transformers import AutoModelForMaskedLM

    from train.models import MLM_PRESETS, mlm_preset_config

    for name, expected in (("tiny", 1_404_160), ("small", 17_696_000)):
        p = MLM_PRESETS[name]
        v, h, n, i, pos = (p["vocab_size"], p["hidden_size"], p["num_hidden_layers"], p["intermediate_size"],
                           p["max_position_embeddings"])
        per_layer = 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h
        assert (v + pos + 1) * h + 2 * h + n * per_layer + h * h + 3 * h + v == expected
        with torch.device("meta"):
            model = AutoModelForMaskedLM.from_config(mlm_preset_config(name))
        assert parameter_count(model) == expected, name


def test_mlm_batch_masks_only_targets_with_bert_proportions():
    from train.batches import mlm_batch

    rng = np.random.default_rng(0)
    n, t, mask_id, vocab = 400, 64, 2, 1000
    ids = rng.integers(10, vocab, (n, t)).astype(np.int32)
    loss = np.ones((n, t), np.uint8)
    loss[:, -10:] = 0  # padding or <MASK>: never chosen
    cfg = MLMPlan(probability=0.15, mask_id=mask_id, vocab_size=vocab, pad_id=1)
    idx = np.arange(n)
    x, y = (a.numpy() for a in mlm_batch(ids, loss, idx, cfg, seed=5, epoch=0, step=3, device="cpu"))
    chosen = y != IGNORE
    assert not chosen[:, -10:].any()
    assert (y[chosen] == ids[chosen]).all()  # the targets are the original tokens
    assert (x[~chosen] == ids[~chosen]).all()  # nothing else changes
    share = chosen.sum() / loss.sum()
    assert 0.14 < share < 0.16
    masked, kept = (x[chosen] == mask_id).mean(), (x[chosen] == ids[chosen]).mean()
    assert 0.77 < masked < 0.83 and 0.08 < kept < 0.13  # 80% <MASK>, 10% kept (+ random hits), 10% random
    # drawn per example: the same example gets the same masks in any batch, on any rank
    x2, y2 = (a.numpy() for a in mlm_batch(ids, loss, np.array([7, 3]), cfg, 5, 0, 3, "cpu"))
    assert (x2[1] == x[3]).all() and (y2[0] == y[7]).all()
    x3, _ = (a.numpy() for a in mlm_batch(ids, loss, idx, cfg, 5, 0, 4, "cpu"))
    assert (x3 != x).any()  # another step, other masks


@pytest.mark.parametrize("data,match", [
    ({"kind": "mlm", "dp": {"noise_multiplier": 1.0}}, "kind mlm trains without DP"),
    ({"kind": "mlm", "model": {"preset": "paper-551m"}}, "paper-551m is a causal model"),
    ({"kind": "pretrain", "data": {"mlm_probability": 0.2}}, "data.mlm_probability is a setting of kind mlm"),
    ({"kind": "mlm", "model": {"preset": None, "checkpoint": "x"}, "tokenizer": {"mode": "separate"}},
     "kind mlm fine-tunes a checkpoint with its own tokenizer"),
    ({"kind": "mlm", "data": {"mlm_probability": 1.0}}, "data.mlm_probability"),
])
def test_mlm_config_errors(data, match):
    from privatize.errors import SpecError
    from train.config import parse_config

    with pytest.raises(SpecError, match=match):
        parse_config(data)


# ---- privacy-preserving training (paper 003): identifier tokens are no targets ------

def test_token_targets_by_hand():
    from train.data import token_targets

    offsets = [(0, 4), (4, 9), (9, 13), (13, 14), (14, 14)]  # "Call Zorb lax." and an empty token
    assert token_targets(offsets, []).tolist() == [1, 1, 1, 1, 1]
    assert token_targets(offsets, [(5, 12)]).tolist() == [1, 0, 0, 1, 1]  # both pieces of the word
    assert token_targets(offsets, [(4, 4)]).tolist() == [1, 1, 1, 1, 1]  # an empty span covers nothing
    assert token_targets(offsets, [(13, 14), (0, 2)]).tolist() == [0, 1, 1, 0, 1]  # any order
    assert token_targets(offsets, [(0, 10), (2, 3)]).tolist() == [0, 0, 0, 1, 1]  # nested spans


def test_ppclm_step_equals_a_plain_step_with_identifier_labels_ignored_by_hand(tmp_path):
    """The loss mask oracle of issue 22: packing with ``ignore_spans`` and one training step
    equals packing plainly, setting the identifier tokens' labels to the ignore index by
    hand, and the same step."""
    import torch

    from train.data import Pack
    from train.loop import param_digest
    from train.tokenizer import special_ids

    tok = train_tokenizer(TEXTS + ["Call Zorblax about the mat today."] * 3, vocab_size=400, min_frequency=1)
    tok.save_pretrained(tmp_path)
    texts = np.array(["Call Zorblax about the mat today.", "The cat sat on the mat with Quintessa."], object)
    spans = np.array([[{"start": 5, "end": 12, "kind": "indirect", "term": "zorblax"}],
                      [{"start": 28, "end": 37, "kind": "direct", "term": None}]], object)
    batch = {"text": texts, "identifier_spans": spans}
    ppclm = Pack(str(tmp_path), "text", 32, True, "identifier_spans")(batch)
    plain = Pack(str(tmp_path), "text", 32, True)(batch)
    only_indirect = Pack(str(tmp_path), "text", 32, True, "identifier_spans", ("indirect",))(batch)
    assert (ppclm["ids"] == plain["ids"]).all()
    # by hand: the identifiers' tokens are "ĠZorblax" (one token, its space with it) and the
    # pieces of "Quintessa" (rare: its space is a token of its own, no part of the name)
    ids = plain["ids"].ravel().tolist()

    def positions(word):
        piece = tok(word, add_special_tokens=False)["input_ids"]
        at = next(i for i in range(len(ids)) if ids[i:i + len(piece)] == piece)
        return list(range(at, at + len(piece)))

    zorblax, quintessa = positions(" Zorblax"), positions("Quintessa")
    assert len(zorblax) == 1 and len(quintessa) > 3
    assert np.flatnonzero(ppclm["loss"].ravel() != plain["loss"].ravel()).tolist() == zorblax + quintessa
    assert np.flatnonzero(only_indirect["loss"].ravel() != plain["loss"].ravel()).tolist() == zorblax
    special = special_ids(tok)
    models = [build_model(preset_config("tiny", len(tok), **special), 0) for _ in range(3)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in models]
    idx = np.arange(len(plain["ids"]))
    x, y = make_batch(ppclm["ids"], ppclm["loss"], idx, "cpu")
    train_step(models[0], None, opts[0], False, x, y)
    x2, y2 = make_batch(plain["ids"], plain["loss"], idx, "cpu")
    y_hand = y2.clone().view(-1)
    for p in zorblax + quintessa:  # target index p - 1 predicts token p (one block here)
        y_hand[p - 1] = IGNORE
    train_step(models[1], None, opts[1], False, x2, y_hand.view_as(y2))
    train_step(models[2], None, opts[2], False, x2, y2)
    assert param_digest(models[0]) == param_digest(models[1])
    assert param_digest(models[0]) != param_digest(models[2])  # a plain step learns the identifiers
    # PPMLM: the masked-LM step never chooses an identifier token as a mask
    from train.batches import mlm_batch

    cfg = MLMPlan(probability=0.99, mask_id=tok.mask_token_id, vocab_size=len(tok), pad_id=tok.pad_token_id)
    _, ym = mlm_batch(ppclm["ids"], ppclm["loss"], idx, cfg, 0, 0, 0, "cpu")
    chosen = np.flatnonzero(ym.numpy().ravel() != IGNORE).tolist()
    assert not set(chosen) & set(zorblax + quintessa) and len(chosen) > 10


def test_the_example_configs_load():
    """Every config in train/configs parses (the README tells users to copy them)."""
    from pathlib import Path

    from train.config import load_config

    configs = sorted((Path(__file__).resolve().parents[2] / "train" / "configs").glob("*.yaml"))
    assert {"tiny-pretrain.yaml", "tiny-dp.yaml", "tiny-crt.yaml"} <= {p.name for p in configs}
    for path in configs:
        assert load_config(path).kind in ("pretrain", "continue", "dp", "crt", "mlm"), path


def test_crt_takes_gamma_and_delta_2_from_its_config_or_else_the_manifest(tmp_path):
    from privatize.errors import SpecError
    from train.config import parse_config
    from train.kinds import train_kind
    from train.plan import Prepared
    from train.run import _crt_inputs
    from train.setup import ModelSource

    def prepared(crt: dict, manifest: dict | None) -> Prepared:
        cfg = parse_config({"kind": "crt", "dp": {"noise_multiplier": 1.0}, "crt": crt})
        return Prepared(cfg, train_kind(cfg.kind), tmp_path, str(tmp_path), None, ModelSource(seed=0), {}, manifest,
                        None)

    measured = {"quality": {"gamma": 0.03, "delta_2": 0.002}}
    assert _crt_inputs(prepared({}, measured))[:2] == (0.03, 0.002)
    assert _crt_inputs(prepared({"gamma": 0.1, "source": "typed"}, measured))[:2] == (0.1, 0.002)  # the config wins
    with pytest.raises(SpecError, match=r"^crt.gamma: not given, and the privatization manifest has no quality"):
        _crt_inputs(prepared({}, {"stages": []}))


def test_a_stored_config_parses_again():
    from train.config import parse_config

    for kind in ("pretrain", "mlm"):
        cfg = parse_config({"kind": kind})
        assert parse_config(cfg.to_dict()).to_dict() == cfg.to_dict()


def test_book_keeping_under_ddp_takes_the_one_process_plain_steps(tmp_path):
    """Book-keeping in DistributedDataParallel over gloo, two processes each with half of
    every batch (DDP's own all-reduce off, Opacus' distributed optimizer reducing the
    clipped sums): with no noise and a clipping norm no gradient reaches, both ranks end
    with the parameters of plain SGD on the whole batches in one process."""
    import socket
    import subprocess
    import sys

    import torch

    from tests.conftest import ROOT

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "train" / "bk_ddp_worker.py"), str(r), "2", port,
                               str(tmp_path / f"rank{r}.pt")], env=env) for r in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    plain = _tiny()
    opt = torch.optim.SGD(plain.parameters(), lr=0.05)
    for x, y in _batches():
        train_step(plain, None, opt, False, x, y)
    for k, v in plain.state_dict().items():
        assert torch.equal(ranks[0][k], ranks[1][k]), k
        assert torch.allclose(ranks[0][k], v, atol=1e-6, rtol=0), k


@pytest.mark.parametrize("mode", ["hooks", "ghost", "bk"])
def test_the_oracle_holds_from_a_checkpoint(tmp_path, mode):
    """Issue 37: a DP training that started from a checkpoint failed in hooks mode ("No
    activations detected for Linear": from_pretrained leaves the model in eval mode, where
    Opacus' hooks record nothing). The worker's model is in training mode, and DP-SGD with
    no noise and no clipping takes plain training's steps from a loaded base as well."""
    import torch

    from train.loop import _init_model
    from train.setup import ModelInit

    _tiny(3).save_pretrained(tmp_path / "base")
    plain, private = (_init_model(ModelInit(seed=0, checkpoint=str(tmp_path / "base"))) for _ in range(2))
    assert plain.training and private.training
    opt_p, opt_d = torch.optim.SGD(plain.parameters(), lr=0.05), torch.optim.SGD(private.parameters(), lr=0.05)
    dp = _dp(private, opt_d, sigma=0.0, clip=1e6, mode=mode)
    for x, y in _batches():
        assert train_step(private, dp, opt_d, True, x, y) == pytest.approx(train_step(plain, None, opt_p, False, x, y),
                                                                            rel=1e-5)
    for (k, a), b in zip(plain.state_dict().items(), private.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0), k
