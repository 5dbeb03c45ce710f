"""Name reconstruction and true-prefix: trial extraction from hand-made records (exact
S0/name/S1 strings), the picking logic against a deterministic test double of the model,
a real (tiny, randomly initialised) model checked against its own one-string-at-a-time
losses, and the evaluation config's sections and errors end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attacks.reconstruction import (NameTrial, draw_distractors, name_reconstruction, name_trials,  # noqa: E402
                                    read_records, same_extent, true_prefix)
from privatize.errors import SpecError  # noqa: E402

TEXT = ("SYS: May I have your full name?\n"
        "USR: Yes, Ann Lee. My address is 1 Main St.\n"
        "SYS: Thanks. Order number?\n"
        "USR: 123-45 I am Ann Lee.\n"
        "SYS: Bye Bo Kim")


def _span(text: str, value: str, kind: str = "NAME", nth: int = 0) -> dict:
    start = -1
    for _ in range(nth + 1):
        start = text.index(value, start + 1)
    return {"start": start, "end": start + len(value), "type": kind, "text": value}


RECORD = {"text": TEXT, "spans": [_span(TEXT, "Ann Lee"), _span(TEXT, "1 Main St.", "ADDRESS"),
                                  _span(TEXT, "Ann Lee", nth=1), _span(TEXT, "Bo Kim")]}


# -- trials ------------------------------------------------------------------------------


def test_turn_trials_are_the_names_line_split_at_the_name():
    assert name_trials([RECORD], 10) == [
        NameTrial("USR: Yes, ", "Ann Lee", ". My address is 1 Main St."),
        NameTrial("USR: 123-45 I am ", "Ann Lee", "."),
        NameTrial("SYS: Bye ", "Bo Kim", ""),  # the last line has no newline: S1 runs to the end
    ]


def test_dialogue_context_skips_a_name_already_in_s0_and_cuts_at_line_starts():
    got = name_trials([RECORD], 10, context="dialogue")
    assert got[0] == NameTrial("SYS: May I have your full name?\nUSR: Yes, ", "Ann Lee", ". My address is 1 Main St.")
    # the second "Ann Lee" is skipped (its S0 holds the answer); Bo Kim's S0 is everything before it
    assert [t.name for t in got] == ["Ann Lee", "Bo Kim"]
    assert got[1].s0 == TEXT[: TEXT.index("Bo Kim")]
    # a window of 15 characters: it starts in line 1, so S0 starts at the next line start
    assert name_trials([RECORD], 10, context="dialogue", max_context_chars=15)[0].s0 == "USR: Yes, "
    # a window shorter than the name's own line prefix: cut mid-line
    assert name_trials([RECORD], 10, context="turn", max_context_chars=5)[0].s0 == "Yes, "


def test_following_turns_and_min_s1_words():
    first = name_trials([RECORD], 10, following_turns=1)[0]
    assert first.s1 == ". My address is 1 Main St.\nSYS: Thanks. Order number?"
    # a name in a following turn would show the answer: the first trial is then skipped
    assert [t.s0 for t in name_trials([RECORD], 10, following_turns=2)] == ["USR: 123-45 I am ", "SYS: Bye "]
    assert [t.name for t in name_trials([RECORD], 10, min_s1_words=1)] == ["Ann Lee"]
    assert name_trials([RECORD], 10, entity_type="ADDRESS") == [NameTrial("USR: Yes, Ann Lee. My address is ",
                                                                          "1 Main St.", "")]


def test_trials_are_a_seeded_sample_in_record_order():
    records = [{"text": f"USR: I am N{i} X.", "spans": [{"start": 10, "end": 15, "type": "NAME"}]} for i in range(50)]
    a, b = name_trials(records, 7, seed=1), name_trials(records, 7, seed=1)
    assert a == b and len(a) == 7
    idx = [int(t.name[1:-2]) for t in a]
    assert idx == sorted(idx) and len(set(idx)) == 7
    assert a != name_trials(records, 7, seed=2)
    assert len(name_trials(records, 500)) == 50


def test_read_records_checks_spans(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(RECORD) + "\n\n")
    assert read_records(str(good))[0]["text"] == TEXT
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "USR: I am Bo.", "spans": [{"start": 0, "end": 3, "type": "NAME",
                                                                   "text": "Bo"}]}) + "\n")
    with pytest.raises(SpecError, match=r"recon\.data: .*bad\.jsonl:1: .*does not match"):
        read_records(str(bad), what="recon.data")
    (tmp_path / "names.txt").write_text("Ann Lee\n")
    with pytest.raises(SpecError, match=r"recon\.data: .*names\.txt is not a \.jsonl file"):
        read_records(str(tmp_path / "names.txt"), what="recon.data")


def test_distractors_are_distinct_and_never_the_true_name():
    pool = [f"Name {i}" for i in range(30)]
    where = {n: i for i, n in enumerate(pool)}
    rng = np.random.default_rng(0)
    for _ in range(50):
        got = draw_distractors(pool, "Name 3", 29, rng, where)
        assert len(got) == len(set(got)) == 29 and "Name 3" not in got
    assert len(draw_distractors(pool, "Someone Else", 30, rng)) == 30
    with pytest.raises(ValueError, match="need 30 names besides the true one; the list has 29"):
        draw_distractors(pool, "Name 3", 30, rng)


# -- picking logic, against a test double of the model boundary ---------------------------


class RememberingAdapter:
    """Test double for the model boundary (``ModelAdapter.losses``/``generate``): the loss
    is 1.0 for a string holding a remembered name, 2.0 otherwise, so the right answer of
    every trial is known without a model. Records every string it is asked to score."""

    def __init__(self, remembered=(), continuations=None):
        self.remembered = set(remembered)
        self.calls: list[list[str]] = []
        self.continuations = continuations or {}

    def losses(self, texts, **kw):
        self.calls.append(list(texts))
        return np.array([1.0 if any(n in t for n in self.remembered) else 2.0 for t in texts])

    def generate(self, prompts, *, samples, **kw):
        return [self.continuations[p][:samples] for p in prompts]


def test_the_lowest_perplexity_candidate_is_picked_and_ties_fail():
    trials = [NameTrial("USR: I am ", n, ".") for n in ("Ann Lee", "Bo Kim", "Cy Dunn", "Ann Lee")]
    candidates = [f"Other {i}" for i in range(40)] + ["Cy Dunn"]
    fake = RememberingAdapter({"Ann Lee", "Bo Kim"})
    res = name_reconstruction(fake, trials, candidates, 10, seed=0, chunk_strings=20)
    # Ann Lee twice and Bo Kim are the only strings of loss 1; Cy Dunn ties with its 9 others
    assert (res.trials, res.candidates, res.successes, res.rate) == (4, 10, 3, 0.75)
    # two trials per chunk of 20 strings; within a call no string is scored twice
    assert len(fake.calls) == 2 and all(len(set(c)) == len(c) <= 20 for c in fake.calls)
    scored = [s for c in fake.calls for s in c]
    assert all(s.startswith("USR: I am ") and s.endswith(".") for s in scored)
    assert {"USR: I am Ann Lee.", "USR: I am Bo Kim.", "USR: I am Cy Dunn."} <= set(scored)
    none = name_reconstruction(RememberingAdapter(), trials, candidates, 10)
    assert none.successes == 0 and none.rate == 0.0  # all tied: no success


def test_true_prefix_compares_only_s1s_lines():
    trials = [NameTrial("USR: Yes, ", "Ann Lee", ". My address is 1 Main Street."),
              NameTrial("USR: I am ", "Bo Kim", ". Ship it to Paris.")]
    fake = RememberingAdapter(continuations={
        # the exact S1, then the next turn: cut at the line end, distance 0
        "USR: Yes, Ann Lee": [". My address is 1 Main Street.\nSYS: Thanks, more words here.", ". Hello."],
        # nothing in common: [Ship, Paris] vs [Send, Rome] -> 2 substitutions / 2
        "USR: I am Bo Kim": [". Send it to Rome.", ". Send it to Rome."]})
    res = true_prefix(fake, trials, samples=2)
    assert res.trials == 2 and res.samples == 2
    assert res.distances[0] == 0.0
    assert res.distances[1] == 1.0
    assert res.mean_best_distance == 0.5
    assert same_extent("a\nb\nc", "x\ny") == "a\nb"


# -- a real model ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny randomly initialised Llama (2 layers, hidden 64) with a tokenizer trained by
    the project's trainer on CustomerSim-like turns, saved as a checkpoint folder."""
    from train.models import build_model, preset_config
    from train.tokenizer import special_ids, train_tokenizer

    before = torch.get_num_threads()  # restored after the module: later modules keep theirs
    torch.set_num_threads(2)
    texts = [f"SYS: May I have your name?\nUSR: I am Name{i} Person{i * 7 % 13}. Order {i * 7919 % 1000:03d}."
             for i in range(200)]
    tok = train_tokenizer(texts, 400)
    cfg = preset_config("tiny", vocab_size=len(tok), **special_ids(tok))
    cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size = 64, 2, 128
    cfg.num_attention_heads = cfg.num_key_value_heads = 2
    cfg.head_dim = 32
    d = tmp_path_factory.mktemp("model")
    build_model(cfg, seed=5).save_pretrained(d)
    tok.save_pretrained(d)
    yield d
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def adapter(model_dir):
    from attacks.model import ModelAdapter

    return ModelAdapter.load(model_dir)


def test_real_model_successes_match_scoring_each_string_alone(adapter):
    trials = [NameTrial("USR: I am ", n, ". Order 123.") for n in ("Ann Lee", "Bo Kim", "Cy Dunn", "Dee Fox",
                                                                  "Ed Gray", "Flo Hart")]
    # one other candidate: the draw is forced, so the expectation needs no random numbers
    res = name_reconstruction(adapter, trials, ["Zed Quill"], 2, batch_tokens=64)
    alone = [float(adapter.losses([t.s0 + n + t.s1])[0]) for t in trials for n in (t.name, "Zed Quill")]
    expected = sum(alone[2 * i] < alone[2 * i + 1] for i in range(len(trials)))
    assert res.successes == expected and res.rate == expected / 6 and 0 <= res.rate <= 1
    many = name_reconstruction(adapter, trials, [f"Person {i}" for i in range(30)], 20, seed=3)
    assert many.trials == 6 and many.candidates == 20 and 0 <= many.successes <= 6


def test_real_model_true_prefix_distances(adapter):
    trials = [NameTrial("USR: I am ", "Ann Lee", ". Order 123 is late."), NameTrial("USR: Yes, ", "Bo Kim", ".")]
    res = true_prefix(adapter, trials, samples=3, seed=1, max_new_tokens=8)
    assert res.trials == 2 and res.samples == 3 and len(res.distances) == 2
    assert all(0.0 <= d <= 1.0 for d in res.distances)
    assert res.mean_best_distance == pytest.approx(sum(res.distances) / 2)


# -- config and run --------------------------------------------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory, model_dir):
    from privatize.keys import KeyMaterial, write_key_file

    w = tmp_path_factory.mktemp("eval")
    recs = [{"text": f"SYS: Your name?\nUSR: I am Name{i} Person{i}. Ship to {i} Main St.\n",
             "spans": [{"start": 26, "end": 26 + len(f"Name{i} Person{i}"), "type": "NAME"}]} for i in range(20)]
    (w / "dialogs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (w / "names.txt").write_text("".join(f"Other{i} Name{i}\n" for i in range(12)))
    (w / "prompts.txt").write_text("SYS: Your name?\nUSR: I am\nSYS: Hello\n")
    (w / "keys").mkdir()
    write_key_file(KeyMaterial("aes-siv", bytes(range(64))), w / "keys" / "entity.key")
    write_key_file(KeyMaterial("hmac", bytes(range(32))), w / "keys" / "canary.key")
    return w


def _cfg(w, model_dir, **sections):
    return {"version": 1, "models": [{"name": "tiny", "path": str(model_dir)}], "output": str(w / "out"), **sections}


def _sections(w):
    return {"reconstruction": {"data": str(w / "dialogs.jsonl"), "candidates": str(w / "names.txt"), "trials": 8,
                               "n_candidates": 5},
            "true_prefix": {"data": str(w / "dialogs.jsonl"), "trials": 3, "samples": 2, "max_new_tokens": 6},
            "cipher_outputs": {"key": "file:keys/entity.key", "prompts": str(w / "prompts.txt"), "count": 2,
                               "max_new_tokens": 6, "training_pii": str(w / "dialogs.jsonl")},
            "corpus_stats": {"sources": {"dialogs": str(w / "dialogs.jsonl"), "names": str(w / "names.txt")},
                             "unit": "word", "max_n": 3}}


@pytest.mark.parametrize("change, where", [
    ({"reconstruction": {"data": "d.jsonl", "candidates": "c.txt", "n_candidates": 1}}, "reconstruction.n_candidates"),
    ({"true_prefix": {"trials": 3}}, "true_prefix.data"),
    ({"cipher_outputs": {"key": "file:k", "prompts": "p.txt", "bogus": 1}}, "cipher_outputs.bogus"),
    ({"corpus_stats": {"sources": {"a": "x"}, "unit": "byte"}}, "corpus_stats.unit"),
    ({"corpus_stats": {"sources": {}}}, "corpus_stats.sources"),
])
def test_config_errors_name_the_field(change, where):
    from attacks.config import parse_config

    with pytest.raises(SpecError, match=rf"config: {where.replace('.', '[.]')}: "):
        parse_config({"version": 1, "models": [{"name": "m", "path": "p"}], **change})


def test_prepare_errors_name_the_field(work, model_dir):
    from attacks.config import parse_config
    from attacks.run import prepare

    w = work
    good = _sections(w)

    def fails(section, update, match):
        cfg = parse_config(_cfg(w, model_dir, **{section: {**good[section], **update}}))
        with pytest.raises(SpecError, match=match):
            prepare(cfg, base_dir=str(w))
        assert not (w / "out").exists()

    fails("reconstruction", {"data": str(w / "none.jsonl")}, r"^reconstruction\.data: .*does not exist")
    fails("reconstruction", {"n_candidates": 14},
          r"^reconstruction\.n_candidates: 14 candidates .* need 13 .* leaves 12")
    fails("reconstruction", {"entity_type": "PHONE"}, r"^reconstruction\.data: .* no usable PHONE span")
    fails("true_prefix", {"min_s1_words": 9}, r"^true_prefix\.data: .* at least 9 word")
    fails("cipher_outputs", {"key": "file:keys/canary.key"}, r"^cipher_outputs\.key: .* is hmac; expected aes-siv")
    fails("cipher_outputs", {"training_pii": str(w / "names.csv")}, r"^cipher_outputs\.training_pii: ")
    fails("corpus_stats", {"sources": {"gone": str(w / "gone.txt")}}, r"^corpus_stats\.sources\.gone: ")


def test_run_evaluation_fills_every_new_section(work, model_dir):
    from attacks.config import parse_config
    from attacks.results import from_dict
    from attacks.run import run_evaluation

    w = work
    ev = run_evaluation(parse_config(_cfg(w, model_dir, **_sections(w))), base_dir=str(w), progress=False)
    m = ev.models[0]
    assert (m.reconstruction.trials, m.reconstruction.candidates) == (8, 5)
    assert 0 <= m.reconstruction.successes <= 8 and m.reconstruction.rate == m.reconstruction.successes / 8
    assert m.true_prefix.trials == 3 and m.true_prefix.samples == 2
    assert all(0 <= d <= 1 for d in m.true_prefix.distances)
    assert m.cipher_outputs.total_tokens >= m.cipher_outputs.invalid_tokens >= 0
    # word-level stats of the 12-line name list by hand: 24 distinct words once each -> log2 24 bits
    assert ev.corpus_stats["names"]["unigram"] == pytest.approx(np.log2(24))
    assert set(ev.corpus_stats) == {"dialogs", "names"} and set(ev.corpus_stats["names"]) == {"unigram", "2", "3"}
    back = from_dict(json.loads((w / "out" / "evaluation.json").read_text()))
    assert back.models[0].reconstruction == m.reconstruction and back.corpus_stats == ev.corpus_stats
