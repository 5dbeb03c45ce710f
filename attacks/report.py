"""The privacy report: one self-contained HTML page over an :class:`Evaluation`.

The page is read offline, attached to tickets and archived beside ``evaluation.json``, so
it references nothing outside itself: plots are PNGs embedded as ``data:`` URIs, the CSS
is inline and there is no script. Every string from the data is HTML-escaped (model names
are user-provided) and neutralised for matplotlib's mathtext before it reaches a plot.

``python -m attacks.report evaluation.json [-o report.html]`` re-renders a stored result.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path


from attacks.results import EVALUATION, REPORT, Evaluation, ModelResult, from_dict, to_json
from attacks.report_format import (DASH, TARGET_FPR, ModelResults, best_auc, best_tpr, esc, fmt_num, fmt_pct,
                                   log2_candidates, reference_model, tpr_at)
from attacks.report_plots import plots_html

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


# ---------------------------------------------------------------------------- cards


def _kv_table(rows: Sequence[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" if k else f'<tr><td colspan="2">{v}</td></tr>'
                   for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _training_rows(m: ModelResult) -> list[tuple[str, str]]:
    t = m.training
    if t is None:
        return [("Data protection", '<span class="absent">not recorded</span>')]
    rows = [("Data protection", f"{esc(t.protection)} <span class=\"hint\">({esc(t.kind)} training)</span>")]
    if t.base:
        rows.append(("Base model", esc(t.base) + (f' <span class="hint">{esc(t.lora)}</span>' if t.lora else "")))
    if t.epsilon is not None:
        rows.append(("Differential privacy", f"this model: accountant ε = {fmt_num(t.epsilon)}, δ = {fmt_num(t.delta)}"))
        if t.data_trainings is not None:
            total = (f"ε = {fmt_num(t.data_epsilon)}, δ = {fmt_num(t.data_delta)}" if t.data_epsilon is not None
                     else f'<span class="absent">no single figure: {esc(t.data_note or "")}</span>')
            rows.append(("Its data in total", f"{total} <span class=\"hint\">({t.data_trainings} training(s) on "
                                              "its corpus, composed: the service's privacy ledger)</span>"))
        rows.append(("Privacy unit", esc(t.unit) if t.unit else '<span class="absent">not recorded</span>'))
        if t.audit_epsilon is not None:
            rows.append(("Empirical audit", f"audited ε ≥ {fmt_num(t.audit_epsilon)} "
                                            f"({t.audit_confidence:.0%}) <span class=\"hint\">{esc(t.audit_guesses or '')}; "
                                            "one-run audit, Steinke et al. 2023</span>"))
        else:
            rows.append(("Empirical audit", '<span class="absent">not run (set audit: in the training config)</span>'))
    else:
        rows.append(("Differential privacy", "none (no DP guarantee)"))
    if t.confidentiality_epsilon is not None or t.confidentiality_delta is not None:
        basis = (f' <span class="hint">{esc(t.confidentiality_basis)}</span>' if t.confidentiality_basis
                 else ' <span class="absent">gamma and delta_2 of unrecorded origin</span>')
        rows.append(("CRT confidentiality",
                     f"(ε, δ) = ({fmt_num(t.confidentiality_epsilon)}, {fmt_num(t.confidentiality_delta)}){basis}"))
    if t.crt_split:
        rows.append(("CRT split", esc(t.crt_split)))
    return rows


def _card(i: int, m: ModelResult, ref: ModelResult | None) -> str:
    """A model's privacy card: its training, then each registered attack's rows (its
    ``card``, in the attacks' order; the papers' say "not run" where they did not)."""
    from attacks.registry import ATTACKS, in_order

    rows = _training_rows(m)
    for name in in_order(ATTACKS.names()):
        rows += ATTACKS.get(name).card(m.attacks.get(name), m, ref)
    took = f" · attacks took {m.seconds:.0f} s" if m.seconds else ""
    return (f'<section class="card" id="model-{i}"><h3>{esc(m.name)}</h3>'
            f'<p class="meta"><code>{esc(m.path)}</code>{took}</p>{_kv_table(rows)}</section>')


def _comparison(models: Sequence[ModelResult]) -> str:
    head = ("<tr><th>Model</th><th>Protection</th><th>Perplexity</th><th>Max exposure (bits)</th>"
            f"<th>Best MIA AUC</th><th>Best TPR@{fmt_pct(TARGET_FPR)} FPR</th><th>Extraction</th>"
            "<th>Name reconstruction</th></tr>")
    rows = []
    for i, m in enumerate(models):
        x = m.exposure
        log2r = log2_candidates(x) if x else None
        exposure = DASH if x is None else f"{x.max_exposure:.2f}" + (f" / {log2r:.1f}" if log2r else "")
        auc = best_auc(m.mia)
        best = best_tpr(m.mia, TARGET_FPR)
        if best:
            tpr = f"{fmt_pct(best[1].tpr)} ({esc(best[0].score)}, {best[1].negatives:,} neg.)"
        elif m.mia and any(tpr_at(r, TARGET_FPR) for r in m.mia.scores):
            tpr = '<span class="warn">not resolvable</span>'
        else:
            tpr = DASH
        ext = m.extraction
        rec = m.reconstruction
        cells = [
            f'<a href="#model-{i}">{esc(m.name)}</a>',
            esc(m.training.protection) if m.training else DASH,
            fmt_num(m.perplexity, ".2f") + ("" if m.perplexity_spans is None else
                                             f' <span class="hint">({m.perplexity_spans.outside:.2f} outside '
                                             "secrets)</span>"),
            exposure,
            DASH if auc is None else f"{auc.auc:.3f} ({esc(auc.score)})",
            tpr,
            DASH if ext is None else f"{ext.extracted:,} / {ext.prompts:,}",
            DASH if rec is None else fmt_pct(rec.rate),
        ]
        rows.append("<tr>" + "".join(
            f'<td class="num">{c}</td>' if k in (2, 3) else f"<td>{c}</td>" for k, c in enumerate(cells)) + "</tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _corpus_stats(stats: dict) -> str:
    keys = list(dict.fromkeys(k for v in stats.values() if isinstance(v, dict) for k in v))
    head = "<tr><th>Corpus</th>" + "".join(f"<th>{esc(k)}</th>" for k in keys) + "</tr>"

    def cell(v: object) -> str:
        return f'<td class="num">{v:.3g}</td>' if isinstance(v, (int, float)) else f"<td>{esc(v)}</td>"

    body = "".join(
        f"<tr><td>{esc(name)}</td>" + "".join(cell(v.get(k, DASH) if isinstance(v, dict) else DASH)
                                              for k in keys) + "</tr>"
        for name, v in stats.items())
    return f"<table>{head}{body}</table>"


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


def _attack_sections(models: Sequence[ModelResult]) -> str:
    """A section per attack with results whose ``render`` has one (``attacks.registry``), in
    the attacks' order; an attack not registered in this process is named, its figures
    left in ``evaluation.json``."""
    from attacks.registry import attack, in_order

    anchors = {m.name: f"model-{i}" for i, m in enumerate(models)}
    parts = []
    for name in in_order({n for m in models for n in m.attacks}):
        results = ModelResults({m.name: m.attacks[name] for m in models if name in m.attacks}, anchors)
        try:
            a = attack(name)
            title, body = a.title, a.render(results)
        except LookupError:
            title = name
            body = '<p class="absent">This attack is not installed here: its results are in evaluation.json.</p>'
        if body:
            parts.append(f'<h2 id="attack-{esc(name)}">{esc(title)}</h2>{body}')
    return "".join(parts)


def render_report(evaluation: Evaluation) -> str:
    """The report as one HTML string with every plot embedded."""
    ev = evaluation
    n = len(ev.models)
    notes = ("<h2>Notes</h2><ul>" + "".join(f"<li>{esc(s)}</li>" for s in ev.notes) + "</ul>") if ev.notes else ""
    stats = f"<h2>Corpus statistics</h2>{_corpus_stats(ev.corpus_stats)}" if ev.corpus_stats else ""
    if ev.models:
        ref = reference_model(ev.models)
        body = (f"<h2>Comparison</h2>{_comparison(ev.models)}"
                + _attack_sections(ev.models)
                + '<h2>Privacy cards</h2><div class="cards">'
                + "".join(_card(i, m, ref) for i, m in enumerate(ev.models))
                + f"</div><h2>Plots</h2>{plots_html(ev.models)}")
    else:
        body = '<p class="absent">This evaluation has no model results.</p>'
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>Privacy report — {esc(ev.id)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>'
        f"<body><h1>Privacy report — {esc(ev.id)}</h1>"
        f'<p class="meta">Evaluation <code>{esc(ev.id)}</code> · created {esc(ev.created)} · '
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
    _write_atomic(out / EVALUATION, to_json(evaluation) + "\n")
    html_path = out / REPORT
    _write_atomic(html_path, page)
    return html_path


def render_from_json(path_to_evaluation_json: str | os.PathLike,
                     out_html: str | os.PathLike | None = None) -> Path:
    """Re-render a stored ``evaluation.json``; by default to ``report.html`` beside it."""
    src = Path(path_to_evaluation_json)
    evaluation = from_dict(json.loads(src.read_text(encoding="utf-8")))
    dest = Path(out_html) if out_html is not None else src.with_name(REPORT)
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
