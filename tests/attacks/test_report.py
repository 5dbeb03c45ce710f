"""The privacy report: self-contained, escaped, round-trips its JSON, and its plots really draw.

The Chromium test screenshots the plots in a real browser: a PNG that decodes in Python can
still render blank (empty axes, a broken data URI), which only pixels show.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imread

from attacks.report import render_from_json, render_report, write_report
from attacks.results import (
    CanaryExposure,
    CipherOutputs,
    Evaluation,
    ExposureResult,
    ExtractionResult,
    MiaResult,
    ModelResult,
    PerplexityResult,
    SpanPerplexity,
    RocResult,
    SuccessRate,
    TprAtFpr,
    TrainingInfo,
    TruePrefixResult,
    from_dict,
    to_json,
)
from tests.conftest import need

PLOTS = ("roc", "exposure", "loss", "ppl-exposure", "ppl-auc")
HOSTILE = "<script>x</script>"


def _roc(score: str, auc: float, negatives: int) -> RocResult:
    """A power-law ROC (tpr = fpr ** b has AUC 1 / (1 + b)) sampled on a log grid."""
    b = 1 / auc - 1
    fpr = [0.0, *np.logspace(math.log10(1 / negatives), 0, 60).tolist()]
    tpr = [f ** b if f > 0 else 0.0 for f in fpr]

    def at(max_fpr: float) -> TprAtFpr:
        reached = math.floor(max_fpr * negatives) / negatives
        return TprAtFpr(max_fpr, reached ** b if reached else 0.0, reached, 1.0 if reached else None, negatives)

    return RocResult(score, auc, [at(0.01), at(0.001)], fpr, tpr)


def _exposure(digits: int, method: str, ranks: list[tuple[int, int]]) -> ExposureResult:
    """Canaries from (repeats, rank); exposure = log2|R| - log2 rank."""
    r = 10 ** digits
    canaries = [CanaryExposure(i, rep, rank, math.log2(r) - math.log2(rank)) for i, (rep, rank) in enumerate(ranks)]
    inserted = [c.exposure for c in canaries if c.repeats]
    refs = [c.exposure for c in canaries if not c.repeats]
    return ExposureResult("My ID is: {secret}", digits, r, method, "log P(digits | prefix)", canaries,
                          max(inserted), sum(inserted) / len(inserted), max(refs) if refs else None, 12.5)


def _ppl(perplexity: float) -> dict:
    return {"perplexity": PerplexityResult(perplexity)}


def _loss(start: float, end: float) -> list[list[float]]:
    return [[float(s), end + (start - end) * math.exp(-s / 300)] for s in range(0, 2001, 50)]


def _evaluation() -> Evaluation:
    plain = ModelResult(
        name="gpt2-small plain", path="runs/plain/final",
        training=TrainingInfo("continue", "none", loss_curve=_loss(3.9, 2.6)),
        attacks={
            "perplexity": PerplexityResult(18.7, "held-out test split (2,000 records)"),
            "canaries": _exposure(6, "exact", [(16, 1), (16, 1), (8, 3), (8, 40), (4, 900), (4, 2100), (2, 31000),
                                               (1, 120000), (0, 410000), (0, 77000), (0, 655000)]),
            "mia": MiaResult(1000, 1000, "whole record",
                             [_roc("loss", 0.71, 1000), _roc("zlib", 0.68, 1000), _roc("min_k", 0.74, 1000)],
                             group=_roc("loss", 0.93, 1000), group_size=10),
            "reconstruction": SuccessRate(200, 100, 46, 0.23),
            "true_prefix": TruePrefixResult(50, 20, 0.41, [0.3, 0.45, 0.48]),
            "extraction": ExtractionResult(500, 50, 0.5, 14, 31, 9, ["USR: my account number is … (truncated)"])},
        seconds=412.0)
    redacted = ModelResult(
        name=r"redacted ($\frac$ v2)", path="runs/redacted/final",
        training=TrainingInfo("continue", "redacted (Presidio, policy pi)", loss_curve=_loss(4.0, 2.75)),
        attacks={
            "perplexity": PerplexityResult(19.4, "held-out test split (2,000 records)"),
            "canaries": _exposure(6, "exact", [(16, 2200), (16, 5400), (8, 88000), (4, 301000), (1, 520000),
                                               (0, 380000), (0, 700000)]),
            "mia": MiaResult(1000, 1000, "whole record", [_roc("loss", 0.58, 1000), _roc("zlib", 0.56, 1000)]),
            "reconstruction": SuccessRate(200, 100, 3, 0.015),
            "true_prefix": TruePrefixResult(50, 20, 0.77, [0.7, 0.8]),
            "extraction": ExtractionResult(500, 50, 0.5, 2, 40, 2)})
    crt = ModelResult(
        name=HOSTILE, path="runs/crt/final",
        training=TrainingInfo("crt", "CRT (dedup+redact+DP on private)", epsilon=3.0, delta=1e-5,
                              confidentiality_epsilon=1.0, confidentiality_delta=1e-6, audit_epsilon=0.42,
                              audit_confidence=0.95, audit_guesses="61 of 100 guesses right on 1000 canaries",
                              unit="one record (12 in the DP split, up to 3 blocks of 32 tokens each; group privacy)",
                              confidentiality_basis="gamma claimed in the training config (a vendor's sheet)"),
        attacks={
            "perplexity": PerplexityResult(22.9, "held-out test split, entity tokens encrypted"),
            "canaries": _exposure(9, "extrapolated", [(16, 10 ** 7), (8, 4 * 10 ** 8), (0, 2 * 10 ** 8)]),
            "mia": MiaResult(50, 50, "USR: My name is {name}.", [_roc("loss", 0.52, 50),
                                                                 _roc("reference", 0.55, 50)]),
            "reconstruction": SuccessRate(200, 100, 1, 0.005),
            "extraction": ExtractionResult(500, 50, 0.5, 0, 12, 0),
            "cipher_outputs": CipherOutputs(3120, 418, 57, 22, 0.0183, 0)})
    return Evaluation("ev-2024-06-01-a1b2", "2024-06-01T12:00:00Z", [plain, redacted, crt],
                      corpus_stats={"train": {"unigram": 9.81, "2": 6.02}, "test": {"unigram": 9.77, "2": 6.1}},
                      notes=["Canary digits and member names are not part of this file."])


@pytest.fixture(scope="module")
def evaluation() -> Evaluation:
    return _evaluation()


@pytest.fixture(scope="module")
def page(evaluation) -> str:
    return render_report(evaluation)


def _images(page: str) -> dict[str, str]:
    """data-plot key -> src of each <img>; every image must carry an id, a key and alt text."""
    found = {}
    for tag in re.findall(r"<img\b[^>]*>", page):
        key = re.search(r'data-plot="([^"]+)"', tag).group(1)
        assert re.search(rf'id="plot-{key}"', tag) and re.search(r'alt="[^"]{10,}"', tag), tag[:200]
        found[key] = re.search(r'src="([^"]+)"', tag).group(1)
    return found


def test_page_is_self_contained(page):
    lowered = page.lower()
    for needle in ("http://", "https://", 'src="/', "src='/", "url(", "@import", "<script", "<link", "<iframe"):
        assert needle not in lowered, needle
    images = _images(page)
    assert set(images) == set(PLOTS)
    for src in images.values():
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")


def test_data_strings_are_escaped(page):
    assert HOSTILE not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page
    assert r"redacted ($\frac$ v2)" in page  # a mathtext-breaking name neither crashes the plots nor is lost


def test_privacy_cards_state_the_figures_and_their_support(page):
    assert page.count('class="card"') == 3
    assert "Each TPR figure is backed by 50 negatives (non-members). Not resolvable: 1% FPR needs ≥ 100" in page
    assert "Each TPR figure is backed by 1,000 negatives (non-members).</p>" in page
    assert page.count('class="warn"') == 1 + 2 * 2  # the comparison cell, then each CRT score at both FPRs
    assert "|R| = 1,000,000" in page and "|R| = 1,000,000,000" in page
    assert "exact" in page and "extrapolated" in page
    assert "ε = 3, δ = 1e-05" in page and "(ε, δ) = (1, 1e-06)" in page
    assert "audited ε ≥ 0.42 (95%)" in page and "61 of 100 guesses right on 1000 canaries" in page
    assert "Privacy unit</th><td>one record (12 in the DP split, up to 3 blocks" in page
    assert "gamma claimed in the training config (a vendor&#x27;s sheet)" in page
    assert "18.70" in page and "held-out test split (2,000 records)" in page
    assert "<b>14</b> of 500 generations" in page
    assert "failure ratio 1.83%" in page
    assert "group of 10" in page


def test_absent_data_is_said_not_plotted():
    bare = Evaluation("ev-bare", "2024-06-01T00:00:00Z",
                      [ModelResult("only-ppl", "runs/x", attacks={"perplexity": PerplexityResult(30.0, "test")})])
    page = render_report(bare)
    assert "<img" not in page
    assert all(f'data-plot-absent="{k}"' in page for k in PLOTS)
    assert "no model records a training loss curve" in page
    assert "no model results" in render_report(Evaluation("ev-empty", "2024-06-01T00:00:00Z", []))


def test_json_round_trip(evaluation):
    assert from_dict(json.loads(to_json(evaluation))) == evaluation


def test_write_report_and_render_from_json(tmp_path, evaluation, page):
    html_path = write_report(evaluation, tmp_path / "out")
    assert html_path == tmp_path / "out" / "report.html"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["evaluation.json", "report.html"]  # no temp left
    assert from_dict(json.loads((tmp_path / "out" / "evaluation.json").read_text())) == evaluation
    again = render_from_json(tmp_path / "out" / "evaluation.json", tmp_path / "again.html")
    assert again.read_text(encoding="utf-8") == html_path.read_text(encoding="utf-8") == page


def _screenshot(html: str, tmp_path: Path, name: str, width: int, height: int) -> np.ndarray:
    src = tmp_path / f"{name}.html"
    src.write_text(html, encoding="utf-8")
    shot = tmp_path / f"{name}.png"
    subprocess.run(
        [shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--hide-scrollbars", "--force-device-scale-factor=1", f"--user-data-dir={tmp_path / f'profile-{name}'}",
         f"--window-size={width},{height}", f"--screenshot={shot}", src.as_uri()],
        check=True, capture_output=True, timeout=120)
    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (height, width)
    return pixels


def _ink(region: np.ndarray) -> float:
    """Fraction of pixels visibly off the white page background."""
    return float((np.abs(region - 1.0).max(axis=-1) > 0.1).mean())


def _blank(region: np.ndarray) -> bool:
    return region.std() < 0.01 or _ink(region) < 0.01


def _white_png() -> str:
    fig = Figure(figsize=(2, 2))
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def test_plots_are_not_blank_in_chromium(tmp_path, page):
    need(shutil.which("chromium") is not None, "chromium not installed")
    # Each plot (and a white control, which the check must call blank) in its own known box.
    w, h, gap = 480, 300, 20
    sources = [*_images(page).items(), ("control-white", _white_png())]
    boxes = {key: (gap + (k % 2) * (w + gap), gap + (k // 2) * (h + gap)) for k, (key, _) in enumerate(sources)}
    imgs = "".join(f'<img alt="" src="{src}" style="position:absolute;left:{boxes[key][0]}px;top:{boxes[key][1]}px;'
                   f'width:{w}px;height:{h}px">' for key, src in sources)
    rows = math.ceil(len(sources) / 2)
    grid = _screenshot(f'<!DOCTYPE html><html><body style="margin:0;background:#fff">{imgs}</body></html>',
                       tmp_path, "grid", 2 * w + 3 * gap, rows * (h + gap) + gap)
    for key, (x, y) in boxes.items():
        region = grid[y + 2:y + h - 2, x + 2:x + w - 2]
        assert _blank(region) == (key == "control-white"), (key, region.std(), _ink(region))

    report = _screenshot(page, tmp_path, "report", 1280, 2400)
    assert not _blank(report) and _ink(report) > 0.03


def test_every_card_states_its_cost_of_protection_against_the_plain_model(page):
    """Issue 37: perplexity as a ratio to the unprotected model, on every card (hand-computed:
    19.4 / 18.7 = 1.0374, 22.9 / 18.7 = 1.2246)."""
    assert "+3.7% perplexity against gpt2-small plain" in page
    assert "+22.5% perplexity against gpt2-small plain" in page
    assert page.count("the reference: the other models") == 1
    assert page.count("Cost of protection") == 3
    assert "perplexity ÷ gpt2-small plain&#x27;s" not in page  # the axis label is in the PNG, not the page


def test_a_fine_tuned_model_names_its_base_and_without_a_reference_says_so(tmp_path):
    import json

    from attacks.results import training_info

    (tmp_path / "summary.json").write_text(json.dumps({
        "kind": "crt", "epsilon": 1.0, "delta": 1e-5,
        "base": {"checkpoint": "base-tiny", "kind": "pretrain", "preset": "tiny", "trained_on": "public text: WikiText-2"},
        "lora": {"r": 8, "alpha": 16.0, "target_modules": ["q_proj", "v_proj"]}}))
    info = training_info(str(tmp_path), "CRT")
    assert info.base == "base-tiny (pretrain of preset tiny), trained on public text: WikiText-2"
    assert info.lora == "LoRA r = 8, alpha = 16.0 on q_proj, v_proj (merged into the model)"
    page = render_report(Evaluation("e", "2026-11-27T00:00:00Z", [ModelResult("m", "runs/m", training=info,
                                                                                attacks=_ppl(40.0))]))
    assert "Base model" in page and "trained on public text: WikiText-2" in page and "LoRA r = 8," in page
    assert "no unprotected model with a perplexity in this evaluation to compare against" in page
    assert training_info("/nonexistent/run", None) is None


def test_the_marked_reference_wins_over_the_first_unprotected_model():
    from attacks.report_format import cost_of_protection, reference_model

    base = ModelResult("base", "runs/base", training=TrainingInfo("pretrain", "none: public text only"),
                       attacks=_ppl(90.0))
    plain = ModelResult("plain", "runs/plain", training=TrainingInfo("continue", "none"), attacks=_ppl(3.0),
                        reference=True)
    crt = ModelResult("crt", "runs/crt", training=TrainingInfo("crt", "CRT", epsilon=1.0, delta=1e-5),
                      attacks=_ppl(4.5))
    assert reference_model([base, plain, crt]) is plain
    assert reference_model([base, ModelResult("p", "x", training=TrainingInfo("continue", "none"),
                                                  attacks=_ppl(3.0))]) is base
    assert cost_of_protection(crt, plain) == "+50.0% perplexity against plain"
    assert cost_of_protection(base, plain) == "30.0x the perplexity of plain (+2900%)"
    assert cost_of_protection(ModelResult("r", "x", attacks=_ppl(2.7)), plain) == "-10.0% perplexity against plain"
    # with the secrets' spans, the cost outside them too (2.2 / 2.0 by hand)
    from attacks.results import SpanPerplexity

    plain.attacks["perplexity"].spans = SpanPerplexity(outside=2.0, inside=20.0, inside_tokens=10, tokens=50)
    crt.attacks["perplexity"].spans = SpanPerplexity(outside=2.2, inside=300.0, inside_tokens=10, tokens=50)
    assert cost_of_protection(crt, plain) == ("+50.0% perplexity against plain; +10.0% perplexity outside the "
                                              "secrets' spans against plain")
    page = render_report(Evaluation("e", "2026-11-28T00:00:00Z", [plain, crt]))
    assert "outside the secrets' spans <b>2.20</b>; on them 300.00" in page.replace("&#x27;", "'")
    assert "2.20 outside secrets" in page


def test_tradeoff_plots_add_a_hollow_point_outside_the_secrets():
    """With the secrets' spans, each model's point in the utility-vs-privacy plots gets a
    hollow twin at its perplexity ratio outside the spans (hand-computed: 2.2 / 2.0 = 1.1);
    without them, only the filled points."""
    from attacks.report_plots import _ppl_auc_figure, _ppl_exposure_figure
    from attacks.results import SpanPerplexity

    ev = _evaluation()
    plain, redacted, crt = ev.models
    plain.reference = True

    def points(fig) -> tuple[list, list]:
        filled, hollow = [], []
        for c in fig.axes[0].collections:
            (filled if len(c.get_facecolors()) else hollow).extend(map(tuple, np.round(c.get_offsets(), 6).tolist()))
        return sorted(filled), sorted(hollow)

    auc = {m.name: max(r.auc for r in m.mia.scores) for m in ev.models}
    filled, hollow = points(_ppl_auc_figure(ev.models))
    assert hollow == [] and [x for x, _ in filled] == sorted(round(m.perplexity / 18.7, 6) for m in ev.models)
    plain.attacks["perplexity"].spans = SpanPerplexity(outside=2.0, inside=20.0, inside_tokens=10, tokens=50)
    crt.attacks["perplexity"].spans = SpanPerplexity(outside=2.2, inside=300.0, inside_tokens=10, tokens=50)
    filled, hollow = points(_ppl_auc_figure(ev.models))
    assert hollow == sorted([(1.0, round(auc[plain.name], 6)), (1.1, round(auc[crt.name], 6))])
    assert len(filled) == 3  # redacted has no split: its filled point only
    _, hollow = points(_ppl_exposure_figure(ev.models))
    assert hollow == sorted([(1.0, round(plain.exposure.max_exposure, 6)), (1.1, round(crt.exposure.max_exposure, 6))])
    labels = [t.get_text() for t in _ppl_exposure_figure(ev.models).axes[0].get_legend().get_texts()]
    assert labels == ["all held-out tokens", "outside the secrets' spans"]
    # ratios over 20x apart (a public base far off) are drawn on a log axis
    assert _ppl_auc_figure(ev.models).axes[0].get_xscale() == "linear"
    crt.attacks["perplexity"].perplexity = 18.7 * 30
    assert _ppl_auc_figure(ev.models).axes[0].get_xscale() == "log"


def test_the_crt_card_gives_the_public_share_and_delta_2_with_its_source(tmp_path):
    """Issue 50: a CRT training's card says how much of its data was public and what bounds
    the secrets the split let through, from the run's summary (hand share: 750 / 1000)."""
    import json

    from attacks.results import training_info

    src = "calibrated pi_c ((shipped), domain clinical): one-sided 95% upper bound"
    (tmp_path / "summary.json").write_text(json.dumps({
        "kind": "crt", "epsilon": 3.0, "delta": 1e-5,
        "confidentiality": {"gamma": 0.06, "delta_2": 0.0163, "epsilon": 0.2, "delta": 0.0163,
                            "public_examples": 750, "private_examples": 250,
                            "provenance": {"gamma": {"origin": "measured: the privatization manifest's quality",
                                                     "source": src},
                                           "delta_2": {"origin": "measured: the privatization manifest's quality",
                                                       "source": src}}}}))
    info = training_info(str(tmp_path), "CRT")
    assert info.crt_split.startswith("75.0% of examples public (750 public, 250 private, DP-SGD)")
    assert "delta_2 (secrets the split lets through) 0.0163, measured: the privatization manifest's quality" \
        in info.crt_split and src in info.crt_split
    page = render_report(Evaluation("e", "2026-11-28T00:00:00Z", [ModelResult("m", "runs/m", training=info)]))
    assert "CRT split" in page and "75.0% of examples public" in page
    (tmp_path / "summary.json").write_text(json.dumps({"kind": "dp", "epsilon": 3.0, "delta": 1e-5}))
    assert training_info(str(tmp_path), "DP").crt_split is None


def test_the_privacy_card_shows_this_model_and_its_data_in_total(tmp_path):
    """Issue 52: a DP training through the service leaves its data's ledger beside its
    summary (``ledger.json``); the card shows the model's own epsilon and the composed one
    of every training on its corpus. Without a ledger (a CLI run) the total is not shown."""
    import json

    from attacks.results import training_info

    (tmp_path / "summary.json").write_text(json.dumps({"kind": "dp", "epsilon": 2.0, "delta": 2.5e-4}))
    assert training_info(str(tmp_path), "DP").data_trainings is None
    page = render_report(Evaluation("e", "2026-11-29T00:00:00Z",
                                    [ModelResult("m", "runs/m", training=training_info(str(tmp_path), "DP"))]))
    assert "this model: accountant ε = 2" in page and "Its data in total" not in page
    (tmp_path / "ledger.json").write_text(json.dumps({"epsilon": 2.557, "delta": 2.5e-4, "trainings": 2,
                                                      "unit": "sequence", "guarantee": "dp", "note": None}))
    info = training_info(str(tmp_path), "DP")
    assert (info.data_epsilon, info.data_trainings) == (2.557, 2)
    page = render_report(Evaluation("e", "2026-11-29T00:00:00Z", [ModelResult("m", "runs/m", training=info)]))
    assert "Its data in total" in page and "ε = 2.56" in page and "2 training(s) on its corpus" in page
    (tmp_path / "ledger.json").write_text(json.dumps({"epsilon": None, "delta": None, "trainings": 3,
                                                      "guarantee": "none", "note": "1 training(s) used this data "
                                                                                   "without DP: no guarantee remains"}))
    page = render_report(Evaluation("e", "2026-11-29T00:00:00Z",
                                    [ModelResult("m", "runs/m", training=training_info(str(tmp_path), "DP"))]))
    assert "no single figure: 1 training(s) used this data without DP" in page


def test_an_evaluation_json_from_before_results_were_keyed_still_reads_and_renders(tmp_path):
    """Issue 49: results are keyed by attack (``attacks[NAME]``); a file written before, with
    the papers' results as fields of each model, reads into the same keyed results and
    renders the same page as those results written today."""
    roc = {"score": "loss", "auc": 0.61, "tpr_at": [{"max_fpr": 0.01, "tpr": 0.05, "fpr": 0.01, "threshold": 1.0,
                                                     "negatives": 200}], "fpr": [0.0, 0.5, 1.0],
           "tpr": [0.0, 0.6, 1.0]}
    old = {"id": "ev-old", "created": "2025-01-01T00:00:00Z", "corpus_stats": None, "notes": [],
           "models": [{"name": "plain", "path": "runs/plain", "training": None, "seconds": 3.0, "reference": False,
                       "perplexity": 12.5, "perplexity_data": "40 texts of held.jsonl",
                       "perplexity_spans": {"outside": 11.0, "inside": 90.0, "inside_tokens": 7, "tokens": 300},
                       "exposure": {"format": "My ID is: {secret}", "digits": 4, "candidates": 10000,
                                    "method": "exact", "scored": "log P(digits | prefix)",
                                    "canaries": [{"index": 0, "repeats": 20, "rank": 2, "exposure": 12.29},
                                                 {"index": 1, "repeats": 0, "rank": 5000, "exposure": 1.0}],
                                    "max_exposure": 12.29, "mean_exposure": 12.29, "max_reference_exposure": 1.0},
                       "mia": {"members": 200, "non_members": 200, "context": "the whole text", "scores": [roc],
                               "group": None, "group_size": None},
                       "reconstruction": {"trials": 10, "candidates": 4, "successes": 3, "rate": 0.3},
                       "true_prefix": None, "extraction": None, "cipher_outputs": None, "identifiers": None,
                       "attacks": {}}]}
    src = tmp_path / "old" / "evaluation.json"
    src.parent.mkdir()
    src.write_text(json.dumps(old))
    ev = from_dict(old)
    m = ev.models[0]
    assert sorted(m.attacks) == ["canaries", "mia", "perplexity", "reconstruction"]
    assert m.attacks["perplexity"] == PerplexityResult(12.5, "40 texts of held.jsonl",
                                                       SpanPerplexity(11.0, 90.0, 7, 300))
    assert m.attacks["canaries"].canaries[1] == CanaryExposure(1, 0, 5000, 1.0)
    assert m.attacks["mia"].scores[0].tpr_at[0] == TprAtFpr(0.01, 0.05, 0.01, 1.0, 200)
    assert m.attacks["reconstruction"] == SuccessRate(10, 4, 3, 0.3)
    page = render_from_json(src).read_text(encoding="utf-8")
    assert "12.50" in page and "40 texts of held.jsonl" in page and "outside the secrets' spans <b>11.00</b>" in page
    assert "<b>12.29</b> bits of log₂|R| = 13.29" in page and "<b>30%</b> (3/10)" in page
    assert "200 members vs 200 non-members" in page and "0.610" in page
    assert page.count('<span class="absent">not run</span>') == 3  # true-prefix, extraction, cipher outputs
    now = tmp_path / "now"
    write_report(ev, now)
    assert "perplexity" not in json.loads((now / "evaluation.json").read_text())["models"][0]  # keyed only
    assert (now / "report.html").read_text(encoding="utf-8") == page
    assert from_dict(json.loads((now / "evaluation.json").read_text())) == ev
