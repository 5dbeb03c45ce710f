"""Exact exposure by the digit trie against naive scoring of every candidate (the oracle),
on a small but real model: a Llama from the project's ``tiny`` preset made narrower
(2 layers, hidden 64) so naive scoring of all 10^5 candidates stays quick, with a
tokenizer trained by the project's trainer."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def adapter():
    from attacks.model import ModelAdapter
    from train.models import build_model, preset_config
    from train.tokenizer import special_ids, train_tokenizer

    before = torch.get_num_threads()  # restored after the module: later modules keep theirs
    torch.set_num_threads(2)
    texts = [f"My ID is: {i * 7919 % 100000:05d}. The parcel {i} left the depot on time." for i in range(300)]
    tok = train_tokenizer(texts, 400)
    cfg = preset_config("tiny", vocab_size=len(tok), **special_ids(tok))
    cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size = 64, 2, 128
    cfg.num_attention_heads = cfg.num_key_value_heads = 2
    cfg.head_dim = 32
    model = build_model(cfg, seed=3)
    yield ModelAdapter(model, tok)
    torch.set_num_threads(before)


def test_trie_equals_naive_on_every_5_digit_candidate(adapter):
    trie = adapter.digit_scores_trie("My ID is: ", 5, chunk=4096)
    naive = adapter.digit_scores_naive("My ID is: ", [f"{i:05d}" for i in range(10 ** 5)], batch=4096)
    assert trie.shape == naive.shape == (10 ** 5,)
    np.testing.assert_allclose(trie, naive, rtol=0, atol=2e-4)
    # the same ranks, hence the same exposures, for a spread of secrets
    from attacks.metrics import rank_of

    for s in (0, 12345, 99999, int(np.argmax(naive)), int(np.argmin(naive))):
        assert rank_of(trie[s], trie) == rank_of(naive[s], naive)


def test_trie_scores_are_log_probabilities_summing_to_one(adapter):
    # over all 10^3 secrets of 3 digits, P(secret | prefix, digits only) sums to at most 1;
    # renormalised per level (digits only) it sums to exactly 1: check the unnormalised
    # mass is below 1 and that a different prefix gives different scores
    s = adapter.digit_scores_trie("My ID is: ", 3)
    assert np.exp(s).sum() <= 1.0 + 1e-6
    assert np.all(np.isfinite(s))
    assert not np.allclose(s, adapter.digit_scores_trie("The parcel ", 3))


def test_exposure_result_ranks_secrets(adapter):
    from attacks.exposure import canary_exposure

    res = canary_exposure(adapter, "My ID is: {secret}.", 3, ["123", "999", "000"], [20, 20, 0])
    assert res.candidates == 1000 and res.method == "exact"
    assert [c.repeats for c in res.canaries] == [20, 20, 0]
    for c in res.canaries:
        assert 1 <= c.rank <= 1000
        assert c.exposure == pytest.approx(np.log2(1000) - np.log2(c.rank))
    assert res.max_exposure == max(c.exposure for c in res.canaries[:2])
    assert res.max_reference_exposure == res.canaries[2].exposure


def test_tokenizer_that_merges_digits_is_refused():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from attacks.model import ModelAdapter
    from privatize.errors import SpecError
    from train.models import build_model, preset_config

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(["My ID is: 123456 123456 123456"] * 50,
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    model = build_model(preset_config("tiny", vocab_size=len(tok)), seed=0)
    with pytest.raises(SpecError, match="merges digits|one token"):
        ModelAdapter(model, tok).digit_scores_trie("My ID is: ", 3)
