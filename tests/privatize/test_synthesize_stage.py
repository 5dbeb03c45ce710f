"""The ``synthesize`` stage (issue 20, SoE paper 001): the entity graph against
hand-computed answers, score parsing, and the stage against a scripted OpenAI-compatible
server on loopback (tests/llm_double.py, a labelled test double at the paid-API
boundary): exact output, faults that change nothing, a budget that stops a run before it
overspends and writes nothing, a resumed run that sends only what was not cached, and an
API key that reaches the server and nothing else; a run killed mid-way (SIGKILL) and
restarted sends only what was not cached; token budgets, sentence windows and the
entities an LLM lists, through the stage."""

from __future__ import annotations

import hashlib
import json
import logging

import pytest

from privatize import run
from privatize.errors import KeyMaterialError, SpecError
from privatize.spec import parse_spec
from privatize.synthesis import graph, prompts
from privatize.synthesis.client import BudgetExceeded
from tests.llm_double import _PAIR, ScriptedLLM

Q, R, O = "Person_[QUJD]", "Person_[RUZH]", "Org_[T0xE]"
ARTICLES = [{"id": "a1", "individual_id": "w1", "title": "Payments",
             "text": f"{Q} met {R} in town. {Q} paid {O}. {R} left early."},
            {"id": "a2", "text": f"{O} hired {R}. Nobody else came."}]


def test_edges_and_tuples_by_hand():
    a, b, c, d = "A", "B", "C", "D"
    scores = {(a, b): 0.9, (a, c): 0.6, (a, d): 0.2, (b, c): 0.7, (b, d): 0.5, (c, d): 0.4}
    edges = graph.kept_edges(scores, 0.5)
    assert edges == {(a, b): 0.9, (a, c): 0.6, (b, c): 0.7, (b, d): 0.5}  # 0.5 is kept, 0.4 and 0.2 go
    # A: B .9, C .6 -> (A, B, C); B's and C's best tuples have the same members; D: B
    assert graph.tuples([a, b, c, d], edges, max_k=3) == [(a, b, c), (d, b)]
    assert graph.tuples([a, b, c, d], edges, max_k=2) == [(a, b), (c, b), (d, b)]
    # ties go to the neighbour ranked first
    assert graph.tuples([a, b, c], {(a, b): 0.7, (a, c): 0.7}, max_k=2) == [(a, b), (c, a)]
    assert graph.rank_entities([c, a, c, b, a, d], cap=3) == [c, a, b]  # 2, 2 (c first), 1
    near = graph.candidate_pairs([a, b, c], {a: {0}, b: {1}, c: {5}}, window=1)
    assert near == [(a, b)] and len(graph.candidate_pairs([a, b, c, d])) == 6


@pytest.mark.parametrize("answer, value, problem", [
    ("Causal ...\n\nScore: 0.8", 0.8, None), ("...\nScore：0,65", 0.65, None), ("**Score:** 1", 1.0, None),
    ("因果关系：有。\n依赖：弱。\n分数：0.3", 0.3, None), ("Score: 0.2 then Score: 0.7.", 0.7, None),
    ("Score: <Assign a score between 0 and 1>", None, "missing"), ("no number here", None, "missing"),
    ("Score: 1.4", None, "out_of_range"), ("Score: -0.1", None, "out_of_range"), ("Score: 8/10", None, "out_of_range"),
    ("Score: 75%", None, "out_of_range")])
def test_score_parsing(answer, value, problem):
    assert graph.parse_score(answer) == graph.Score(value, problem)


def test_samples_that_do_not_follow_the_instruction():
    assert prompts.problem("qa", "Q: Who?\nA: A and B.", ("A", "B")) is None
    assert prompts.problem("qa", "A and B are friends.", ("A", "B")) == "format"
    assert prompts.problem("relation", "A is nice.", ("A", "B")) == "entities"
    assert prompts.problem("description", "  ", ("A",)) == "empty"
    assert prompts.parse_entities("Here:\n- A\n* B\n- A\nnot a line", 5) == ["A", "B"]


def _spec(url, **extra):
    llm = {"base_url": url, "model": "scripted", **extra.pop("llm", {})}
    return parse_spec({"stages": [{"kind": "synthesize", "allow_plaintext": True, "llm": llm, **extra}],
                       "output": {"num_shards": 2}})


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps(a) + "\n" for a in ARTICLES), encoding="utf-8")
    return tmp_path


def _rows(out):
    import pyarrow.parquet as pq

    rows = [r for p in sorted((out / "shards").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {r["doc_id"]: r for r in rows}


def _hashes(out):
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / "shards").glob("*.parquet"))]


def test_the_stage_against_the_scripted_server(corpus):
    with ScriptedLLM(scores={(Q, R): 0.9, (Q, O): 0.6}, broken={(R, O)}) as llm:
        m = run(_spec(llm.url, cache="cache"), corpus / "in", corpus / "out", spec_dir=str(corpus))
    rows = _rows(corpus / "out")
    st = m["stages"][0]["stats"]
    # a1: entities Q (2 mentions), R (2), O (1); pairs QR .9, QO .6, RO unreadable -> edges QR, QO;
    # tuples (Q, R, O), (R, Q), (O, Q): 3 descriptions + 6 samples. a2: O, R; pair OR .9; tuple (O, R)
    assert st["score_missing"] == 1 and st["edges"] == 3 and st["tuples"] == 4
    assert st["requests"] == 12 + 5 == len(llm.requests) and st["requests_cached"] == 0
    a1 = sorted((r for r in rows.values() if r["synthesis_source"] == "a1"), key=lambda r: r["doc_id"])
    assert [r["synthesis_prompt"] for r in a1] == ["description"] * 3 + ["qa", "relation"] * 3
    assert [r["synthesis_entities"] for r in a1[3::2]] == [[Q, R, O], [R, Q], [O, Q]]
    assert a1[0]["doc_id"] == "a1/syn-00001" and a1[0]["individual_id"] == rows["a1"]["individual_id"]
    assert rows["a1"]["synthesis_source"] is None and rows["a1"]["text"] == ARTICLES[0]["text"]
    assert st["samples"] == 9 + 4 and m["counts"]["output_records"] == 2 + 13
    assert st["synthetic_words"] == sum(len(r["text"].split()) for r in rows.values() if r["synthesis_source"])
    # a re-run answers from the cache: no request, the same shards
    with ScriptedLLM(scores={(Q, R): 0.9, (Q, O): 0.6}, broken={(R, O)}) as again:
        m2 = run(_spec(again.url, cache="cache"), corpus / "in", corpus / "again", spec_dir=str(corpus))
    assert again.requests == [] and m2["stages"][0]["stats"]["requests_cached"] == 17
    assert _hashes(corpus / "again") == _hashes(corpus / "out")


def test_faults_change_nothing_and_a_resumed_run_sends_only_what_is_missing(corpus):
    with ScriptedLLM() as clean:
        run(_spec(clean.url, cache="c0"), corpus / "in", corpus / "clean", spec_dir=str(corpus))
    total = len(clean.requests)
    faults = {2: 429, 3: 500, 5: "timeout", 6: 503}
    with ScriptedLLM(faults=faults, hang_s=3.0) as flaky:
        m = run(_spec(flaky.url, cache="c1", llm={"timeout_s": 1.0, "backoff_s": 0.01}), corpus / "in",
                corpus / "flaky", spec_dir=str(corpus))
    # each fault cost one more request (a loaded machine may time out another: never fewer)
    assert len(flaky.requests) >= total + 4 and _hashes(corpus / "flaky") == _hashes(corpus / "clean")
    assert m["stages"][0]["stats"]["requests"] == total
    # a budget stops the run before it overspends: nothing is written
    with ScriptedLLM() as first:
        with pytest.raises(BudgetExceeded, match="max_requests 6 reached"):
            run(_spec(first.url, cache="c2", max_requests=6), corpus / "in", corpus / "cut", spec_dir=str(corpus))
    assert len(first.requests) <= 6 and not (corpus / "cut").exists()
    cached = len(list((corpus / "c2" / "responses").rglob("*.json")))
    assert 0 < cached <= 6
    with ScriptedLLM() as rest:
        run(_spec(rest.url, cache="c2"), corpus / "in", corpus / "resumed", spec_dir=str(corpus))
    assert len(rest.requests) == total - cached
    assert _hashes(corpus / "resumed") == _hashes(corpus / "clean")


def test_the_api_key_reaches_the_server_and_nothing_else(corpus, monkeypatch, caplog):
    secret = "sk-test-" + "9" * 24
    monkeypatch.setenv("SYNTH_KEY", secret)
    caplog.set_level(logging.DEBUG)
    with ScriptedLLM() as llm:
        m = run(_spec(llm.url, cache="ck", llm={"api_key": "env:SYNTH_KEY"}), corpus / "in", corpus / "out",
                spec_dir=str(corpus))
    assert {r["auth"] for r in llm.requests} == {f"Bearer {secret}"}
    stored = [p.read_bytes() for p in (corpus / "ck").rglob("*") if p.is_file()]
    stored += [p.read_bytes() for p in (corpus / "out").rglob("*") if p.is_file()]
    assert not any(secret.encode() in b for b in stored) and secret not in json.dumps(m)
    assert secret not in caplog.text
    with pytest.raises(SpecError, match="stages.0.synthesize.llm.api_key"):
        parse_spec({"stages": [{"kind": "synthesize", "allow_plaintext": True,
                                "llm": {"base_url": "http://x", "model": "m", "api_key": secret}}]})


def test_a_key_store_api_key_without_a_cache_keeps_nothing_on_disk(corpus):
    """``keystore:<id>`` of an ``api-key`` key (the service's way: its workers resolve it
    from the job's sealed bundle; here a key store in memory) and ``cache: null``: the key
    reaches the server, nothing is written but the output, and a key of another kind is
    refused in the worker before any request."""
    from privatize.keys import import_key, new_key, register_keystore

    secret = "sk-store-" + "7" * 30
    keys = {"a1": import_key("api-key", secret), "h1": new_key("hmac")}
    register_keystore(lambda key_id: keys[key_id])
    try:
        with ScriptedLLM() as llm:
            run(_spec(llm.url, cache=None, llm={"api_key": "keystore:a1"}), corpus / "in", corpus / "out",
                spec_dir=str(corpus))
            assert {r["auth"] for r in llm.requests} == {f"Bearer {secret}"}
            assert sorted(p.name for p in corpus.iterdir()) == ["in", "out"]  # no cache folder
            assert not any(secret.encode() in p.read_bytes() for p in (corpus / "out").rglob("*") if p.is_file())
            sent = len(llm.requests)
            with pytest.raises(KeyMaterialError, match=r"llm.api_key: keystore:h1: key \w+ is hmac; expected api-key"):
                run(_spec(llm.url, cache=None, llm={"api_key": "keystore:h1"}), corpus / "in", corpus / "o2",
                    spec_dir=str(corpus))
            assert len(llm.requests) == sent
    finally:
        register_keystore(None)
    # the key store's references are key references of kind api-key (the service checks them)
    from privatize.spec import key_requirements

    spec = _spec("http://127.0.0.1:1/v1", llm={"api_key": "keystore:a1"})
    assert key_requirements(spec) == [("stages.0.llm.api_key", "keystore:a1", ("api-key",))]
    assert key_requirements(_spec("http://127.0.0.1:1/v1", llm={"api_key": "env:K"})) == []


def test_the_validator_wants_redaction_first():
    llm = {"base_url": "http://127.0.0.1:1/v1", "model": "m"}
    with pytest.raises(SpecError, match="synthesize sends its articles to an LLM"):
        parse_spec({"stages": [{"kind": "synthesize", "llm": llm}]})
    parse_spec({"stages": [{"kind": "redact", "operator": "tag"}, {"kind": "synthesize", "llm": llm}]})
    with pytest.raises(SpecError, match="put split after it"):
        parse_spec({"stages": [{"kind": "split"}, {"kind": "synthesize", "llm": llm, "allow_plaintext": True}]})


@pytest.fixture(scope="module")
def served_model(tmp_path_factory):
    """``transformers serve`` (a real OpenAI-compatible server) on loopback, serving a tiny
    Llama with random weights and a chat template: the protocol path of a real server
    (started as the QuALITY harness starts one)."""
    from experiments.quality_eval import CHAT_TEMPLATE, served
    from train.models import build_model, preset_config
    from train.tokenizer import special_ids, train_tokenizer

    d = tmp_path_factory.mktemp("chat-model")
    tok = train_tokenizer([a["text"] for a in ARTICLES] * 40, 300)
    tok.chat_template = CHAT_TEMPLATE
    build_model(preset_config("tiny", vocab_size=len(tok), **special_ids(tok)), seed=1).save_pretrained(d)
    tok.save_pretrained(d)
    with served(d, d / "serve.log", timeout_s=60) as url:
        yield url, str(d)


def test_the_stage_against_transformers_serve(corpus, served_model):
    url, model = served_model
    spec = _spec(url, cache="real", llm={"model": model, "max_tokens": 12, "max_in_flight": 4})
    m = run(spec, corpus / "in", corpus / "out", spec_dir=str(corpus))
    st = m["stages"][0]["stats"]
    # 5 descriptions and 4 pairs asked; a random model writes no "Score:", so no edge and
    # no tuple: every pair is counted as unreadable, never guessed
    assert st["requests"] == 9 and st["requests_cached"] == 0 and st["tokens_out"] > 0
    assert st["score_missing"] + st["score_out_of_range"] == 4 and st["edges"] == 0 and st["tuples"] == 0
    assert st["samples"] + st["filtered_entities"] + st["filtered_empty"] == 5
    again = run(spec, corpus / "in", corpus / "again", spec_dir=str(corpus))
    assert again["stages"][0]["stats"]["requests_cached"] == 9 and _hashes(corpus / "again") == _hashes(corpus / "out")


def test_after_redaction_the_llm_sees_only_what_redaction_missed(shared_data, tmp_path):
    """CustomerSim dialogues with gold PII spans through redact (operator encrypt, AES-SIV)
    then synthesize: every prompt the (scripted) server receives holds no gold PII string
    that the redacted articles do not hold, and the share of gold strings in the prompts
    and in the synthetic records is at most the redaction's miss rate on the same data."""
    from privatize.keys import new_key, write_key_file

    rows = []
    with open(shared_data / "customersim" / "train.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r["kind"] == "dial":
                rows.append(r)
            if len(rows) == 12:
                break
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "d.jsonl").write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n"
                                                     for r in rows), encoding="utf-8")
    write_key_file(new_key("aes-siv"), tmp_path / "entity.key")
    gold = sorted({s["text"] for r in rows for s in r["spans"]})
    with ScriptedLLM() as llm:
        spec = parse_spec({"stages": [{"kind": "redact", "operator": "encrypt", "key": "file:entity.key"},
                                      {"kind": "synthesize", "cache": "cache", "max_entities": 4,
                                       "llm": {"base_url": llm.url, "model": "scripted"}}]})
        m = run(spec, tmp_path / "in", tmp_path / "out", spec_dir=str(tmp_path))
        sent = llm.prompts()
    out = _rows(tmp_path / "out")
    articles = [r["text"] for r in out.values() if r["synthesis_source"] is None]
    synthetic = [r["text"] for r in out.values() if r["synthesis_source"] is not None]
    assert len(articles) == 12 and synthetic and m["stages"][1]["stats"]["requests"] == len(llm.requests)

    def share(texts):
        return sum(1 for g in gold if any(g in t for t in texts)) / len(gold)

    missed = share(articles)  # the gold strings redaction left in the articles
    for p in sent:
        assert {g for g in gold if g in p} <= {g for g in gold if any(g in a for a in articles)}
    assert share(sent) <= missed and share(synthetic) <= missed
    assert missed < 0.5  # redaction removed most of it: the figure means something
    assert any("_[" in p for p in sent)  # entities reached the server as tokens


def test_a_token_budget_stops_the_run_before_it_overspends(corpus):
    with ScriptedLLM() as llm:
        with pytest.raises(BudgetExceeded, match="max_tokens 2000 would be exceeded"):
            run(_spec(llm.url, max_tokens=2000, cache=None, llm={"max_tokens": 64}), corpus / "in", corpus / "out",
                spec_dir=str(corpus))
    assert not (corpus / "out").exists() and 0 < len(llm.requests) < 17


def test_pairs_within_a_sentence_window_and_entities_the_llm_lists(corpus):
    """``sentence_window: 0``: only pairs named in one sentence are scored (a1: Q-R and
    Q-O, never R-O; a2: O-R); ``llm_entities``: one entity-list request per article, its
    entities joined to the detected ones (here the same tokens, so the same output)."""
    with ScriptedLLM() as llm:
        m = run(_spec(llm.url, sentence_window=0, cache=None), corpus / "in", corpus / "window", spec_dir=str(corpus))
    scored = sorted(m.groups() for m in map(_PAIR.search, llm.prompts()) if m)  # as the double reads them
    assert scored == [(O, R), (Q, O), (Q, R)]
    assert m["stages"][0]["stats"]["edges"] == 3
    with ScriptedLLM() as plain:
        run(_spec(plain.url, cache=None), corpus / "in", corpus / "plain", spec_dir=str(corpus))
    with ScriptedLLM() as listing:
        m = run(_spec(listing.url, llm_entities=True, cache=None), corpus / "in", corpus / "listed", spec_dir=str(corpus))
    asked = [p for p in listing.prompts() if p.startswith("List the salient entities")]
    assert len(asked) == 2 and len(listing.requests) == len(plain.requests) + 2
    assert _hashes(corpus / "listed") == _hashes(corpus / "plain")


def test_allow_plaintext_warns(caplog):
    with caplog.at_level(logging.WARNING):
        _spec("http://127.0.0.1:1/v1")
    assert "allow_plaintext is on: articles may reach the LLM with plaintext PII" in caplog.text


def test_a_run_killed_mid_way_sends_only_what_was_not_cached_when_restarted(corpus):
    """The process is killed (SIGKILL) while it waits on a slow model; the restarted run
    sends only the requests whose answers were not cached, and writes the clean run's
    shards."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    with ScriptedLLM() as clean:
        run(_spec(clean.url, cache=None), corpus / "in", corpus / "clean", spec_dir=str(corpus))
    total = len(clean.requests)
    cache = corpus / "kcache"
    with ScriptedLLM(delay_s=0.25) as slow:
        spec = _spec(slow.url, cache=str(cache), llm={"max_in_flight": 1}).to_dict()
        (corpus / "spec.json").write_text(json.dumps(spec))
        cli = Path(sys.executable).parent / "privatize"
        proc = subprocess.Popen([str(cli), "run", str(corpus / "spec.json"), "--input", str(corpus / "in"),
                                 "--output", str(corpus / "killed")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        answers = cache / "responses"
        while len(list(answers.rglob("*.json"))) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL  # killed, not finished
    cached = len(list(answers.rglob("*.json")))
    assert 3 <= cached < total and not (corpus / "killed" / "manifest.json").exists()
    with ScriptedLLM() as rest:
        run(_spec(rest.url, cache=str(cache)), corpus / "in", corpus / "restarted", spec_dir=str(corpus))
    assert len(rest.requests) == total - cached
    assert _hashes(corpus / "restarted") == _hashes(corpus / "clean")
