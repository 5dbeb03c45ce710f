"""The privacy report: one self-contained HTML page over an :class:`Evaluation`.

The page is read offline, attached to tickets and archived beside ``evaluation.json``, so
it references nothing outside itself: plots are PNGs embedded as ``data:`` URIs, the CSS
is inline and there is no script. Every string from the data is HTML-escaped (model names
are user-provided) and neutralised for matplotlib's mathtext before it reaches a plot.

``python -m attacks.report evaluation.json [-o report.html]`` re-renders a stored result.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from attacks.results import (
    Evaluation,
    ExposureResult,
    MiaResult,
    ModelResult,
    RocResult,
    TprAtFpr,
    from_dict,
    to_json,
)

TARGET_FPR = 0.01  # the comparison table's operating point (TPR at 1% FPR)
_DPI = 100
_DASH = "—"

_CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2330;
       background: #fff; margin: 0 auto; padding: 1.5rem 2rem 3rem; max-width: 1180px; }
h1 { margin: 0 0 .2rem; font-size: 1.7rem; }
h2 { margin-top: 2.2rem; border-bottom: 2px solid #e3e7ee; padding-bottom: .2rem; }
h3 { margin: 0 0 .6rem; font-size: 1.1rem; word-break: break-word; }
.meta, .absent, .hint { color: #5b6473; }
.absent { font-style: italic; }
table { border-collapse: collapse; margin: .4rem 0; }
th, td { text-align: left; padding: .3rem .6rem; border-bottom: 1px solid #e3e7ee; vertical-align: top; }
th { background: #f4f6f9; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 1rem; }
.card { border: 1px solid #d5dbe5; border-radius: 8px; padding: 1rem 1.2rem; background: #fbfcfe; }
.card table.kv th { width: 11.5rem; background: none; color: #3a4354; }
.card table.kv td { word-break: break-word; }
.card table.scores th, .card table.scores td { font-size: .9rem; padding: .15rem .5rem; }
.warn { color: #a33c00; }
figure { margin: 1.2rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #e3e7ee; }
figcaption { color: #3a4354; margin-top: .3rem; }
code { font-size: .88rem; background: #eef1f5; padding: 0 .25rem; border-radius: 3px; }
details { margin-top: .3rem; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None, spec: str = ".3g") -> str:
    return _DASH if value is None else format(value, spec)


def _pct(value: float | None) -> str:
    """Percent with three significant digits, so 0.1% and 45.7% both read naturally."""
    return _DASH if value is None else f"{value * 100:.3g}%"


def _label(text: object, limit: int = 40) -> str:
    """A data string made safe for a matplotlib label.

    An even number of ``$`` would switch on mathtext, which raises on malformed TeX at
    draw time, and a legend silently drops labels starting with ``_``.
    """
    s = str(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("$", r"\$")
    return " " + s if s.startswith("_") else s


def _tpr_at(roc: RocResult, max_fpr: float) -> TprAtFpr | None:
    return next((t for t in roc.tpr_at if math.isclose(t.max_fpr, max_fpr, rel_tol=1e-6)), None)


def _resolvable(t: TprAtFpr) -> bool:
    """Below one negative per FPR budget, the only threshold is "reject all": no figure."""
    return t.max_fpr * t.negatives >= 1


def _best_auc(mia: MiaResult | None) -> RocResult | None:
    scores = [r for r in (mia.scores if mia else []) if not math.isnan(r.auc)]
    return max(scores, key=lambda r: r.auc, default=None)


def _best_tpr(mia: MiaResult | None, max_fpr: float) -> tuple[RocResult, TprAtFpr] | None:
    """The worst case for privacy: the highest resolvable TPR at ``max_fpr`` over the scores."""
    found = [(r, t) for r in (mia.scores if mia else [])
             if (t := _tpr_at(r, max_fpr)) is not None and _resolvable(t)]
    return max(found, key=lambda rt: rt[1].tpr, default=None)


def _log2_candidates(exposure: ExposureResult) -> float | None:
    return math.log2(exposure.candidates) if exposure.candidates > 1 else None


# ---------------------------------------------------------------------------- cards


def _kv_table(rows: Sequence[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" if k else f'<tr><td colspan="2">{v}</td></tr>'
                   for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _training_rows(m: ModelResult) -> list[tuple[str, str]]:
    t = m.training
    if t is None:
        return [("Data protection", '<span class="absent">not recorded</span>')]
    rows = [("Data protection", f"{_e(t.protection)} <span class=\"hint\">({_e(t.kind)} training)</span>")]
    if t.epsilon is not None:
        rows.append(("Differential privacy", f"ε = {_num(t.epsilon)}, δ = {_num(t.delta)}"))
    else:
        rows.append(("Differential privacy", "none (no DP guarantee)"))
    if t.confidentiality_epsilon is not None or t.confidentiality_delta is not None:
        rows.append(("CRT confidentiality",
                     f"(ε, δ) = ({_num(t.confidentiality_epsilon)}, {_num(t.confidentiality_delta)})"))
    return rows


def _perplexity_html(m: ModelResult) -> str:
    if m.perplexity is None:
        return '<span class="absent">not measured</span>'
    where = _e(m.perplexity_data) if m.perplexity_data else "data not recorded"
    return f"{m.perplexity:.2f} <span class=\"hint\">on {where}</span>"


def _exposure_rows(x: ExposureResult | None) -> list[tuple[str, str]]:
    if x is None:
        return [("Canary exposure", '<span class="absent">not run</span>')]
    inserted = sum(1 for c in x.canaries if c.repeats > 0)
    reference = len(x.canaries) - inserted
    log2r = _log2_candidates(x)
    ceiling = f" of log₂|R| = {log2r:.2f}" if log2r is not None else ""
    rows = [
        ("Max exposure", f"<b>{x.max_exposure:.2f}</b> bits{ceiling} "
                         f"<span class=\"hint\">({_e(x.method)}, |R| = {x.candidates:,})</span>"),
        ("Mean exposure", f"{x.mean_exposure:.2f} bits over {inserted} inserted canaries"),
    ]
    if x.max_reference_exposure is not None:
        rows.append(("Reference canaries",
                     f"max {x.max_reference_exposure:.2f} bits over {reference} never inserted "
                     "<span class=\"hint\">(the level chance reaches)</span>"))
    rows.append(("Canary format", f"<code>{_e(x.format)}</code>, {x.digits} digits; scored: {_e(x.scored)}"))
    return rows


def _tpr_cell(t: TprAtFpr | None, per_cell_negatives: bool) -> str:
    if t is None:
        return f"<td>{_DASH}</td>"
    support = f' <span class="hint">({t.negatives:,} neg.)</span>' if per_cell_negatives else ""
    if not _resolvable(t):
        return f'<td class="warn" title="{t.negatives:,} negatives">not resolvable{support}</td>'
    return f'<td class="num" title="FPR reached: {_pct(t.fpr)}">{_pct(t.tpr)}{support}</td>'


def _support_note(fprs: Sequence[float], negatives: int) -> str:
    """What the TPR figures stand on, said once when every figure shares its negatives."""
    note = f"Each TPR figure is backed by {negatives:,} negatives (non-members)."
    short = [f for f in fprs if f * negatives < 1]
    if short:
        note += " Not resolvable: " + ", ".join(f"{_pct(f)} FPR needs ≥ {math.ceil(1 / f):,}" for f in short) + "."
    return f'<p class="hint">{_e(note)}</p>'


def _mia_rows(mia: MiaResult | None) -> list[tuple[str, str]]:
    if mia is None:
        return [("Membership inference", '<span class="absent">not run</span>')]
    rocs = list(mia.scores) + ([mia.group] if mia.group else [])
    fprs = sorted({t.max_fpr for r in rocs for t in r.tpr_at}, reverse=True)
    negatives = {t.negatives for r in rocs for t in r.tpr_at}
    per_cell = len(negatives) > 1
    head = "".join(f"<th>TPR@{_pct(f)} FPR</th>" for f in fprs)

    def line(name: str, r: RocResult) -> str:
        cells = "".join(_tpr_cell(_tpr_at(r, f), per_cell) for f in fprs)
        return f"<tr><td>{name}</td><td class=\"num\">{r.auc:.3f}</td>{cells}</tr>"

    body = "".join(line(_e(r.score), r) for r in mia.scores)
    if mia.group:
        size = f" of {mia.group_size}" if mia.group_size else ""
        body += line(f"group{_e(size)} ({_e(mia.group.score)})", mia.group)
    table = f'<table class="scores"><tr><th>Score</th><th>AUC</th>{head}</tr>{body}</table>'
    note = _support_note(fprs, negatives.pop()) if len(negatives) == 1 else ""
    return [("Membership inference",
             f"{mia.members:,} members vs {mia.non_members:,} non-members; scored on: <code>{_e(mia.context)}</code>"),
            ("", table + note)]


def _attack_rows(m: ModelResult) -> list[tuple[str, str]]:
    absent = '<span class="absent">not run</span>'
    rows = []
    r = m.reconstruction
    chance = f", chance {_pct(1 / r.candidates)}" if r and r.candidates > 0 else ""
    rows.append(("Name reconstruction", absent if r is None else
                 f"<b>{_pct(r.rate)}</b> ({r.successes:,}/{r.trials:,}) "
                 f"<span class=\"hint\">over {r.candidates:,} candidates{chance}</span>"))
    p = m.true_prefix
    rows.append(("True-prefix distance", absent if p is None else
                 f"{p.mean_best_distance:.3f} mean best normalised Levenshtein "
                 f"<span class=\"hint\">(higher = more private; {p.trials:,} trials × {p.samples:,} samples)</span>"))
    x = m.extraction
    if x is None:
        rows.append(("Extraction", absent))
    else:
        text = (f"<b>{x.extracted:,}</b> of {x.prompts:,} generations share ≥ {x.min_words} words with the "
                f"training data <span class=\"hint\">({x.unique_extracted:,} unique; {x.dropped_low_zlib:,} "
                f"dropped under zlib threshold {_num(x.zlib_threshold)})</span>")
        if x.examples:
            items = "".join(f"<li><code>{_e(s)}</code></li>" for s in x.examples)
            n = len(x.examples)
            text += f"<details><summary>{n} example{'s' if n != 1 else ''}</summary><ul>{items}</ul></details>"
        rows.append(("Extraction", text))
    c = m.cipher_outputs
    rows.append(("Cipher outputs", absent if c is None else
                 f"{c.total_tokens:,} entity tokens ({c.unique_tokens:,} unique); {c.invalid_tokens:,} invalid "
                 f"({c.unique_invalid:,} unique), failure ratio {_pct(c.failure_ratio)}; "
                 f"<b>{c.resurfaced_plaintext:,}</b> training PII values resurfaced in plain text"))
    return rows


def _card(i: int, m: ModelResult) -> str:
    rows = [*_training_rows(m), ("Perplexity", _perplexity_html(m)), *_exposure_rows(m.exposure),
            *_mia_rows(m.mia), *_attack_rows(m)]
    took = f" · attacks took {m.seconds:.0f} s" if m.seconds else ""
    return (f'<section class="card" id="model-{i}"><h3>{_e(m.name)}</h3>'
            f'<p class="meta"><code>{_e(m.path)}</code>{took}</p>{_kv_table(rows)}</section>')


def _comparison(models: Sequence[ModelResult]) -> str:
    head = ("<tr><th>Model</th><th>Protection</th><th>Perplexity</th><th>Max exposure (bits)</th>"
            f"<th>Best MIA AUC</th><th>Best TPR@{_pct(TARGET_FPR)} FPR</th><th>Extraction</th>"
            "<th>Name reconstruction</th></tr>")
    rows = []
    for i, m in enumerate(models):
        x = m.exposure
        log2r = _log2_candidates(x) if x else None
        exposure = _DASH if x is None else f"{x.max_exposure:.2f}" + (f" / {log2r:.1f}" if log2r else "")
        auc = _best_auc(m.mia)
        best = _best_tpr(m.mia, TARGET_FPR)
        if best:
            tpr = f"{_pct(best[1].tpr)} ({_e(best[0].score)}, {best[1].negatives:,} neg.)"
        elif m.mia and any(_tpr_at(r, TARGET_FPR) for r in m.mia.scores):
            tpr = '<span class="warn">not resolvable</span>'
        else:
            tpr = _DASH
        ext = m.extraction
        rec = m.reconstruction
        cells = [
            f'<a href="#model-{i}">{_e(m.name)}</a>',
            _e(m.training.protection) if m.training else _DASH,
            _num(m.perplexity, ".2f"),
            exposure,
            _DASH if auc is None else f"{auc.auc:.3f} ({_e(auc.score)})",
            tpr,
            _DASH if ext is None else f"{ext.extracted:,} / {ext.prompts:,}",
            _DASH if rec is None else _pct(rec.rate),
        ]
        rows.append("<tr>" + "".join(
            f'<td class="num">{c}</td>' if k in (2, 3) else f"<td>{c}</td>" for k, c in enumerate(cells)) + "</tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _privacy_cell(p: dict | None) -> str:
    """One kind's Privacy with the counts behind it (never the terms)."""
    if not p or not p.get("identifiers"):
        return f'<td>{_DASH} <span class="hint">(none found)</span></td>'
    how = (f' title="predicted {p["predicted"]:,}, regurgitated {p["regurgitated"]:,}"'
           if "predicted" in p and "regurgitated" in p else "")
    return (f'<td class="num"{how}>{p["privacy"]:.3f} '
            f'<span class="hint">({p["leaked"]:,} of {p["identifiers"]:,} leaked)</span></td>')


def _identifiers(models: Sequence[ModelResult]) -> str:
    """Paper 003's table, or "" when no model has identifier results."""
    rows = [(i, m, m.identifiers) for i, m in enumerate(models) if m.identifiers is not None]
    if not rows:
        return ""
    head = ("<tr><th>Model</th><th>Privacy</th><th>direct</th><th>indirect</th>"
            "<th>Low-cost MIA precision / recall / F1</th><th>Loss MIA AUC</th>"
            f"<th>TPR@{_pct(TARGET_FPR)} FPR</th></tr>")
    body = []
    for i, m, x in rows:
        low = x.low_cost_mia
        low_cell = (f"<td>{_DASH}</td>" if low is None else
                    f'<td class="num" title="{low["guessed_members"]:,} of {low["individuals"]:,} individuals '
                    f'called members">{low["precision"]:.2f} / {low["recall"]:.2f} / {low["f1"]:.2f}</td>')
        roc = x.loss_mia
        auc = f"<td>{_DASH}</td>" if roc is None else f'<td class="num">{roc.auc:.3f}</td>'
        tpr = _tpr_cell(_tpr_at(roc, TARGET_FPR) if roc else None, per_cell_negatives=True)
        body.append(f'<tr><td><a href="#model-{i}">{_e(m.name)}</a></td>'
                    + "".join(_privacy_cell(x.privacy.get(k)) for k in ("all", "direct", "indirect"))
                    + low_cell + auc + tpr + "</tr>")
    x = rows[0][2]
    gens = f"{x.samples} generation{'s' if x.samples != 1 else ''} each" if x.samples else "predictions only"
    support = f"Privacy over {x.records:,} member records of {x.individuals:,} individuals ({gens})."
    if x.non_member_individuals:
        support += (f" Membership inference per individual: {x.individuals:,} members vs "
                    f"{x.non_member_individuals:,} held-out individuals ({x.non_member_records:,} records).")
    else:
        support += " No held-out individuals given: no membership inference."
    reading = ("Privacy is 1 − the share of the distinct identifiers in the members' records that the model "
               "predicts (each of its tokens the model's top choice after the real text before it) or "
               "regurgitates (in its generations); 1 = none given away. The low-cost attack calls an individual "
               "a member when any of their indirect identifiers is predicted; the loss attack scores an "
               "individual by their records' mean token loss.")
    return (f"<table>{head}{''.join(body)}</table>"
            f'<p class="hint">{_e(support)}</p><p class="hint">{_e(reading)}</p>')


def _corpus_stats(stats: dict) -> str:
    keys = list(dict.fromkeys(k for v in stats.values() if isinstance(v, dict) for k in v))
    head = "<tr><th>Corpus</th>" + "".join(f"<th>{_e(k)}</th>" for k in keys) + "</tr>"

    def cell(v: object) -> str:
        return f'<td class="num">{v:.3g}</td>' if isinstance(v, (int, float)) else f"<td>{_e(v)}</td>"

    body = "".join(
        f"<tr><td>{_e(name)}</td>" + "".join(cell(v.get(k, _DASH) if isinstance(v, dict) else _DASH)
                                              for k in keys) + "</tr>"
        for name, v in stats.items())
    return f"<table>{head}{body}</table>"


# ---------------------------------------------------------------------------- plots


def _data_uri(fig: Figure) -> str:
    FigureCanvasAgg(fig)  # Agg explicitly: no pyplot, no global backend switch
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _roc_figure(models: Sequence[ModelResult]) -> Figure | None:
    curves = [(m.name, r) for m in models if (r := _best_auc(m.mia)) is not None and r.fpr]
    if not curves:
        return None
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    lin, log = fig.subplots(1, 2)
    low = 1.0
    for k, (name, r) in enumerate(curves):
        lin.plot(r.fpr, r.tpr, color=f"C{k}", label=f"{_label(name)} ({_label(r.score)}, AUC {r.auc:.3f})")
        pts = [(f, t) for f, t in zip(r.fpr, r.tpr) if f > 0 and t > 0]
        if pts:
            log.plot(*zip(*pts), color=f"C{k}")
            low = min(low, min(f for f, _ in pts))
    lin.plot([0, 1], [0, 1], ":", color="grey", label="chance")
    lin.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC (best score per model)",
            xlim=(0, 1), ylim=(0, 1.01))
    lin.legend(loc="lower right", fontsize=8)
    low = min(low, TARGET_FPR / 10)
    log.plot([low, 1], [low, 1], ":", color="grey")
    log.axvline(TARGET_FPR, color="black", lw=0.8, ls="--")
    log.text(TARGET_FPR, low, f" {_pct(TARGET_FPR)} FPR", fontsize=8, va="bottom")
    log.set(xscale="log", yscale="log", xlabel="false positive rate", ylabel="true positive rate",
            title="ROC, log-log (low-FPR regime)", xlim=(low, 1), ylim=(low, 1.05))
    return fig


def _exposure_figure(models: Sequence[ModelResult]) -> Figure | None:
    panels = [m for m in models if m.exposure and m.exposure.canaries]
    if not panels:
        return None
    cols = min(len(panels), 3)
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.6 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True).ravel()
    for ax, m in zip(axes, panels):
        x = m.exposure
        ins = [c for c in x.canaries if c.repeats > 0]
        ref = [c for c in x.canaries if c.repeats == 0]
        if ins:
            ax.scatter([c.index for c in ins], [c.exposure for c in ins], s=[14 + 6 * min(c.repeats, 20) for c in ins],
                       color="C0", alpha=0.8, label="inserted (size ∝ repeats)")
        if ref:
            ax.scatter([c.index for c in ref], [c.exposure for c in ref], marker="x", color="grey",
                       label="never inserted (reference)")
        log2r = _log2_candidates(x)
        if log2r is not None:
            ax.axhline(log2r, color="C3", ls="--", lw=1, label=rf"$\log_2|R|$ = {log2r:.1f}")
        ax.set(title=f"{_label(m.name, 30)} ({_label(x.method)})", xlabel="canary index")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7, loc="best")
    axes[0].set_ylabel("exposure (bits)")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return fig


def _loss_figure(models: Sequence[ModelResult]) -> Figure | None:
    curves = [(m.name, m.training.loss_curve) for m in models if m.training and m.training.loss_curve]
    if not curves:
        return None
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.subplots()
    for k, (name, curve) in enumerate(curves):
        ax.plot([p[0] for p in curve], [p[1] for p in curve], color=f"C{k}", label=_label(name))
    ax.set(xlabel="step", ylabel="training loss", title="Training loss")
    ax.legend(fontsize=8)
    return fig


def _tradeoff_figure(points: list[tuple[str, float, float]], ylabel: str, title: str,
                     chance: float | None = None) -> Figure | None:
    if not points:
        return None
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for k, (name, x, y) in enumerate(points):
        ax.scatter([x], [y], color=f"C{k}", s=40, zorder=3)
        ax.annotate(_label(name, 28), (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    if chance is not None:
        ax.axhline(chance, color="grey", ls=":", label="chance")
        ax.legend(fontsize=8)
    ax.set(xlabel="perplexity (lower = more useful)", ylabel=ylabel, title=title)
    ax.margins(0.2)
    return fig


def _ppl_exposure_figure(models: Sequence[ModelResult]) -> Figure | None:
    pts = [(m.name, m.perplexity, m.exposure.max_exposure) for m in models
           if m.perplexity is not None and m.exposure is not None]
    return _tradeoff_figure(pts, "max canary exposure (bits)", "Utility vs canary exposure")


def _ppl_auc_figure(models: Sequence[ModelResult]) -> Figure | None:
    pts = [(m.name, m.perplexity, r.auc) for m in models
           if m.perplexity is not None and (r := _best_auc(m.mia)) is not None]
    return _tradeoff_figure(pts, "best membership-inference AUC", "Utility vs membership inference", chance=0.5)


# key, caption, alt text, figure builder, what is said when there is no data
_PLOTS: tuple[tuple[str, str, str, Callable[[Sequence[ModelResult]], Figure | None], str], ...] = (
    ("roc", "Membership inference: ROC curve of each model's best score (by AUC).",
     "ROC curves of each model's best membership-inference score, on linear and log-log axes",
     _roc_figure, "No ROC plot: no model has a membership-inference result with a curve."),
    ("exposure", "Canary exposure per canary; the dashed line is the ceiling log₂|R| (rank 1).",
     "Exposure of each canary per model, inserted canaries and never-inserted references distinguished",
     _exposure_figure, "No exposure plot: no model has a canary-exposure result."),
    ("loss", "Training loss curves.",
     "Training loss against step for each model with a recorded loss curve",
     _loss_figure, "No loss plot: no model records a training loss curve."),
    ("ppl-exposure", "Utility vs privacy: perplexity against max canary exposure.",
     "Scatter of perplexity against max canary exposure, one labelled point per model",
     _ppl_exposure_figure, "No perplexity-vs-exposure plot: no model has both a perplexity and an exposure result."),
    ("ppl-auc", "Utility vs privacy: perplexity against best membership-inference AUC.",
     "Scatter of perplexity against best membership-inference AUC, one labelled point per model",
     _ppl_auc_figure, "No perplexity-vs-AUC plot: no model has both a perplexity and a membership-inference result."),
)


def _plots(models: Sequence[ModelResult]) -> str:
    parts = []
    for key, caption, alt, build, absent in _PLOTS:
        fig = build(models)
        if fig is None:
            parts.append(f'<p class="absent" data-plot-absent="{key}">{_e(absent)}</p>')
            continue
        parts.append(f'<figure><img id="plot-{key}" data-plot="{key}" alt="{_e(alt)}" src="{_data_uri(fig)}">'
                     f"<figcaption>{_e(caption)}</figcaption></figure>")
    return "".join(parts)


# ---------------------------------------------------------------------------- page


_READING = """
<ul class="hint">
<li><b>Exposure</b> of a canary is log₂|R| − log₂ rank: the bits an attacker saves in guessing the
secret from the model. It tops out at log₂|R| (the model ranks the secret first); never-inserted
reference canaries show the level chance reaches.</li>
<li><b>TPR at a low FPR</b> is how many members an attacker finds while almost never accusing a
non-member. It needs at least 1/FPR non-members to be measured at all; below that it is marked
not resolvable.</li>
<li><b>AUC</b> 0.5 is chance. <b>True-prefix distance</b>: higher is more private.</li>
</ul>
"""


def render_report(evaluation: Evaluation) -> str:
    """The report as one HTML string with every plot embedded."""
    ev = evaluation
    n = len(ev.models)
    notes = ("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(s)}</li>" for s in ev.notes) + "</ul>") if ev.notes else ""
    stats = f"<h2>Corpus statistics</h2>{_corpus_stats(ev.corpus_stats)}" if ev.corpus_stats else ""
    if ev.models:
        ids = _identifiers(ev.models)
        body = (f"<h2>Comparison</h2>{_comparison(ev.models)}"
                + (f'<h2 id="identifiers">Identifiers (paper 003)</h2>{ids}' if ids else "")
                + '<h2>Privacy cards</h2><div class="cards">'
                + "".join(_card(i, m) for i, m in enumerate(ev.models))
                + f"</div><h2>Plots</h2>{_plots(ev.models)}")
    else:
        body = '<p class="absent">This evaluation has no model results.</p>'
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>Privacy report — {_e(ev.id)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>'
        f"<body><h1>Privacy report — {_e(ev.id)}</h1>"
        f'<p class="meta">Evaluation <code>{_e(ev.id)}</code> · created {_e(ev.created)} · '
        f"{n} model{'s' if n != 1 else ''}</p>"
        f"{notes}{body}{stats}<h2>Reading the figures</h2>{_READING}</body></html>\n"
    )


def _write_atomic(path: Path, text: str) -> None:
    """Readers never see a half-written file: write a temp name beside it, then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(evaluation: Evaluation, out_dir: str | os.PathLike) -> Path:
    """Write ``report.html`` and ``evaluation.json`` into ``out_dir``; returns the HTML path.

    The page is rendered before anything is written, so a rendering error leaves the
    previous pair intact.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    page = render_report(evaluation)
    _write_atomic(out / "evaluation.json", to_json(evaluation) + "\n")
    html_path = out / "report.html"
    _write_atomic(html_path, page)
    return html_path


def render_from_json(path_to_evaluation_json: str | os.PathLike,
                     out_html: str | os.PathLike | None = None) -> Path:
    """Re-render a stored ``evaluation.json``; by default to ``report.html`` beside it."""
    src = Path(path_to_evaluation_json)
    evaluation = from_dict(json.loads(src.read_text(encoding="utf-8")))
    dest = Path(out_html) if out_html is not None else src.with_name("report.html")
    _write_atomic(dest, render_report(evaluation))
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attacks.report", description=render_from_json.__doc__)
    parser.add_argument("evaluation_json")
    parser.add_argument("-o", "--out", help="the HTML file to write (default: report.html beside the JSON)")
    args = parser.parse_args(argv)
    print(render_from_json(args.evaluation_json, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
