"""The QuALITY harness's parts, fast (issue 20): the loader against the file's own counts;
the multiple-choice scorer against log-likelihoods computed by hand, one plain forward
pass per (question, option), with and without lm-eval's length normalisation; SoE's
Table 5 over hand-made entity tokens; the growth factor's arithmetic; the chat-template
copy of a served model. The whole pipeline (training, a served LLM) is
``python -m experiments.quality_harness``."""

from __future__ import annotations

import json

import pytest

from experiments.quality_eval import (Question, chat_model, choice_loglikelihoods, cipher_table, continuation, growth,
                                  load_quality, prompt, score_choices)

torch = pytest.importorskip("torch")


# ---- the loader ------------------------------------------------------------------------

def test_the_loader_reads_every_article_and_question(shared_data):
    path = shared_data / "quality" / "quality_dev_fulltext.jsonl"
    arts = load_quality(path)
    assert len(arts) == 34 and sum(len(a.questions) for a in arts) == 609  # the README's counts
    assert len({a.key for a in arts}) == 34
    for a in arts:
        assert len(a.text.split()) > 1000 and 5 <= len(a.questions) <= 20
        for q in a.questions:
            assert q.article == a.key and len(q.options) == 4 and 0 <= q.gold < 4 and q.question.strip()
    # every label is used (a loader that read labels 1-indexed would lose 0 and invent 4)
    assert {q.gold for a in arts for q in a.questions} == {0, 1, 2, 3}
    first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert arts[0].key == first["key"] and arts[0].questions[0].gold == first["questions"][0]["gold_label"]
    some = load_quality(path, 3)
    assert [a.key for a in some] == [a.key for a in arts[:3]]


def test_the_loader_refuses_a_label_outside_the_options(tmp_path):
    bad = tmp_path / "q.jsonl"
    bad.write_text(json.dumps({"key": "k", "article": "text", "questions": [
        {"question": "q?", "options": ["a", "b", "c", "d"], "gold_label": 4}]}) + "\n")
    with pytest.raises(ValueError, match="gold label 4"):
        load_quality(bad)


# ---- the scorer ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def adapter():
    from attacks.model import ModelAdapter
    from train.models import build_model, preset_config
    from train.tokenizer import special_ids, train_tokenizer

    texts = [f"Question: why did Korvin leave the ship {i} times?\nAnswer: because the Ruler was tired of "
             f"wasteful questions and the door was open." for i in range(200)]
    tok = train_tokenizer(texts, 400)
    return ModelAdapter(build_model(preset_config("tiny", vocab_size=len(tok), **special_ids(tok)), seed=3), tok)


QUESTIONS = [
    Question("a", "Why did Korvin leave?", ("The door was open.", "He was tired of the Ruler and his many wasteful "
                                            "questions about the ship", "No.", "Because of the Ruler"), 1),
    Question("a", "Who asked the questions?", ("the Ruler", "Korvin", "the ship's door, which had been left open "
                                               "by the guards", "nobody"), 0),
    Question("b", "How many times?", ("7", "seven times, as the Ruler said", "twice", "it was open"), 3),
    Question("b", "What was wasteful?", ("questions", "answers, said the Ruler, were wasteful and confusing to "
                                         "everyone", "the door", "Korvin's ship"), 1),
]


def _by_hand(adapter, context: str, cont: str, max_len: int | None = None) -> tuple[float, int]:
    """log p(cont | context): one unpadded forward pass of [BOS] + context + continuation."""
    tok = adapter.tok
    c = tok(cont, add_special_tokens=False)["input_ids"]
    ids = [tok.bos_token_id] + tok(context, add_special_tokens=False)["input_ids"] + c
    if max_len is not None and len(ids) > max_len:
        ids = [tok.bos_token_id] + ids[len(ids) - max_len + 1:]
    with torch.no_grad():
        logp = torch.log_softmax(adapter.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    return sum(float(logp[i - 1, ids[i]]) for i in range(len(ids) - len(c), len(ids))), len(c)


def test_option_loglikelihoods_equal_one_forward_pass_each(adapter):
    ctx = [prompt(q) for q in QUESTIONS for _ in q.options]
    cont = [continuation(o) for q in QUESTIONS for o in q.options]
    # a small batch budget: several padded batches of mixed lengths
    got = choice_loglikelihoods(adapter, ctx, cont, batch_tokens=64)
    for (c, x), (ll, n) in zip(zip(ctx, cont), got):
        want, wn = _by_hand(adapter, c, x)
        assert n == wn and ll == pytest.approx(want, abs=1e-3)
    alone = choice_loglikelihoods(adapter, ctx, cont, batch_tokens=100_000)
    assert [ll for ll, _ in got] == pytest.approx([ll for ll, _ in alone], abs=1e-4)


def test_a_long_context_loses_its_start_not_the_option(adapter, monkeypatch):
    q = QUESTIONS[0]
    conts = [continuation(o) for o in q.options]
    lengths = [len(adapter.tok(c, add_special_tokens=False)["input_ids"]) for c in conts]
    short = 1 + max(lengths) + 3  # the longest option keeps only the end of its question
    assert short < 1 + len(adapter.tok(prompt(q), add_special_tokens=False)["input_ids"]) + max(lengths)
    monkeypatch.setattr(adapter, "max_len", short)
    got = choice_loglikelihoods(adapter, [prompt(q)] * 4, conts)
    for c, n0, (ll, n) in zip(conts, lengths, got):
        want, wn = _by_hand(adapter, prompt(q), c, max_len=short)
        assert n == wn == n0 and ll == pytest.approx(want, abs=1e-3)
    monkeypatch.setattr(adapter, "max_len", max(lengths))
    with pytest.raises(ValueError, match="does not fit"):
        choice_loglikelihoods(adapter, [prompt(q)] * 4, conts)


def test_choices_and_accuracy_with_and_without_length_normalisation(adapter):
    r = score_choices(adapter, QUESTIONS, batch_tokens=128)
    picks, picks_norm = [], []
    for q, per in zip(QUESTIONS, r["per_question"]):
        ll = [_by_hand(adapter, prompt(q), continuation(o))[0] for o in q.options]
        norm = [v / len(o.strip()) for v, o in zip(ll, q.options)]  # lm-eval's acc_norm: per character
        picks.append(max(range(4), key=lambda k: ll[k]))
        picks_norm.append(max(range(4), key=lambda k: norm[k]))
        assert per["loglik"] == pytest.approx(ll, abs=1e-3)
        assert (per["choice"], per["choice_norm"]) == (picks[-1], picks_norm[-1])
    # the options' lengths differ tenfold: the normalisation changes some choice, so the
    # two figures are really computed apart
    assert picks != picks_norm
    assert r["questions"] == 4
    assert r["correct"] == sum(p == q.gold for p, q in zip(picks, QUESTIONS))
    assert r["correct_norm"] == sum(p == q.gold for p, q in zip(picks_norm, QUESTIONS))
    assert r["acc"] == r["correct"] / 4 and r["acc_norm"] == r["correct_norm"] / 4
    # gold labels set to the model's own choices: accuracy 1; shifted by one: 0
    mine = [Question(q.article, q.question, q.options, p) for q, p in zip(QUESTIONS, picks)]
    assert score_choices(adapter, mine)["acc"] == 1.0
    off = [Question(q.article, q.question, q.options, (p + 1) % 4) for q, p in zip(QUESTIONS, picks)]
    assert score_choices(adapter, off)["acc"] == 0.0


# ---- Table 5, growth, the served model's chat template -----------------------------------

def test_table5_counts_failures_and_where_each_token_came_from():
    from privatize.ciphers.entity import EntityCipher
    from privatize.keys import new_key

    cipher = EntityCipher(new_key("aes-siv"))
    ann, paris = cipher.token("Ann Lee", "PERSON"), cipher.token("Paris", "LOCATION")
    forged = "Person_[" + "A" * 32 + "]"  # well-formed, but no key made it
    articles = {"a": f"{ann} went to town.", "b": f"{paris} is far."}
    synthetic = [("a", f"{ann} met {ann} in {paris}."), ("b", f"Q: who?\nA: {forged} and {forged}.")]
    t = cipher_table(cipher, synthetic, articles)
    assert (t["total_tokens"], t["invalid"], t["ok"]) == (5, 2, 3)
    assert (t["unique_tokens"], t["unique_failures"]) == (3, 1)
    assert t["failure_ratio"] == pytest.approx(2 / 5) and t["unique_failure_ratio"] == pytest.approx(1 / 3)
    # Ann twice in her own article; Paris copied into article a from b (SoE's FCAOA)
    assert t["origin"] == {"own": 2, "other_article": 1, "nowhere": 2}
    assert cipher_table(cipher, [], articles)["failure_ratio"] == 0.0


def test_growth_per_article_and_per_source_token():
    stats = {"requests": 30, "tokens_in": 600_000, "tokens_out": 1_440, "source_words": 10_000,
             "synthetic_words": 250}
    g = growth(stats, 3, source_tokens=12_000, synthetic_tokens=360)
    assert g["requests_per_article"] == 10 and g["tokens_in_per_article"] == 200_000
    assert g["synthetic_tokens_per_source_token"] == pytest.approx(0.03)
    assert g["tokens_out_per_source_token"] == pytest.approx(0.12)
    assert g["synthetic_words_per_source_word"] == pytest.approx(0.025)


def test_the_served_copy_gets_a_chat_template_and_leaves_the_model_alone(adapter, tmp_path):
    src = tmp_path / "model"
    adapter.model.save_pretrained(src)
    adapter.tok.save_pretrained(src)
    before = {f.name: f.read_bytes() for f in src.iterdir()}
    served = chat_model(src, tmp_path / "chat")
    from transformers import AutoTokenizer

    assert served == tmp_path / "chat"
    tok = AutoTokenizer.from_pretrained(served)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "user: hi\nassistant: "
    assert (served / "model.safetensors").is_symlink()  # the weights linked, not copied
    assert {f.name: f.read_bytes() for f in src.iterdir()} == before  # the source folder untouched
    assert chat_model(served, tmp_path / "again") == served  # a template already there: served as it is
