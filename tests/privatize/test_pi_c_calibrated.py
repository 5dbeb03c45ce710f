"""The calibrated conservative policy pi_c (issue 50): the bound, the calibration rule, the
shipped model's provenance, what it routes on labelled real sentences, and ``pi_c: strict``
as the policy before it."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError

from experiments.gold_sentences import PARTS, load, part_of, sentences
from privatize.redaction.spans import left_readable
from privatize.redaction.calibration import (PiCModel, calibrate, clopper_pearson_upper, fit, load_model)
from privatize.stages.redact import Redact, RedactSettings

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
STRICT_ROUTING = Path(__file__).with_name("data") / "pi_c_strict_routing.json"


def need_data() -> Path:
    if not DATA.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{DATA} is missing under CI")
        pytest.skip(f"needs {DATA}")
    return DATA


# ---- the bound ------------------------------------------------------------------------

def _binom_cdf(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


def _upper_by_bisection(k: int, n: int, alpha: float = 0.05) -> float:
    """The p at which P(X <= k | n, p) = alpha, by bisection on the binomial CDF."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _binom_cdf(k, n, mid) > alpha else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("k,n", [(0, 10), (0, 100), (0, 707), (1, 10), (3, 182), (5, 582), (12, 1860)])
def test_clopper_pearson_upper_matches_the_binomial_tail(k, n):
    assert clopper_pearson_upper(k, n) == pytest.approx(_upper_by_bisection(k, n), abs=1e-9)


def test_clopper_pearson_closed_form_at_zero_misses():
    # P(X = 0) = (1 - p)^n = 0.05  =>  p = 1 - 0.05^(1/n): 0.2589 for n = 10, 0.02951 for n = 100
    assert clopper_pearson_upper(0, 10) == pytest.approx(1 - 0.05 ** 0.1, abs=1e-12)
    assert clopper_pearson_upper(0, 100) == pytest.approx(0.0295130, abs=1e-6)
    assert clopper_pearson_upper(4, 4) == 1.0
    with pytest.raises(ValueError):
        clopper_pearson_upper(5, 4)


# ---- the calibration rule -------------------------------------------------------------

def test_calibrate_takes_the_largest_threshold_within_the_target():
    # 300 secret sentences: 290 flagged by pi (inf), 9 scored, 1 with no candidate at all.
    scores = [math.inf] * 290 + [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8] + [None]
    # how many misses a 3% bound allows on 300, by hand from the binomial tail
    allowed = max(k for k in range(8) if _upper_by_bisection(k, 300) <= 0.03)  # the bound grows with k
    assert allowed == 3  # upper bounds: 3 of 300 -> 2.77%, 4 of 300 -> 3.27%
    cal = calibrate(scores, target=0.03)
    # the unavoidable miss plus the 2 lowest scores: the threshold is the 3rd lowest score
    assert cal.threshold == 0.2 and cal.misses == 3 and cal.n_secret == 300
    assert cal.bound == pytest.approx(_upper_by_bisection(3, 300), abs=1e-9) and cal.bound <= 0.03


def test_calibrate_refuses_a_target_the_data_cannot_show():
    with pytest.raises(ValueError, match="no threshold meets the target"):
        calibrate([math.inf] * 50 + [0.2], target=0.01)  # even 0 misses of 51: upper bound 5.7%


def test_fit_learns_a_separating_feature():
    rows = [(["a", "x"], 1)] * 40 + [(["b", "x"], 0)] * 40
    weights, bias = fit(rows, l2=0.1, min_count=3)
    m = PiCModel(weights, bias, 0.5)
    assert m.score(["a", "x"]) > 0.9 > 0.1 > m.score(["b", "x"])
    assert "rare" not in fit(rows + [(["rare"], 1)], min_count=3)[0]  # seen once: dropped


# ---- the shipped model ----------------------------------------------------------------

def test_the_shipped_model_records_disjoint_fit_and_calibration_parts():
    m = load_model()
    fit_ranges = {d.rsplit(": groups hashed to ", 1)[1] for d in m.meta["fit"]["data"]}
    cal_ranges = {d.rsplit(": groups hashed to ", 1)[1] for d in m.meta["calibration"]["data"]}
    assert fit_ranges == {"0-49 of 100"} and cal_ranges == {"50-74 of 100"}
    assert PARTS["fit"] == (0, 50) and PARTS["calibration"] == (50, 75)
    cal = m.meta["calibration"]
    assert cal["bound"] == pytest.approx(clopper_pearson_upper(cal["misses"], cal["n_secret"]))
    assert m.threshold == min(d["threshold"] for d in m.meta["domains"].values())
    for name, d in m.meta["domains"].items():
        c = d["calibration"]
        assert c["bound"] == pytest.approx(clopper_pearson_upper(c["misses"], c["n_secret"])), name
        assert m.threshold_for(name) == d["threshold"]


def test_parts_are_disjoint_and_keep_a_patient_in_one_part():
    groups = [str(i) for i in range(2000)]
    parts = {g: part_of("clinical", g) for g in groups}
    assert set(parts.values()) == set(PARTS)
    assert all(part_of("clinical", g) == parts[g] for g in groups)  # deterministic: one part per group
    share = sum(p == "fit" for p in parts.values()) / len(groups)
    assert 0.45 < share < 0.55


def test_settings_words_and_domains():
    assert RedactSettings().pi_c.policy == "calibrated"
    assert RedactSettings(pi_c="strict").pi_c.policy == "strict"
    assert RedactSettings(pi_c={"digits": False}).pi_c.policy == "strict"  # switches alone meant strict
    assert RedactSettings(pi_c={"domain": "clinical"}).pi_c.domain == "clinical"
    with pytest.raises(ValidationError, match="no calibration"):
        RedactSettings(pi_c={"domain": "astrology"})
    with pytest.raises(ValidationError, match="only used by policy 'calibrated'"):
        RedactSettings(pi_c={"policy": "strict", "domain": "clinical"})


def test_a_missing_model_file_is_a_clear_error(tmp_path):
    st = Redact(RedactSettings(pi_c={"policy": "calibrated", "calibration": str(tmp_path / "none.json")}))
    with pytest.raises(ValueError, match="no calibrated model at"):
        st.setup()
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a calibrated pi_c model"):
        load_model(str(bad))


# ---- routing on labelled real sentences -----------------------------------------------

def _route(texts: list[str], doc_styles: list[str] | None = None, **settings) -> list[dict]:
    st = Redact(RedactSettings(operator="mask", **settings))
    st.setup()
    cols = {"text": texts} | ({"doc_style": doc_styles} if doc_styles is not None else {})
    return st.process_batch(pa.table(cols)).to_pylist()


def test_secrets_pi_misses_are_still_routed_private_on_the_calibration_notes():
    """Every secret-holding clinical calibration sentence that pi leaves readable is
    flagged by the calibrated pi_c at its default threshold: the calibration allowed no
    avoidable miss there, and the stage (given each sentence's document style, as the CRT
    recipe's split stage records it) reproduces the fitting script's figure."""
    from privatize.redaction.styles import detect_style

    docs = [d for d in load("clinical", need_data()) if part_of("clinical", d.group) == "calibration"]
    pairs = [(s, detect_style(d.text)) for d in docs for s in sentences(d) if s.secret]
    sents = [s for s, _ in pairs]
    out = _route([s.text for s in sents], [st for _, st in pairs])  # as the recipe's split.doc_style gives them
    missed_by_pi = [o for s, o in zip(sents, out)
                    if left_readable(s.text, s.secrets, [(sp["start"], sp["end"]) for sp in o["spans"]])]
    # the case is exercised: pi does miss secrets here (10 or more before issue 51's clinical rules, 9 since)
    assert len(missed_by_pi) >= 5
    assert all(o["pi_c_hit"] for o in missed_by_pi)
    assert {o["pi_c_by"] for o in missed_by_pi} - {"pi"}  # some were caught by a candidate, not by pi
    m = load_model()
    rec = m.meta["calibration"]["per_corpus"]["clinical"]
    assert rec["secret"] == len(sents) and rec["misses"] == sum(not o["pi_c_hit"] for o in out) == 0


def test_strict_reproduces_the_routing_before_issue_50():
    """``pi_c: strict`` routes 450 real sentences exactly as the redact stage's defaults did
    at commit 4328ee4 (recorded in tests/privatize/data, sentences by position)."""
    data = need_data()
    rec = json.loads(STRICT_ROUTING.read_text())["sentences"]
    docs = {}
    for corpus in ("clinical", "multiwoz", "customersim"):
        for d in load(corpus, data, split="test"):
            docs[(corpus, d.id)] = d.text
    texts = [docs[(r["corpus"], r["doc"])][r["start"]:r["end"]] for r in rec]
    strict = _route(texts, pi_c="strict")
    assert [o["pi_c_hit"] for o in strict] == [r["pi_c_hit"] for r in rec]
    # pi itself is the redact stage's, which later issues change on purpose: its verdict is the
    # recorded one but where a rule since says otherwise (and strict still routes those the same)
    changed_since = {16: "issue 51: 'ST' before a stop word is the ST segment ('SR-ST ON MONITOR'), not a saint"}
    assert [o["pi_hit"] for o in strict] == [r["pi_hit"] != (i in changed_since) for i, r in enumerate(rec)]
    calibrated = _route(texts)
    # the calibrated policy flags a subset: never a record strict calls clean, fewer in all
    assert all(s["pi_c_hit"] for c, s in zip(calibrated, strict) if c["pi_c_hit"])
    assert sum(c["pi_c_hit"] for c in calibrated) < sum(s["pi_c_hit"] for s in strict)


def test_a_segment_is_read_in_its_documents_style():
    """A lone sentence of a nursing note does not look clinical; given its document's style
    (the split stage's ``doc_style``) the clinical rules keep shorthand from reading as
    names, and a style the detector does not know is judged from the text as before."""
    texts = ["ABD SOFT.", "FOLEY DRAINING.", "MAE."]
    alone = _route(texts, pi_c="strict")
    assert all(o["pi_hit"] for o in alone)  # read alone: "ABD SOFT" a PERSON, "MAE" an ORGANIZATION
    styled = _route(texts, ["clinical"] * 3, pi_c="strict")
    assert not any(o["pi_hit"] for o in styled) and all(o["text"] == t for o, t in zip(styled, texts))
    unknown = _route(texts, [None, "no-such-style", None], pi_c="strict")
    assert [o["pi_hit"] for o in unknown] == [o["pi_hit"] for o in alone]
    fixed = Redact(RedactSettings(operator="mask", style="general"))  # an explicit style wins over the column
    fixed.setup()
    assert all(o["pi_hit"] for o in fixed.process_batch(pa.table({"text": texts, "doc_style": ["clinical"] * 3}))
               .to_pylist())
