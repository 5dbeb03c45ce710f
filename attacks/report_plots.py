"""The report's plots: matplotlib figures embedded as PNG ``data:`` URIs (nothing outside the
page), each absent with a sentence when the evaluation has no data for it."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from attacks.results import ModelResult
from attacks.report_format import DPI, TARGET_FPR, best_auc, esc, fmt_pct, log2_candidates, reference_model, short_label




def _data_uri(fig: Figure) -> str:
    FigureCanvasAgg(fig)  # Agg explicitly: no pyplot, no global backend switch
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _roc_figure(models: Sequence[ModelResult]) -> Figure | None:
    curves = [(m.name, r) for m in models if (r := best_auc(m.mia)) is not None and r.fpr]
    if not curves:
        return None
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    lin, log = fig.subplots(1, 2)
    low = 1.0
    for k, (name, r) in enumerate(curves):
        lin.plot(r.fpr, r.tpr, color=f"C{k}", label=f"{short_label(name)} ({short_label(r.score)}, AUC {r.auc:.3f})")
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
    log.text(TARGET_FPR, low, f" {fmt_pct(TARGET_FPR)} FPR", fontsize=8, va="bottom")
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
        log2r = log2_candidates(x)
        if log2r is not None:
            ax.axhline(log2r, color="C3", ls="--", lw=1, label=rf"$\log_2|R|$ = {log2r:.1f}")
        ax.set(title=f"{short_label(m.name, 30)} ({short_label(x.method)})", xlabel="canary index")
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
        ax.plot([p[0] for p in curve], [p[1] for p in curve], color=f"C{k}", label=short_label(name))
    ax.set(xlabel="step", ylabel="training loss", title="Training loss")
    ax.legend(fontsize=8)
    return fig


def _tradeoff_figure(points: list[tuple[str, float, float, float | None]], ylabel: str, title: str, xlabel: str,
                     chance: float | None = None) -> Figure | None:
    """One filled point per model at (x, y); where the model has an x on the text outside
    the secrets' spans (the fourth element), a hollow point there too, joined to the first:
    how much of the model's cost is off the secrets."""
    if not points:
        return None
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    split = any(p[3] is not None for p in points)
    for k, (name, x, y, x_out) in enumerate(points):
        ax.scatter([x], [y], color=f"C{k}", s=40, zorder=3, label="all held-out tokens" if split and k == 0 else None)
        if x_out is not None:
            first = all(p[3] is None for p in points[:k])
            ax.scatter([x_out], [y], facecolors="none", edgecolors=f"C{k}", s=40, zorder=3,
                       label="outside the secrets' spans" if first else None)
            ax.plot([x_out, x], [y, y], color=f"C{k}", lw=0.8, ls=":", zorder=2)
        ax.annotate(short_label(name, 28), (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    if chance is not None:
        ax.axhline(chance, color="grey", ls=":", label="chance")
    if chance is not None or split:
        ax.legend(fontsize=8)
    xs = [v for p in points for v in (p[1], p[3]) if v is not None]
    if min(xs) > 0 and max(xs) / min(xs) > 20:  # a base model far off: ratios read on a log axis
        ax.set_xscale("log")
        xlabel += ", log scale"
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.margins(0.2)
    return fig


def _utility(models: Sequence[ModelResult]) -> tuple[Callable[[ModelResult], float],
                                                     Callable[[ModelResult], float | None], str]:
    """Each model's x: its perplexity as a ratio to the unprotected reference's when the
    evaluation has one (the cost of protection), else the perplexity itself; and the same
    on the tokens outside the secrets' spans (None where the model, or the reference, has
    no such split)."""
    ref = reference_model(models)

    def outside(m: ModelResult) -> float | None:
        if m.perplexity_spans is None:
            return None
        if ref is None:
            return m.perplexity_spans.outside
        return None if ref.perplexity_spans is None else m.perplexity_spans.outside / ref.perplexity_spans.outside

    if ref is None:
        return (lambda m: m.perplexity), outside, "perplexity (lower = more useful)"
    return ((lambda m: m.perplexity / ref.perplexity), outside,
            f"perplexity ÷ {short_label(ref.name, 20)}'s (1 = no cost)")


def _ppl_exposure_figure(models: Sequence[ModelResult]) -> Figure | None:
    x, x_out, label = _utility(models)
    pts = [(m.name, x(m), m.exposure.max_exposure, x_out(m)) for m in models
           if m.perplexity is not None and m.exposure is not None]
    return _tradeoff_figure(pts, "max canary exposure (bits)", "Utility vs canary exposure", label)


def _ppl_auc_figure(models: Sequence[ModelResult]) -> Figure | None:
    x, x_out, label = _utility(models)
    pts = [(m.name, x(m), r.auc, x_out(m)) for m in models
           if m.perplexity is not None and (r := best_auc(m.mia)) is not None]
    return _tradeoff_figure(pts, "best membership-inference AUC", "Utility vs membership inference", label, chance=0.5)


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
    ("ppl-exposure", "Utility vs privacy: perplexity (as a ratio to the unprotected model's, where the "
     "evaluation has one) against max canary exposure; hollow points: on the text outside the secrets' spans, "
     "where the evaluation gives them.",
     "Scatter of perplexity against max canary exposure, one labelled point per model",
     _ppl_exposure_figure, "No perplexity-vs-exposure plot: no model has both a perplexity and an exposure result."),
    ("ppl-auc", "Utility vs privacy: perplexity (as a ratio to the unprotected model's, where the evaluation "
     "has one) against best membership-inference AUC; hollow points: on the text outside the secrets' spans, "
     "where the evaluation gives them.",
     "Scatter of perplexity against best membership-inference AUC, one labelled point per model",
     _ppl_auc_figure, "No perplexity-vs-AUC plot: no model has both a perplexity and a membership-inference result."),
)


def plots_html(models: Sequence[ModelResult]) -> str:
    parts = []
    for key, caption, alt, build, absent in _PLOTS:
        fig = build(models)
        if fig is None:
            parts.append(f'<p class="absent" data-plot-absent="{key}">{esc(absent)}</p>')
            continue
        parts.append(f'<figure><img id="plot-{key}" data-plot="{key}" alt="{esc(alt)}" src="{_data_uri(fig)}">'
                     f"<figcaption>{esc(caption)}</figcaption></figure>")
    return "".join(parts)
