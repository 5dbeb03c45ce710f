"""The main job's held-out sentences (``deploy/main_job.py``): cut by the same rules as
the CRT recipe's split stage, each with its gold PII spans clipped to it and counted from
its start, so that perplexity can be split into the text around the PII and the PII."""

from __future__ import annotations

import importlib.util
import json
import re

from tests.conftest import ROOT


def _main_job():
    spec = importlib.util.spec_from_file_location("main_job", ROOT / "deploy" / "main_job.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TEXT = "SYS: Hello. May I have your name?\nUSR: Sure, Ann Lee. Call me at 555-1234 today.\nSYS: Thanks!"


def test_sentences_carry_their_gold_spans_by_hand(tmp_path):
    src, dst = tmp_path / "held.jsonl", tmp_path / "sent.jsonl"
    # "Ann Lee" (45-52), "555-1234" (65-73) and a span across a sentence end ("Lee. Call", 49-58)
    spans = [{"start": 45, "end": 52, "type": "NAME"}, {"start": 65, "end": 73, "type": "PHONE"},
             {"start": 49, "end": 58, "type": "TEST"}]
    src.write_text(json.dumps({"doc_id": "d", "text": TEXT, "spans": spans}) + "\n"
                   + json.dumps({"doc_id": "e", "text": "No PII here. None at all."}) + "\n")
    assert _main_job()._sentences_with_spans(src, dst) == 7
    rows = [json.loads(x) for x in dst.read_text().splitlines()]
    assert rows == [
        {"text": "SYS: Hello.", "spans": []},
        {"text": "May I have your name?", "spans": []},
        # starts at 34: Ann Lee is 11-18, "Lee." of the crossing span 15-19
        {"text": "USR: Sure, Ann Lee.", "spans": [{"start": 11, "end": 18}, {"start": 15, "end": 19}]},
        # starts at 54: the phone is 11-19, "Call" of the crossing span 0-4
        {"text": "Call me at 555-1234 today.", "spans": [{"start": 11, "end": 19}, {"start": 0, "end": 4}]},
        {"text": "SYS: Thanks!", "spans": []},
        {"text": "No PII here.", "spans": []},
        {"text": "None at all.", "spans": []},
    ]


def test_sentences_are_the_split_stages(tmp_path):
    """Oracle: the recipe's split stage, run in-process on the same documents, makes the
    same sentences (the models train on the stage's, perplexity is measured on these)."""
    from privatize.api import run
    from privatize.corpus import make_corpus
    from privatize.recipes import crt_split
    from train.data import read_texts

    src, dst = tmp_path / "held.jsonl", tmp_path / "sent.jsonl"
    make_corpus(src, n_docs=20, seed=3)
    n = _main_job()._sentences_with_spans(src, dst)
    run({"version": 1, "stages": [crt_split()], "output": {"num_shards": 1}}, src, tmp_path / "split")
    rows = [json.loads(x) for x in dst.read_text().splitlines()]
    assert n == len(rows) > 20
    assert [r["text"] for r in rows] == read_texts(str(tmp_path / "split"), "text")
    # every piece of a sentence's spans is (part of) a gold span, and all of every gold span
    # lands in some sentence (a span across a sentence end, "Apt. 483", is cut at the gap,
    # which is whitespace only)
    docs = [json.loads(x) for x in src.read_text().splitlines()]
    gold = [d["text"][s["start"]:s["end"]] for d in docs for s in d["spans"]]
    found = [r["text"][s["start"]:s["end"]] for r in rows for s in r["spans"]]
    assert len(found) > len(gold) > 20
    assert all(any(f in g for g in gold) for f in found)
    assert sum(len(re.sub(r"\s", "", g)) for g in gold) == sum(len(re.sub(r"\s", "", f)) for f in found)


def test_the_crt_routing_routes_a_masked_sentence_public_only_when_nothing_is_left(tmp_path):
    """The main job's CRT recipe (``CRT_ROUTING``: masked sentences public, the shipped pi_c
    at its default threshold, scope rest) parses and, run in process, sends the sentence
    whose e-mail pi masked to the public split, and to the private split the one whose code
    a seeded ``miss_share`` left readable (a secret pi missed) and a canary of the job's own
    format whose digits read as a date (``0603``: the support domain's threshold let it
    through, 20 copies public)."""
    import pyarrow.parquet as pq
    import pytest

    pytest.importorskip("presidio_analyzer")
    import privatize.stages.redact  # noqa: F401 - registered before the spec is parsed
    from privatize.api import run
    from privatize.recipes import crt_stages

    job = _main_job()
    src = tmp_path / "c.jsonl"
    src.write_text(json.dumps({"doc_id": "d", "text": "Please write to ann.lee@example.com about it. "
                                                      "The code is 88213. Thanks for waiting."}) + "\n"
                   + json.dumps({"doc_id": "c", "text": "My ID is: 0603"}) + "\n")
    stages = crt_stages(**job.CRT_ROUTING, miss_share=0.5, miss_seed=1)
    m = run({"version": 1, "stages": stages, "output": {"num_shards": 1}}, src, tmp_path / "out", runner="local")
    assert m["split"]["pi_c"]["domain"] == "any" and m["split"]["pi_c"]["scope"] == "rest"
    rows = {r["text"]: r["private"]
            for r in pq.read_table(next((tmp_path / "out" / "shards").glob("*.parquet"))).to_pylist()}
    assert rows == {"Please write to <MASK> about it.": False, "The code is 88213.": True,
                    "Thanks for waiting.": False, "My ID is: 0603": True}
