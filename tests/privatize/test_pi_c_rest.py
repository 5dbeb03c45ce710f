"""pi_c judging only what pi leaves in the clear (``pi_c.scope: rest``), and the CRT recipe
that routes masked sentences public on it (``crt_stages(masked="public")``), issue 50.

The detector tests use a hand-made calibrated model (digit runs score 0.5, everything else
about 0), so that what flags a record is known without the shipped model's weights."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest
from pydantic import ValidationError

from experiments.pic_fit import rest_routing, rest_secret_score
from privatize.recipes import SPECS, crt_stages
from privatize.redaction.calibration import PiCModel, calibrate, clopper_pearson_upper, load_model
from privatize.stages.redact import Redact, RedactSettings

EMAIL = "Write to jane.doe@example.com today."  # pi removes the address; no digit is left
EMAIL_ROOM = "Write to jane.doe@example.com about room 12."  # a digit run outside pi's span
ROOM = "Room 12 is free."  # no pi hit, a digit run
PLAIN = "The weather is nice."


@pytest.fixture
def digits_model(tmp_path) -> str:
    """Digit runs score sigmoid(0) = 0.5, any other candidate sigmoid(-50): thresholds 0.25."""
    cal = {"target": 0.02, "confidence": 0.95, "misses": 0, "n_secret": 100, "bound": clopper_pearson_upper(0, 100),
           "data": ["hand-made for tests"], "gamma": 0.04}
    rest_cal = {**cal, "misses": 1, "bound": clopper_pearson_upper(1, 100)}  # told apart from the record's
    meta = {"calibration": cal, "rest": {"threshold": 0.25, "calibration": rest_cal},
            "domains": {"toy": {"threshold": 0.25, "calibration": cal}}}  # no rest threshold for "toy"
    path = tmp_path / "digits.json"
    PiCModel({"digits": 50.0}, -50.0, 0.25, meta).save(path)
    load_model.cache_clear()
    return str(path)


def _route(texts, model, scope, **settings):
    st = Redact(RedactSettings(operator="mask", pi_c={"policy": "calibrated", "calibration": model, "scope": scope},
                               **settings))
    st.setup()
    return st.process_batch(pa.table({"text": texts})).to_pylist()


def test_rest_scope_does_not_count_what_pi_removed(digits_model):
    texts = [EMAIL, EMAIL_ROOM, ROOM, PLAIN]
    record = _route(texts, digits_model, "record")
    rest = _route(texts, digits_model, "rest")
    assert [o["pi_hit"] for o in rest] == [True, True, False, False]
    assert [o["text"] for o in rest] == [o["text"] for o in record]  # pi itself is the same
    # the paper's routing: a record pi removed something from is flagged, by pi
    assert [(o["pi_c_hit"], o["pi_c_by"]) for o in record] == [(True, "pi"), (True, "pi"), (True, "digits"),
                                                               (False, None)]
    # the rest: only the digit run pi left in the clear flags its record
    assert [(o["pi_c_hit"], o["pi_c_by"]) for o in rest] == [(False, None), (True, "digits"), (True, "digits"),
                                                             (False, None)]


def test_a_hit_miss_share_leaves_in_the_clear_flags_the_rest(digits_model):
    texts = [f"Write to user{i}x@example.com today." for i in range(40)]  # the digits sit inside pi's span
    out = _route(texts, digits_model, "rest", miss_share=0.5, miss_seed=3)
    missed = [o["_stat.pi_missed"] > 0 for o in out]
    assert 5 < sum(missed) < 35  # both cases occur
    assert [(o["pi_c_hit"], o["pi_c_by"]) for o in out] == [(True, "pi") if m else (False, None) for m in missed]


def test_rest_scope_needs_a_rest_calibration(digits_model):
    st = Redact(RedactSettings(operator="mask", pi_c={"policy": "calibrated", "calibration": digits_model,
                                                      "scope": "rest", "domain": "toy"}))
    with pytest.raises(ValueError, match="pi_c.scope: rest needs a threshold calibrated on what pi leaves"):
        st.setup()
    with pytest.raises(ValidationError):
        RedactSettings(pi_c={"scope": "sentence"})
    assert RedactSettings(pi_c={"scope": "rest"}).pi_c.policy == "calibrated"  # a scope is no signal switch


def test_strict_rest_drops_only_signals_inside_pi_spans():
    st = Redact(RedactSettings(operator="mask", pi_c={"policy": "strict", "scope": "rest", "capitalized": False}))
    st.setup()
    out = st.process_batch(pa.table({"text": ["write to jane.doe@example.com today.",
                                              "write to jane.doe@example.com about room 12."]})).to_pylist()
    assert [o["pi_hit"] for o in out] == [True, True]
    assert [(o["pi_c_hit"], o["pi_c_by"]) for o in out] == [(False, None), (True, "signal")]


# ---- the calibration of the rest threshold ------------------------------------------------

def _row(secret, pi_miss, cands):
    """An evidence row of ``experiments.pic_fit``: candidates (feature, inside a pi span)."""
    return {"secret": secret, "pi_miss": pi_miss, "cands": [("digits", [f], 0) for f, _ in cands],
            "in_pi": [int(inside) for _, inside in cands]}


def test_rest_calibration_by_hand():
    m = PiCModel({"hi": 52.0, "mid": 50.0}, -50.0, 0.25)  # "hi": sigmoid(2) = 0.881, "mid": 0.5, else ~0
    rows = [
        _row(True, False, [("hi", True)]),    # pi removed every secret: never a miss (inf)
        _row(True, True, [("hi", True)]),     # readable secret, its only candidate inside pi: no score (None)
        _row(True, True, [("mid", False)]),   # readable, 0.5 outside pi
        _row(True, True, [("hi", False), ("mid", True)]),  # readable, 0.881 outside (0.5 inside does not count)
        _row(False, False, [("mid", False)]),  # secret-free, 0.5 outside: public below 0.5
        _row(False, False, [("hi", True)]),    # secret-free, a candidate inside pi only: public at any threshold
    ]
    scores = [rest_secret_score(m, r) for r in rows if r["secret"]]
    assert scores[0] == math.inf and scores[1] is None
    assert scores[2] == pytest.approx(0.5) and scores[3] == pytest.approx(1 / (1 + math.exp(-2)))
    # 4 secret sentences, 1 unavoidable miss: a target of 0.99 allows 3 misses (bound 1.0 > 0.99 at 4 of 4)
    cal = calibrate(scores, target=0.99)
    assert cal.misses == 3 and cal.threshold == 1.0  # every scored one may be missed: nothing flags
    r = rest_routing(m, rows, 0.6)  # 0.5 public, 0.881 private
    assert (r["secret"], r["secret_free"], r["public"], r["misses"]) == (4, 2, 5, 2)
    assert r["efficiency"] == 1.0 and r["miss_upper95"] == pytest.approx(clopper_pearson_upper(2, 4))
    r = rest_routing(m, rows, 0.4)  # both scored ones flag
    assert (r["public"], r["misses"], r["efficiency"]) == (3, 1, 0.5)


def test_the_shipped_model_has_rest_thresholds_with_their_bounds():
    m = load_model()
    blocks = {"default": m.meta["rest"], **{d: v["rest"] for d, v in m.meta["domains"].items()}}
    for name, b in blocks.items():
        c = b["calibration"]
        assert c["bound"] == pytest.approx(clopper_pearson_upper(c["misses"], c["n_secret"])), name
        assert "50-74 of 100" in " ".join(c["data"]), name  # the calibration part, apart from fitting
    assert m.threshold_for(None, "rest") == min(v["rest"]["threshold"] for v in m.meta["domains"].values())
    # the beside candidates' own fit, recorded: its weights are the file's beside features
    assert m.meta["beside_fit"]["weights"] == sum(f == "beside" or f.startswith("beside:") for f in m.weights) > 1
    s = m.summary("clinical", "rest")
    assert s["scope"] == "rest" and s["delta_2"] == m.meta["domains"]["clinical"]["rest"]["calibration"]["bound"]


# ---- the recipe --------------------------------------------------------------------------

def test_crt_stages_masked_public_changes_only_the_routing():
    import yaml

    on_disk = yaml.safe_load((SPECS / "crt.yaml").read_text())["stages"]
    got = crt_stages(masked="public", operator="mask", pi_c="strict")
    assert got[1] == {"kind": "redact", "operator": "mask", "pi_c": {"policy": "strict", "scope": "rest"}}
    assert got[2] == {**on_disk[2], "clean_flags": ["pi_c_hit"]}
    assert got[3] == {**on_disk[3], "flags": ["dedup_hit", "pi_c_hit"]}
    assert got[0] == on_disk[0]
    assert crt_stages(operator="mask") == crt_stages(masked="private", operator="mask")
    with pytest.raises(ValueError, match="masked must be 'private' or 'public'"):
        crt_stages(masked="sometimes")


def test_masked_sentences_go_public_when_nothing_is_left(digits_model, tmp_path):
    """The whole recipe in process: a masked sentence with a clean rest, and its repeats,
    are public under ``masked: public``; the one with a digit left is private; under the
    paper's routing every masked sentence is private."""
    from privatize import run

    import privatize.stages.redact  # noqa: F401 - registered before the spec is parsed

    corpus = tmp_path / "c.jsonl"
    docs = [f"{EMAIL} {EMAIL} {EMAIL_ROOM} {PLAIN}"]
    corpus.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(docs)))
    got = {}
    for masked in ("private", "public"):
        pic = {"policy": "calibrated", "calibration": digits_model}
        spec = {"stages": crt_stages(masked=masked, operator="mask", pi_c=pic), "output": {"num_shards": 1}}
        m = run(spec, corpus, tmp_path / masked, runner="local")
        import pyarrow.parquet as pq

        rows = pq.read_table(next((tmp_path / masked / "shards").glob("*.parquet"))).to_pylist()
        got[masked] = [(r["text"], r["private"]) for r in sorted(rows, key=lambda r: r["start"])]
        assert m["split"]["pi_c"]["scope"] == ("rest" if masked == "public" else "record")
        # delta_2 is the bound of the scope that routed: the rest calibration's under masked: public
        assert m["quality"]["delta_2"] == m["split"]["pi_c"]["delta_2"] == clopper_pearson_upper(
            1 if masked == "public" else 0, 100)
        assert ("scope rest" in m["quality"]["source"]) == (masked == "public")
    masked_text = "Write to <MASK> today."
    assert got["private"] == [(masked_text, True), ("<MASK>", True), ("Write to <MASK> about room 12.", True),
                              (PLAIN, False)]
    assert got["public"] == [(masked_text, False), (masked_text, False), ("Write to <MASK> about room 12.", True),
                             (PLAIN, False)]


def test_the_manifests_gamma_counts_the_hits_miss_share_leaves_readable(digits_model, tmp_path):
    """An experiment's ``miss_share`` leaves that share of pi's hits readable on top of what
    pi misses by itself: the manifest's gamma, which the CRT report charges, is
    1 - (1 - gamma_pi)(1 - miss_share), not the calibration's gamma alone."""
    from privatize import run

    import privatize.stages.redact  # noqa: F401 - registered before the spec is parsed

    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "0", "text": f"{EMAIL} {PLAIN}"}) + "\n")
    pic = {"policy": "calibrated", "calibration": digits_model}
    got = {}
    for share in (0.0, 0.25):
        spec = {"stages": crt_stages(operator="mask", pi_c=pic, miss_share=share, miss_seed=0),
                "output": {"num_shards": 1}}
        got[share] = run(spec, corpus, tmp_path / str(share), runner="local")["quality"]
    assert got[0.0]["gamma"] == 0.04 and "miss_share" not in got[0.0]["source"]
    assert got[0.25]["gamma"] == pytest.approx(1 - 0.96 * 0.75)  # 0.28
    assert "miss_share 0.25" in got[0.25]["source"]
    assert got[0.25]["delta_2"] == got[0.0]["delta_2"]


def test_beside_candidates_are_the_content_words_next_to_a_removed_span():
    from privatize.redaction.evidence import iter_beside

    text = "Their address is the grafton centre , east road , cb11ps . Call us."
    removed = [(21, 35, "LOCATION"), (50, 56, "UK_POSTCODE")]  # "grafton centre", "cb11ps"
    got = {text[a:b]: f for a, b, kind, f in iter_beside(text, removed, "chat")}
    # up to 3 words each side within the clause (stop at "."), function words skipped, each word once
    assert list(got) == ["address", "east", "road"]
    assert {"beside:LOCATION", "beside:r1", "beside:sep=comma", "beside:case=low"} <= set(got["east"])
    assert {"beside:l3", "beside:sep=space"} <= set(got["address"])
    assert all(f.startswith("beside") for fs in got.values() for f in fs)  # fitted apart from the record scope


def test_the_record_scope_never_scores_beside_candidates(tmp_path):
    """A model that scores beside candidates 1 and everything else 0: asked for its whole
    evidence, the record scope builds beside candidates (for fitting) but scores none of
    them, while the rest scope flags on them."""
    from privatize.redaction.detect import Detector, PiCOptions

    cal = {"target": 0.02, "confidence": 0.95, "misses": 0, "n_secret": 100, "bound": clopper_pearson_upper(0, 100),
           "data": ["hand-made for tests"]}
    path = tmp_path / "beside.json"
    PiCModel({"beside": 100.0}, -50.0, 0.25, {"calibration": cal, "rest": {"threshold": 0.25, "calibration": cal},
                                              "domains": {}}).save(path)
    load_model.cache_clear()
    text = "Write to jane.doe@example.com about the garden party."
    record = Detector(pi_c=PiCOptions(policy="calibrated", calibration=str(path))).detect(
        [text], want_intervals=True, want_evidence=True)[0]
    assert any(kind == "beside" for *_, kind, _ in record.evidence)  # built, for fitting
    assert record.pi_c_score < 0.25 and record.pi_c_by == "pi"  # none scored
    assert record.pi_c_intervals == [(sp["start"], sp["end"]) for sp in record.spans]
    rest = Detector(pi_c=PiCOptions(policy="calibrated", calibration=str(path), scope="rest")).detect(
        [text], want_intervals=True)[0]
    assert rest.pi_c_by == "beside" and rest.pi_c_score > 0.99
    assert {text[a:b] for a, b in rest.pi_c_intervals} == {"Write", "garden"}  # within 3 words: "party" is 4th


def test_rest_refuses_value_carrying_tokens_and_dedup_keeps_pi_c():
    from privatize.stages.dedup import DedupSettings

    with pytest.raises(ValidationError, match="needs operator mask, tag or surrogate"):
        RedactSettings(operator="encrypt", key="file:k.key", pi_c={"scope": "rest"})
    with pytest.raises(ValueError, match="needs operator mask, tag or surrogate"):
        crt_stages(masked="public", operator="encrypt", key="file:k.key")
    with pytest.raises(ValidationError, match="clean_flags must include pi_c_hit"):
        DedupSettings(skip_clean=True, clean_flags=["pi_hit"])
    with pytest.raises(ValidationError, match="clean_flags applies with skip_clean only"):
        DedupSettings(clean_flags=["pi_c_hit"])  # silently ignored before
    DedupSettings(clean_flags=["pi_c_hit", "pi_hit"])  # the default, as specs written since session 48 hold it


def test_a_spec_at_the_defaults_keeps_its_form_and_hash():
    """The rest scope's fields left at their defaults do not enter the spec's dict (nor so
    its hash): specs written before them hash as they did."""
    import privatize.stages.redact  # noqa: F401
    from privatize.spec import parse_spec

    spec = parse_spec({"version": 1, "stages": crt_stages(operator="mask")})
    d = spec.to_dict()
    assert "scope" not in d["stages"][1]["pi_c"] and "clean_flags" not in d["stages"][2]
    rest = parse_spec({"version": 1, "stages": crt_stages(masked="public", operator="mask")}).to_dict()
    assert rest["stages"][1]["pi_c"]["scope"] == "rest" and rest["stages"][2]["clean_flags"] == ["pi_c_hit"]


def test_left_readable_counts_a_letter_or_digit_outside_every_removed_span():
    """What the rest scope must catch, by hand: a secret pi removed in part keeps the part
    it left; punctuation and spaces left over are not readable."""
    from privatize.redaction.spans import left_readable

    text = "Call 555-0100 at 12 Lion Yard."
    phone, street = (5, 13, "PHONE"), (17, 29, "ADDRESS")
    assert not left_readable(text, [phone], [(5, 13)])
    assert not left_readable(text, [phone], [(5, 8), (9, 13)])  # only the hyphen is left
    assert left_readable(text, [phone], [(5, 12)])  # the last "0" is left
    assert left_readable(text, [phone, street], [(5, 13), (17, 19)])  # "Lion Yard" is left
    assert not left_readable(text, [phone, street], [(5, 13), (17, 29)])
    assert not left_readable(text, [], [])


def test_a_threshold_calibrated_on_several_corpora_states_its_worst_corpus_bound(tmp_path):
    """The default threshold is for text of unknown kind: its delta_2 is the largest of its
    per-corpus bounds, not the pooled one (which holds for that mix of corpora only)."""
    a, b = clopper_pearson_upper(0, 182), clopper_pearson_upper(3, 600)  # 1.63%, 1.29%
    pooled = clopper_pearson_upper(3, 782)
    per = {"a": {"miss_upper95": a}, "b": {"miss_upper95": b}}
    cal = {"target": 0.02, "confidence": 0.95, "misses": 3, "n_secret": 782, "bound": pooled, "data": ["a", "b"]}
    meta = {"calibration": {**cal, "per_corpus": per, "gamma": 0.05}, "rest": {"threshold": 0.3, "calibration": cal},
            "domains": {"a": {"threshold": 0.2, "calibration": {**cal, "bound": a, "gamma": 0.08}},
                        "b": {"threshold": 0.3, "calibration": {**cal, "bound": b, "gamma": 0.03}}}}
    PiCModel({"digits": 50.0}, -50.0, 0.25, meta).save(tmp_path / "m.json")
    load_model.cache_clear()
    m = load_model(str(tmp_path / "m.json"))
    assert pooled < b < a
    s = m.summary()
    assert s["delta_2"] == a and s["delta_2_pooled"] == pooled
    # and gamma the largest of the corpora's own (a: 0.08), the pooled 0.05 beside it
    assert s["gamma"] == 0.08 and s["gamma_pooled"] == 0.05
    assert m.summary("b")["gamma"] == 0.03 and m.summary("b")["gamma_pooled"] is None
    # a model whose domains do not cover its corpora never states less than the pooled gamma
    meta["domains"].pop("a")
    PiCModel({"digits": 50.0}, -50.0, 0.25, meta).save(tmp_path / "m2.json")
    load_model.cache_clear()
    assert load_model(str(tmp_path / "m2.json")).summary()["gamma"] == 0.05
    # without per-corpus figures (this rest block, a domain's own) the block's bound is stated
    assert m.summary(None, "rest")["delta_2"] == pooled and m.summary(None, "rest")["delta_2_pooled"] is None
    assert m.summary("a")["delta_2"] == a and m.summary("a")["delta_2_pooled"] is None
