"""The model adapter against its in-process oracles: batched, padded scoring equals
scoring one text at a time; batched, left-padded generation equals generating alone."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def adapter():
    from attacks.model import ModelAdapter
    from train.models import build_model, preset_config
    from train.tokenizer import special_ids, train_tokenizer

    texts = [f"Please call Ann on {i}. The parcel {i * 7} left the depot on time." for i in range(200)]
    tok = train_tokenizer(texts, 400)
    return ModelAdapter(build_model(preset_config("tiny", vocab_size=len(tok), **special_ids(tok)), seed=1), tok)


TEXTS = ["Hello.", "Please call Ann on 42. The parcel left.", "The parcel 7 left the depot on time, said Ann."]


def test_batched_scores_equal_one_at_a_time(adapter):
    together = adapter.token_scores(TEXTS, batch_tokens=4096)
    for text, got in zip(TEXTS, together):
        alone = adapter.token_scores([text])[0]
        assert len(got.logprobs) == len(adapter.tok(text, add_special_tokens=False)["input_ids"])
        np.testing.assert_allclose(got.logprobs, alone.logprobs, atol=1e-4)
        np.testing.assert_allclose(got.sigma, alone.sigma, atol=1e-4)
    # the loss is the mean negative log-probability; perplexity the token-weighted exp
    losses = adapter.losses(TEXTS)
    assert losses == pytest.approx([-float(s.logprobs.mean()) for s in together])
    n = sum(len(s.logprobs) for s in together)
    assert adapter.perplexity(TEXTS) == pytest.approx(np.exp(-sum(s.logprobs.sum() for s in together) / n), rel=1e-5)


def test_batched_generation_equals_generating_alone(adapter, monkeypatch):
    # greedy decoding (top_k=1) makes the continuation a function of the prompt only
    together = adapter.generate(TEXTS, samples=2, max_new_tokens=6, top_k=1, batch=8)
    for text, got in zip(TEXTS, together):
        alone = adapter.generate([text], samples=1, max_new_tokens=6, top_k=1)[0][0]
        assert got == [alone, alone]
        assert "<pad>" not in alone and "<|endoftext|>" not in alone
