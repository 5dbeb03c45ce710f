"""Formatting shared by the report's page, its plots and the attacks' own rows and sections
(``attacks.kinds``): escaping, numbers, labels, the figures picked from a result (best
AUC, TPR at a false-positive rate) and the cells that show them."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from attacks.results import ExposureResult, MiaResult, RocResult, TprAtFpr

TARGET_FPR = 0.01  # the comparison table's operating point (TPR at 1% FPR)
DPI = 100
DASH = "—"



def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


class ModelResults(dict):
    """What an attack's ``render`` gets: {model name: its result}, in the evaluation's order;
    ``link(name)`` is the model's name linked to its privacy card."""

    def __init__(self, results: dict, anchors: dict[str, str] | None = None):
        super().__init__(results)
        self.anchors = anchors or {}

    def link(self, name: str) -> str:
        anchor = self.anchors.get(name)
        return f'<a href="#{anchor}">{esc(name)}</a>' if anchor else esc(name)


def tpr_cell(t: TprAtFpr | None, per_cell_negatives: bool) -> str:
    """A TPR at one FPR as a table cell (not resolvable when too few negatives back it)."""
    if t is None:
        return f"<td>{DASH}</td>"
    support = f' <span class="hint">({t.negatives:,} neg.)</span>' if per_cell_negatives else ""
    if not is_resolvable(t):
        return f'<td class="warn" title="{t.negatives:,} negatives">not resolvable{support}</td>'
    return f'<td class="num" title="FPR reached: {fmt_pct(t.fpr)}">{fmt_pct(t.tpr)}{support}</td>'


def support_note(fprs: Sequence[float], negatives: int) -> str:
    """What the TPR figures stand on, said once when every figure shares its negatives."""
    note = f"Each TPR figure is backed by {negatives:,} negatives (non-members)."
    short = [f for f in fprs if f * negatives < 1]
    if short:
        note += " Not resolvable: " + ", ".join(f"{fmt_pct(f)} FPR needs ≥ {math.ceil(1 / f):,}" for f in short) + "."
    return f'<p class="hint">{esc(note)}</p>'


def fmt_num(value: float | None, spec: str = ".3g") -> str:
    return DASH if value is None else format(value, spec)


def fmt_pct(value: float | None) -> str:
    """Percent with three significant digits, so 0.1% and 45.7% both read naturally."""
    return DASH if value is None else f"{value * 100:.3g}%"


def short_label(text: object, limit: int = 40) -> str:
    """A data string made safe for a matplotlib label.

    An even number of ``$`` would switch on mathtext, which raises on malformed TeX at
    draw time, and a legend silently drops labels starting with ``_``.
    """
    s = str(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("$", r"\$")
    return " " + s if s.startswith("_") else s


def tpr_at(roc: RocResult, max_fpr: float) -> TprAtFpr | None:
    return next((t for t in roc.tpr_at if math.isclose(t.max_fpr, max_fpr, rel_tol=1e-6)), None)


def is_resolvable(t: TprAtFpr) -> bool:
    """Below one negative per FPR budget, the only threshold is "reject all": no figure."""
    return t.max_fpr * t.negatives >= 1


def best_auc(mia: MiaResult | None) -> RocResult | None:
    scores = [r for r in (mia.scores if mia else []) if not math.isnan(r.auc)]
    return max(scores, key=lambda r: r.auc, default=None)


def best_tpr(mia: MiaResult | None, max_fpr: float) -> tuple[RocResult, TprAtFpr] | None:
    """The worst case for privacy: the highest resolvable TPR at ``max_fpr`` over the scores."""
    found = [(r, t) for r in (mia.scores if mia else [])
             if (t := tpr_at(r, max_fpr)) is not None and is_resolvable(t)]
    return max(found, key=lambda rt: rt[1].tpr, default=None)


def log2_candidates(exposure: ExposureResult) -> float | None:
    return math.log2(exposure.candidates) if exposure.candidates > 1 else None


def reference_model(models):
    """The model the others' cost of protection is measured against: the one the evaluation
    config marks ``reference`` (with a perplexity), else the first with a perplexity, no DP
    guarantee and a protection that starts with "none", or None."""
    marked = [m for m in models if getattr(m, "reference", False) and m.perplexity is not None]
    if marked:
        return marked[0]
    for m in models:
        t = m.training
        if (m.perplexity is not None and t is not None and t.epsilon is None
                and str(t.protection).lower().startswith("none")):
            return m
    return None


def cost_of_protection(m, ref) -> str:
    """"+X% perplexity against <reference>" (or why there is no figure)."""
    if ref is None:
        return "no unprotected model with a perplexity in this evaluation to compare against"
    if m is ref:
        return "the reference: the other models' cost is measured against it"
    if m.perplexity is None:
        return f"perplexity not measured (the reference is {ref.name})"
    text = _cost(m.perplexity / ref.perplexity, "perplexity", ref.name)
    if m.perplexity_spans is not None and ref.perplexity_spans is not None:
        text += "; " + _cost(m.perplexity_spans.outside / ref.perplexity_spans.outside,
                             "perplexity outside the secrets' spans", ref.name)
    return text


def _cost(ratio: float, what: str, ref: str) -> str:
    if ratio >= 2:
        return f"{ratio:.1f}x the {what} of {ref} ({(ratio - 1) * 100:+.0f}%)"
    return f"{(ratio - 1) * 100:+.1f}% {what} against {ref}"

