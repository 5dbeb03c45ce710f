"""Paper 003's identifier metrics as a part of ``privatize attack``: the config section,
the sources' checks (one-line errors naming the field), the run on a real (tiny,
untrained) checkpoint against an oracle (the metric functions of
``attacks.identifiers``, hand-checked in test_identifier_eval.py, called directly on
the same records and model), and the report's section, which shows counts and rates but
never an identifier term."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attacks.config import parse_config
from attacks.data import read_identifier_records
from attacks.report import render_report
from attacks.results import Evaluation, IdentifierLeakage, ModelResult, PerplexityResult, from_dict, to_json
from privatize.errors import SpecError
from privatize.stages.identifiers import SPANS_TYPE, IdentifiersSettings

# every identifier term below; none may reach the report
TERMS = ("Ann Lee", "kayak", "oboe", "zither", "harp", "Cy Dunn")


def _span(text: str, term: str, kind: str) -> dict:
    start = text.index(term)
    return {"start": start, "end": start + len(term), "kind": kind, "term": term if kind == "direct" else term.lower()}


def _row(doc_id: str, who: str | None, text: str, ids: list[tuple[str, str]]) -> dict:
    return {"doc_id": doc_id, "text": text, "individual_id": who,
            "identifier_spans": [_span(text, t, k) for t, k in ids]}


MEMBERS = [_row("1", "p-ann", "Ann Lee paddles a red kayak.", [("Ann Lee", "direct"), ("kayak", "indirect")]),
           _row("2", "p-ann", "The weather is fine today.", []),
           _row("3", "p-bob", "I play the oboe and the zither.", [("oboe", "indirect"), ("zither", "indirect")])]
# doc ids repeat the members' on purpose: the run must keep the two sides apart
NON_MEMBERS = [_row("1", "p-cy", "Cy Dunn bought a kayak.", [("Cy Dunn", "direct"), ("kayak", "indirect")]),
               _row("2", "p-dee", "She plays the harp at noon.", [("harp", "indirect")])]


def _output(folder, rows: list[dict], drop: str | None = None):
    """A privatization output folder (``shards/*.parquet``) holding ``rows``."""
    cols = {"doc_id": pa.array([r["doc_id"] for r in rows], pa.string()),
            "text": pa.array([r["text"] for r in rows], pa.string()),
            "individual_id": pa.array([r["individual_id"] for r in rows], pa.string()),
            "identifier_spans": pa.array([r["identifier_spans"] for r in rows], SPANS_TYPE)}
    cols.pop(drop, None)
    (folder / "shards").mkdir(parents=True)
    pq.write_table(pa.table(cols), folder / "shards" / "shard-00000.parquet")
    return folder


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny Llama (random weights) and a byte-level BPE tokenizer, saved as a Hugging
    Face folder: what ``privatize train`` writes, without the training."""
    from train.models import build_model, preset_config
    from train.tokenizer import special_ids, train_tokenizer

    texts = [r["text"] for r in MEMBERS + NON_MEMBERS] * 20
    tok = train_tokenizer(texts, 300)
    d = tmp_path_factory.mktemp("model")
    build_model(preset_config("tiny", vocab_size=len(tok), **special_ids(tok)), seed=1).save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture
def work(tmp_path, checkpoint):
    _output(tmp_path / "members", MEMBERS)
    _output(tmp_path / "held", NON_MEMBERS)
    (tmp_path / "model").symlink_to(checkpoint)
    return tmp_path


def _cfg(w, **identifiers) -> dict:
    spec = {"members": str(w / "members"), "non_members": str(w / "held"), **identifiers}
    return {"version": 1, "models": [{"name": "tiny", "path": str(w / "model")}], "identifiers": spec,
            "output": str(w / "out")}


def _records(rows, tag):
    from attacks.identifiers import Record

    return [Record(f"{tag}/{r['doc_id']}", r["individual_id"], r["text"], r["identifier_spans"]) for r in rows]


# -- config and sources ------------------------------------------------------------------


def test_config_section_and_its_settings():
    cfg = parse_config({"models": [{"name": "m", "path": "p"}], "identifiers": {"members": "runs/x", "case": "keep",
                                                                                "digits": "zero", "samples": 0}})
    s = cfg.identifiers
    assert (s.non_members, s.samples, s.max_new_tokens, s.limit) == (None, 0, 48, None)
    assert s.settings() == IdentifiersSettings(direct="none", max_n=3, case="keep", digits="zero")
    with pytest.raises(SpecError, match=r"config: identifiers\.k: "):
        parse_config({"models": [{"name": "m", "path": "p"}], "identifiers": {"members": "x", "k": 2}})
    with pytest.raises(SpecError, match=r"config: identifiers\.case: "):
        parse_config({"models": [{"name": "m", "path": "p"}], "identifiers": {"members": "x", "case": "lower"}})
    with pytest.raises(SpecError, match=r"config: identifiers\.members: "):
        parse_config({"models": [{"name": "m", "path": "p"}], "identifiers": {"samples": 1}})


def test_records_are_read_and_sampled(work):
    recs = read_identifier_records(str(work / "members"), what="identifiers.members")
    assert [(r.doc_id, r.individual) for r in recs] == [("1", "p-ann"), ("2", "p-ann"), ("3", "p-bob")]
    assert recs[0].spans[1] == {"start": 22, "end": 27, "kind": "indirect", "term": "kayak"} and recs[1].spans == []
    two = read_identifier_records(str(work / "members"), limit=2, seed=3)
    assert len(two) == 2 and two == read_identifier_records(str(work / "members"), limit=2, seed=3)
    lines = [json.dumps({"id": r["doc_id"], **{k: v for k, v in r.items() if k != "doc_id"}}) for r in MEMBERS]
    (work / "m.jsonl").write_text("".join(line + "\n" for line in lines))
    assert read_identifier_records(str(work / "m.jsonl")) == recs  # JSONL with "id" instead of doc_id


def test_sources_without_identifiers_or_individuals_fail_in_one_line(work):
    from attacks.run import prepare

    bare = _output(work / "bare", MEMBERS, drop="identifier_spans")
    anonymous = _output(work / "anon", [{**r, "individual_id": None} for r in MEMBERS])
    some = _output(work / "some", [MEMBERS[0], {**MEMBERS[2], "individual_id": ""}])
    overlap = _output(work / "overlap", [*NON_MEMBERS, {**NON_MEMBERS[1], "doc_id": "9", "individual_id": "p-bob"}])

    def fails(match, **change):
        with pytest.raises(SpecError, match=match) as e:
            prepare(parse_config(_cfg(work, **change)))
        assert "\n" not in str(e.value)
        assert not (work / "out").exists()

    fails(rf"^identifiers\.members: {re.escape(str(bare))} has no column identifier_spans \(run the identifiers "
          r"stage\)$", members=str(bare))
    fails(rf"^identifiers\.non_members: {re.escape(str(anonymous))}: individual_id is empty: run the pipeline "
          r"with output\.pseudonym_key so individuals stay distinguishable$", non_members=str(anonymous))
    fails(r"^identifiers\.members: .*individual_id is empty in 1 of 2 records$", members=str(some))
    fails(r"^identifiers\.non_members: 1 of its individuals are also in identifiers\.members", non_members=str(overlap))
    fails(r"^identifiers\.members: .*gone does not exist$", members=str(work / "gone"))
    (work / "t.txt").write_text("a text\n")
    fails(r"^identifiers\.members: .*t\.txt has no column identifier_spans", members=str(work / "t.txt"))


# -- the run -----------------------------------------------------------------------------


def test_the_run_gives_the_figures_of_the_metric_functions(work):
    from attacks.identifiers import leaks, loss_mia, low_cost_mia, privacy
    from attacks.model import ModelAdapter
    from attacks.run import run_evaluation

    ev = run_evaluation(parse_config(_cfg(work, samples=1)), progress=False)
    x = ev.models[0].identifiers
    assert (x.records, x.individuals, x.samples, x.non_member_records, x.non_member_individuals) == (3, 2, 1, 2, 2)
    # the oracle: the same functions on the same records and model, called by hand
    st = IdentifiersSettings(direct="none")
    adapter = ModelAdapter.load(work / "model")
    members, held = _records(MEMBERS, "m"), _records(NON_MEMBERS, "n")
    found = leaks(adapter, members, st, samples=1)
    assert x.privacy == privacy(members, found, st)
    audit = leaks(adapter, members + held, st, samples=0)
    assert x.low_cost_mia == low_cost_mia(members + held, audit, {"p-ann", "p-bob"})
    assert x.loss_mia.auc == pytest.approx(loss_mia(members + held, audit, {"p-ann", "p-bob"}).auc)
    assert x.privacy["direct"]["identifiers"] == 1 and x.privacy["indirect"]["identifiers"] == 3
    back = from_dict(json.loads((work / "out" / "evaluation.json").read_text()))
    assert back.models[0].identifiers == x
    page = (work / "out" / "report.html").read_text()
    assert "Identifiers (paper 003)" in page and not any(t.lower() in page.lower() for t in TERMS)


def test_without_non_members_only_privacy(work):
    from attacks.run import run_evaluation

    cfg = _cfg(work, samples=0)
    del cfg["identifiers"]["non_members"]
    x = run_evaluation(parse_config(cfg), progress=False).models[0].identifiers
    assert x.low_cost_mia is None and x.loss_mia is None and x.non_member_individuals == 0
    assert x.privacy["indirect"]["regurgitated"] == 0  # no generations


# -- the report --------------------------------------------------------------------------


def _leakage() -> IdentifierLeakage:
    from attacks.metrics import roc_result

    return IdentifierLeakage(
        records=120, individuals=40, samples=2,
        privacy={"direct": {"identifiers": 50, "predicted": 4, "regurgitated": 2, "leaked": 5, "privacy": 0.9},
                 "indirect": {"identifiers": 300, "predicted": 30, "regurgitated": 9, "leaked": 36, "privacy": 0.88},
                 "all": {"identifiers": 350, "leaked": 41, "privacy": 1 - 41 / 350}},
        non_member_records=110, non_member_individuals=200,
        low_cost_mia={"individuals": 240, "members": 40, "guessed_members": 30, "precision": 0.6, "recall": 0.45,
                      "f1": 0.514},
        loss_mia=roc_result("loss (per individual)", np.linspace(0, 1, 40), np.linspace(-0.5, 0.7, 200)))


def test_report_section_shows_rates_never_terms():
    plain = ModelResult("plain", "runs/plain", attacks={"identifiers": _leakage()})
    bare = ModelResult("no-ids", "runs/bare", attacks={"perplexity": PerplexityResult(12.0)})
    ev = Evaluation("ev-ids", "2024-06-01T00:00:00Z", [plain, bare], notes=[])
    page = render_report(ev)
    assert page.count("Identifiers (paper 003)") == 1
    table = page.split('id="attack-identifiers"', 1)[1].split("<h2>", 1)[0]
    assert ">plain</a>" in table and "no-ids" not in table  # only models with results
    assert "0.883" in table and "(41 of 350 leaked)" in table  # Privacy overall
    assert "0.900" in table and "(5 of 50 leaked)" in table and 'title="predicted 4, regurgitated 2"' in table
    assert "0.880" in table and "(36 of 300 leaked)" in table
    assert "0.60 / 0.45 / 0.51" in table and f"{plain.identifiers.loss_mia.auc:.3f}" in table
    assert "200 neg.)" in table  # the TPR at 1% FPR, with the held-out individuals behind it
    assert "120 member records of 40 individuals (2 generations each)" in table
    assert "40 members vs 200 held-out individuals (110 records)" in table
    assert from_dict(json.loads(to_json(ev))) == ev
    alone = render_report(Evaluation("ev-x", "2024-06-01T00:00:00Z", [bare]))
    assert "Identifiers (paper 003)" not in alone and 'id="attack-identifiers"' not in alone


def test_report_without_membership_inference_and_kinds_not_found():
    x = IdentifierLeakage(records=3, individuals=2, samples=0,
                          privacy={"direct": {"identifiers": 0, "predicted": 0, "regurgitated": 0, "leaked": 0,
                                              "privacy": 1.0},
                                   "indirect": {"identifiers": 4, "predicted": 1, "regurgitated": 0, "leaked": 1,
                                                "privacy": 0.75},
                                   "all": {"identifiers": 4, "leaked": 1, "privacy": 0.75}})
    table = render_report(Evaluation("e", "t", [ModelResult("m", "p", attacks={"identifiers": x})])).split('id="attack-identifiers"')[1]
    table = table.split("<h2>", 1)[0]
    assert "(none found)" in table and "(1 of 4 leaked)" in table and "predictions only" in table
    assert "No held-out individuals given: no membership inference." in table
