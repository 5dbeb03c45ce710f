"""Paper 003's metrics (issue 22): Privacy and the low-cost membership inference against
hand-computed answers, then every step of the evaluation end to end at tiny scale (plain
and PPCLM continual pre-training on CustomerSim dialogues; the claim that PPCLM gives
away fewer identifiers is the experiment's measurement)."""

import json
import math

from experiments.identifier_eval import IdentifierPlan, customersim_by_customer, evaluate, markdown, plot
from experiments.refill_eval import write_jsonl
from attacks.identifiers import Leaks, Record, low_cost_mia, privacy
from privatize.stages.identifiers import IdentifiersSettings, term_strings

ST = IdentifiersSettings(direct="none", max_n=2)


def _span(kind, term):
    return {"start": 0, "end": 1, "kind": kind, "term": term}


def test_privacy_and_low_cost_mia_by_hand():
    records = [Record("1", "ann", "x", [_span("indirect", "kayak"), _span("indirect", "red kayak"),
                                        _span("direct", "Ann Lee")]),
               Record("2", "ann", "x", [_span("indirect", "kayak")]),
               Record("3", "bob", "x", [_span("indirect", "oboe"), _span("direct", "Bob")]),
               Record("4", "cy", "x", [_span("indirect", "zither")])]
    found = Leaks(predicted={"1": set(), "2": {0}, "3": {1}, "4": {0}})
    found.regurgitated["indirect"] = {"oboe", "never seen"}
    p = privacy(records, found, ST)
    # indirect: kayak, red kayak, oboe, zither; predicted kayak (record 2) and zither,
    # regurgitated oboe ("never seen" is no identifier of these records)
    assert p["indirect"] == {"identifiers": 4, "predicted": 2, "regurgitated": 1, "leaked": 3, "privacy": 0.25}
    # direct: "ann lee", "bob"; Bob predicted in record 3
    assert p["direct"]["privacy"] == 0.5 and (p["all"]["identifiers"], p["all"]["leaked"]) == (6, 4)
    assert math.isclose(p["all"]["privacy"], 1 / 3)
    # members ann and bob; guessed: ann (kayak predicted), cy (zither); bob's only
    # prediction is a direct identifier, which the low-cost attack does not use
    mia = low_cost_mia(records, found, members={"ann", "bob"})
    assert (mia["precision"], mia["recall"]) == (0.5, 0.5) and math.isclose(mia["f1"], 0.5)


def test_term_strings_match_what_the_stage_writes():
    assert term_strings("Call me at 555-1234. Thanks!", ST) == {
        "call", "me", "at", "555-1234", "thanks", "call me", "me at", "at 555-1234"}


def test_the_evaluation_end_to_end_at_tiny_scale(shared_data, wikitext_docs, wikitext_base, tmp_path):
    """Every step of the evaluation (the identifiers stage over the members' and everyone's
    records, the plain and PPCLM continual pre-trainings in Ray Train, the attacks, the
    checks, the table and the plot) at 16 steps a model. Paper 003's claim itself (PPCLM
    gives away fewer identifiers) needs memorisation, 240 steps or more (at 120 one block's
    difference decided it, DIARY session 35): that is the experiment's measurement
    (``python -m experiments.identifier_eval``, RESULTS.md), not this test's; that PPCLM's
    identifier tokens carry no loss is unit-tested on the packer (tests/train/test_train_units.py)."""
    corpus = write_jsonl(customersim_by_customer(shared_data / "customersim" / "train.jsonl", 32), tmp_path / "c.jsonl")
    plan = IdentifierPlan(corpus=corpus, base_corpus=wikitext_docs["valid"], work=tmp_path / "eval",
                          base_model=wikitext_base, seq_len=128, batch_size=8, adapt_steps=16, samples=1)
    r = evaluate(plan, progress=False)
    g = r["graph"]
    assert g["direct_spans"] > 0 and g["indirect_spans"] > 0 and 0 < g["share_of_distinct_words"] < 1
    assert set(r["models"]) == {"base", "plain", "ppclm"} and 0 < r["members"] < r["individuals"]
    plain, pp = r["models"]["plain"], r["models"]["ppclm"]
    assert plain["privacy"]["indirect"]["identifiers"] > 0
    # the two runs differ only in what carries loss: PPCLM's data ignores every identifier
    # span, and in its Ray Train run the same batches carried fewer loss tokens than plain's
    runs = tmp_path / "eval" / "runs"
    summaries = {m: json.loads((runs / m / "summary.json").read_text()) for m in ("plain", "ppclm")}
    data = {m: s["config"]["data"] for m, s in summaries.items()}
    assert data["plain"].get("ignore_spans") is None
    assert data["ppclm"]["ignore_spans"] == "identifier_spans" and not data["ppclm"]["ignore_kinds"]
    assert summaries["plain"]["steps"] == summaries["ppclm"]["steps"] == 16
    assert 0 < summaries["ppclm"]["tokens"] < summaries["plain"]["tokens"]
    assert {"ppclm_indirect_privacy_higher", "ppclm_low_cost_mia_recall_lower"} <= set(r["checks"])
    for row in r["models"].values():
        assert math.isfinite(row["perplexity"]) and 0 <= row["loss_mia"]["auc"] <= 1
        assert 0 <= row["privacy"]["all"]["privacy"] <= 1
    assert "| PPCLM |" in markdown(r)
    assert plot(r, tmp_path / "p.png").stat().st_size > 10_000
