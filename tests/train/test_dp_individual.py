"""``dp.unit: individual``: user-level sampling over the blocks' owners and each individual's
gradient (the mean of its blocks') clipped as one, against independent oracles."""

from __future__ import annotations

import numpy as np
import pytest

from train.data import OWNER_COLUMN, Pack, owner_id
from train.batches import IGNORE, MaskedLMLoss, Owners, individual_batch, make_batch
from train.dp.engine import make_private
from train.loop import train_step
from train.models import build_model, preset_config
from train.plan import Phase


def _tiny(seed=0):
    return build_model(preset_config("tiny", vocab_size=300, bos_token_id=0, eos_token_id=0, pad_token_id=1), seed)


@pytest.mark.parametrize("mode", ["hooks", "bk"])
@pytest.mark.parametrize("clip", [0.05, 1e6])
def test_each_individual_mean_gradient_is_clipped_as_one(mode, clip):
    """Oracle: each individual's gradient by its own backward pass over its blocks (the
    mean of their per-block losses), clipped with Opacus' factor min(1, C / (norm + 1e-6)),
    summed and divided by the expected batch size; one DP step with no noise and SGD at
    lr 1 must move the weights by exactly that. Individuals' blocks are interleaved in
    the batch, and one block has no targets."""
    import torch

    groups = np.array([2, 0, 1, 0, 2, 2])
    rng = np.random.default_rng(3)
    ids = rng.integers(2, 300, size=(6, 16)).astype(np.int32)
    loss = (rng.random((6, 16)) > 0.1).astype(np.uint8)
    x, y = make_batch(ids, loss, np.arange(6), "cpu")
    y[4] = IGNORE
    ref = _tiny()
    grads, norms = [], []
    for u in range(3):
        ref.zero_grad()
        rows = np.flatnonzero(groups == u)
        MaskedLMLoss("none")(ref(input_ids=x[rows], use_cache=False).logits[:, :-1], y[rows]).mean().backward()
        g = [p.grad.clone() for p in ref.parameters()]
        norms.append(torch.sqrt(sum((t ** 2).sum() for t in g)))
        grads.append(g)
    norms = torch.stack(norms)
    factor = (clip / (norms + 1e-6)).clamp(max=1.0)
    if clip < 1:
        assert (norms > clip).all()  # every individual clipped, each by its own factor
    expected_batch = 2.5
    want = [p.detach() - sum(factor[u] * grads[u][k] for u in range(3)) / expected_batch
            for k, p in enumerate(_tiny().parameters())]

    model = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    dp = make_private(model, opt, grad_sample_mode=mode, max_grad_norm=clip, noise_multiplier=0.0, accountant="prv",
                      sample_rate=0.25, expected_batch_size=expected_batch, generator=torch.Generator().manual_seed(1))
    train_step(model, dp, opt, True, x, y, groups=groups)
    for (name, p), w in zip(model.named_parameters(), want):
        assert torch.allclose(p.detach(), w, rtol=1e-3, atol=1e-6), name


def test_individuals_are_sampled_whole_at_the_phase_rate():
    """Poisson sampling of individuals: each step takes all of a chosen individual's blocks
    (or a seeded draw of ``cap`` of its own), every individual is chosen at rate q, and
    the rank split keeps individuals whole."""
    owner = np.array([5, 9, 5, 7, 9, 5, 5, 5, 5, 5, 5, 5, 3], np.int64)  # 5 has 10 blocks
    owners = Owners(owner)
    assert len(owners) == 4
    by_owner = {int(owner[owners.blocks(j)[0]]): sorted(owners.blocks(j).tolist()) for j in range(4)}
    assert by_owner == {3: [12], 5: [0, 2, 5, 6, 7, 8, 9, 10, 11], 7: [3], 9: [1, 4]}
    phase = Phase("private", True, 4, "private")  # q = 1/4
    seen = np.zeros(4)
    steps = 4000
    for step in range(steps):
        people = individual_batch(owners, phase, 0, 0, step, 1, cap=3)
        for b in people:
            who = set(owner[b].tolist())
            assert len(who) == 1  # one individual each
            j = [k for k in range(4) if int(owner[owners.blocks(k)[0]]) in who][0]
            assert len(b) == min(3, owners.count[j]) and len(set(b.tolist())) == len(b)
            seen[j] += 1
    assert np.allclose(seen / steps, 0.25, atol=0.025)


def test_blocks_carry_their_owner_and_never_mix_records(tmp_path):
    from train.tokenizer import train_tokenizer

    tok = train_tokenizer(["alpha beta gamma delta"] * 20, 300)
    tok.save_pretrained(tmp_path)
    pack = Pack(str(tmp_path), "text", 8, False, owners=True)
    out = pack({"text": np.array(["alpha beta " * 6, "gamma", ""], object),
                OWNER_COLUMN: np.array(["ann", "bob", "cat"], object)})
    assert set(out) == {"ids", "loss", "first", "blocks", "owner"}
    n_first = int(out["blocks"][0])
    assert n_first > 1 and len(out["owner"]) == n_first + 1
    assert (out["owner"][:n_first] == owner_id("ann")).all() and out["owner"][-1] == owner_id("bob")
    assert owner_id(None) == 0 and owner_id("") == 0 and owner_id("ann") != owner_id("bob") > 0


def test_config_refuses_ghost_clipping_per_individual():
    from pydantic import ValidationError

    from train.config import DPConfig

    with pytest.raises(ValidationError, match="ghost"):
        DPConfig(unit="individual", grad_sample_mode="ghost", target_epsilon=3)
    assert DPConfig(unit="individual", grad_sample_mode="bk", target_epsilon=3).max_blocks_per_individual == 16
