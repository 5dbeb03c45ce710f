"""Redaction quality: the redact stage's detector (policy pi) and its conservative flag
(pi_c) against Presidio's defaults (``AnalyzerEngine.analyze``, default recognizers,
default score threshold 0, the same spaCy model), on gold-labelled data, in one run.

Data (../shared/data):

* presidio-research ``synth_dataset_v2.json``: the report set (never used for tuning);
* presidio-research ``generated_large.json``: the tuning set (reported for reference);
* CustomerSim ``test.jsonl`` plus the 10 canary records of ``train.jsonl``.

Measures, per gold entity type and overall, with counts and 95% Wilson intervals:

* **type-agnostic recall**: a gold span is found when the predicted spans (of any type)
  cover at least half of its characters;
* **type-matched recall**: the same, counting only predicted spans of a type the gold
  type maps to (``TYPE_MAP`` below);
* **precision**: character precision (predicted characters inside gold spans /
  predicted characters) and span precision (predicted spans with at least half of
  their characters inside gold spans), type-agnostic;
* the share of gold PII characters left uncovered;
* **gamma** (pi's miss rate = 1 - type-agnostic recall) and **delta_2** (pi_c's miss
  rate) with one-sided 95% upper bounds (Wilson). delta_2 is given at two levels: span
  level (pi_c's signals cover at least half of the gold span's characters) and record
  level (the record holding the gold span is flagged at all; with whole documents as
  data points nearly everything is flagged, so this level says little).

Usage: ``python -m experiments.redaction_quality [--model NAME] [--limit N] [--sets a,b]``.
Writes ``benchmarks/results/redaction_quality[-<model>].json`` and ``.md``; with
``--append`` adds the markdown to ``benchmarks/results/DIARY.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

from experiments.common import ROOT, machine, need_data, save_result

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from privatize.redaction.engine import DEFAULT_MODEL, patch_tldextract, presidio_analyzer_engine  # noqa: E402

# gold type -> the predicted types that count as the same entity (type-matched recall).
# Addresses: a street address or the location / postcode parts of one. Reference-like
# gold types (order, tracking, canary) map to REFERENCE_NUMBER.
TYPE_MAP: dict[str, set[str]] = {
    "PERSON": {"PERSON"}, "NAME": {"PERSON"}, "PREFIX": {"PERSON", "TITLE"},
    "STREET_ADDRESS": {"STREET_ADDRESS", "LOCATION", "ZIP_CODE", "POSTCODE"},
    "ADDRESS": {"STREET_ADDRESS", "LOCATION", "ZIP_CODE", "POSTCODE"},
    "GPE": {"LOCATION"}, "LOCATION": {"LOCATION"},
    "ORGANIZATION": {"ORGANIZATION"}, "CREDIT_CARD": {"CREDIT_CARD"}, "DATE_TIME": {"DATE_TIME"},
    "TITLE": {"TITLE"}, "PHONE_NUMBER": {"PHONE_NUMBER"}, "PHONE": {"PHONE_NUMBER"}, "AGE": {"AGE"},
    "NRP": {"NRP"}, "EMAIL_ADDRESS": {"EMAIL_ADDRESS"}, "ZIP_CODE": {"ZIP_CODE", "POSTCODE"},
    "DOMAIN_NAME": {"URL"}, "IBAN_CODE": {"IBAN_CODE"}, "US_SSN": {"US_SSN"}, "IP_ADDRESS": {"IP_ADDRESS"},
    "US_DRIVER_LICENSE": {"US_DRIVER_LICENSE"}, "ORDER_NUMBER": {"REFERENCE_NUMBER"},
    "TRACKING_NUMBER": {"REFERENCE_NUMBER"}, "CANARY_SECRET": {"REFERENCE_NUMBER"},
    # experiments/pii_domains.py
    "ID": {"REFERENCE_NUMBER", "US_DRIVER_LICENSE", "US_PASSPORT", "US_BANK_NUMBER", "MEDICAL_LICENSE", "UK_NHS",
           "US_ITIN"},
    "URL": {"URL"}, "POSTCODE": {"POSTCODE", "ZIP_CODE"},
}

TARGETS = {  # synth_dataset_v2, type-agnostic recall
    "overall": 0.80, "PERSON": 0.80, "PHONE_NUMBER": 0.90, "STREET_ADDRESS": 0.70, "EMAIL_ADDRESS": 0.98,
    "US_SSN": 0.98, "IP_ADDRESS": 0.98, "CREDIT_CARD": 0.98,
}
PI_C_MAX_MISS = 0.02


# ---------------------------------------------------------------------------------------
# statistics

def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for k successes out of n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, centre - half), min(1.0, centre + half))


def upper_bound(k: int, n: int) -> float:
    """One-sided 95% upper bound on a rate of k events in n (Wilson, z = 1.645)."""
    return wilson(k, n, z=1.644854)[1]


# ---------------------------------------------------------------------------------------
# data

def load_presidio(path: Path, limit: int | None) -> list[dict]:
    items = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for x in items[:limit]:
        out.append({"text": x["full_text"], "gold": [(s["start_position"], s["end_position"], s["entity_type"])
                                                     for s in x["spans"]]})
    return out


def load_customersim(folder: Path, limit: int | None) -> list[dict]:
    out = []
    for line in open(folder / "test.jsonl", encoding="utf-8"):
        x = json.loads(line)
        out.append({"text": x["text"], "gold": [(s["start"], s["end"], s["type"]) for s in x["spans"]]})
    if limit:
        out = out[:limit]
    for line in open(folder / "train.jsonl", encoding="utf-8"):
        x = json.loads(line)
        if x.get("kind") == "canary":
            out.append({"text": x["text"], "gold": [(s["start"], s["end"], s["type"]) for s in x["spans"]]})
    return out


DOMAIN_DOCS = 200  # generated documents per domain


def load_domain(domain: str, split: str, limit: int | None) -> list[dict]:
    from experiments import pii_domains

    return pii_domains.generate(domain, limit or DOMAIN_DOCS, seed=0, split=split)


def datasets(names: list[str], limit: int | None) -> dict[str, list[dict]]:
    data = need_data()
    domains = {f"{d}{'' if split == 'test' else '-dev'}": (lambda d=d, split=split: load_domain(d, split, limit))
               for d in ("clinical", "legal", "email", "dialogue") for split in ("test", "dev")}
    available = {
        **domains,
        "synth_dataset_v2": lambda: load_presidio(data / "presidio_research" / "synth_dataset_v2.json", limit),
        "generated_large (tuning set)": lambda: load_presidio(data / "presidio_research" / "generated_large.json",
                                                              limit),
        "customersim": lambda: load_customersim(data / "customersim", limit),
    }
    chosen = {}
    for n in names:
        key = n if n in available else next((k for k in available if k.startswith(n)), None)
        if key is None:
            sys.exit(f"unknown set {n!r}; choose from {', '.join(available)}")
        chosen[key] = available[key]()
    return chosen


# ---------------------------------------------------------------------------------------
# scoring

def _expand_words(text: str, s: int, e: int) -> tuple[int, int]:
    while s > 0 and text[s - 1].isalnum():
        s -= 1
    while e < len(text) and text[e].isalnum():
        e += 1
    return s, e


_SENTENCE = re.compile(r"[^\n.!?]+(?:[.!?]+(?=\s|$)|$)|[^\n]+", re.MULTILINE)


def sentences(text: str) -> list[tuple[int, int]]:
    """Sentence-like units (lines, and sentences within lines): the units CRT routes."""
    return [m.span() for m in _SENTENCE.finditer(text) if text[m.start():m.end()].strip()]


def _cover(n: int, spans) -> bytearray:
    cov = bytearray(n)
    for s, e, *_ in spans:
        cov[max(0, s):min(n, e)] = b"\x01" * (min(n, e) - max(0, s))
    return cov


def score(docs: list[dict], preds: list[list[tuple]], pi_c: list[list[tuple]] | None = None,
          pi_c_flags: list[bool] | None = None) -> dict:
    """``preds`` per doc: (start, end, type); ``pi_c`` per doc: (start, end) intervals."""
    per = defaultdict(lambda: {"n": 0, "agnostic": 0, "matched": 0, "pi_c": 0, "pi_c_record": 0})
    gold_chars = covered_chars = pred_chars = pred_in_gold = 0
    pred_spans = pred_ok = 0
    pred_types = defaultdict(lambda: [0, 0])
    all_chars = strict_ok = lenient_num = lenient_den = 0
    units = public_units = 0
    for i, (doc, pred) in enumerate(zip(docs, preds)):
        text = doc["text"]
        n = len(text)
        all_chars += n
        # strict: a predicted character counts when it lies in a gold span whose type the
        # predicted type maps to; lenient: gold expanded to whole words, any type, and
        # only letters and digits count (spaces and punctuation are not over-redaction)
        gold_type = [None] * n
        lenient = bytearray(n)
        for s, e, t in doc["gold"]:
            for k in range(max(0, s), min(n, e)):
                gold_type[k] = t
            a, b = _expand_words(text, s, e)
            lenient[a:b] = b"\x01" * (b - a)
        seen = bytearray(n)
        for p in pred:
            for k in range(max(0, p[0]), min(n, p[1])):
                if seen[k]:
                    continue
                seen[k] = 1
                gt = gold_type[k]
                if gt is not None and p[2] in TYPE_MAP.get(gt, {gt}):
                    strict_ok += 1
                if text[k].isalnum():
                    lenient_den += 1
                    lenient_num += lenient[k]
        if pi_c is not None:
            pic_cov = _cover(n, pi_c[i])
            for a, b in sentences(text):
                units += 1
                public_units += not any(pic_cov[a:b])
        cov = _cover(n, pred)
        by_type = defaultdict(list)
        for p in pred:
            by_type[p[2]].append(p)
        gold = _cover(n, doc["gold"])
        pic = _cover(n, pi_c[i]) if pi_c is not None else None
        for s, e, t in doc["gold"]:
            st = per[t]
            st["n"] += 1
            need = (e - s) / 2
            if sum(cov[s:e]) >= need:
                st["agnostic"] += 1
            matched = [p for typ in TYPE_MAP.get(t, {t}) for p in by_type.get(typ, ())]
            if matched and sum(_cover(n, matched)[s:e]) >= need:
                st["matched"] += 1
            if pic is not None and sum(pic[s:e]) >= need:
                st["pi_c"] += 1
            if pi_c_flags is not None and pi_c_flags[i]:
                st["pi_c_record"] += 1
        g = sum(gold)
        gold_chars += g
        covered_chars += sum(1 for k in range(n) if gold[k] and cov[k])
        pred_chars += sum(cov)
        pred_in_gold += sum(1 for k in range(n) if gold[k] and cov[k])
        for p in pred:
            s, e = p[0], p[1]
            ok = 2 * sum(gold[s:e]) >= (e - s)
            pred_spans += 1
            pred_ok += ok
            pred_types[p[2]][0] += 1
            pred_types[p[2]][1] += ok
    total = {k: sum(v[k] for v in per.values()) for k in ("n", "agnostic", "matched", "pi_c", "pi_c_record")}
    out = {"per_type": {}, "overall": {}, "pred_types": {}}
    for t, st in sorted(per.items(), key=lambda kv: -kv[1]["n"]):
        out["per_type"][t] = _rates(st, pi_c is not None, pi_c_flags is not None)
    out["overall"] = _rates(total, pi_c is not None, pi_c_flags is not None)
    out["overall"].update({
        "char_precision": pred_in_gold / pred_chars if pred_chars else None,
        "char_precision_strict": strict_ok / pred_chars if pred_chars else None,
        "char_precision_lenient": lenient_num / lenient_den if lenient_den else None,
        "flagged_share": pred_chars / all_chars if all_chars else None,
        "span_precision": pred_ok / pred_spans if pred_spans else None,
        "span_precision_ci": wilson(pred_ok, pred_spans),
        "predicted_spans": pred_spans,
        "gold_chars": gold_chars,
        "gold_chars_uncovered": (gold_chars - covered_chars) / gold_chars if gold_chars else None,
        "gamma": 1 - total["agnostic"] / total["n"],
        "gamma_upper95": upper_bound(total["n"] - total["agnostic"], total["n"]),
    })
    if pi_c is not None:
        miss = total["n"] - total["pi_c"]
        out["overall"]["delta2_span"] = miss / total["n"]
        out["overall"]["delta2_span_upper95"] = upper_bound(miss, total["n"])
        out["overall"]["public_fraction_sentences"] = public_units / units if units else None
    if pi_c_flags is not None:
        miss = total["n"] - total["pi_c_record"]
        out["overall"]["delta2_record"] = miss / total["n"]
        out["overall"]["delta2_record_upper95"] = upper_bound(miss, total["n"])
        out["overall"]["records_flagged_pi_c"] = sum(pi_c_flags) / len(pi_c_flags)
    out["pred_types"] = {t: {"n": v[0], "precision": v[1] / v[0]} for t, v in sorted(pred_types.items())}
    return out


def _rates(st: dict, with_pic: bool, with_flags: bool) -> dict:
    n = st["n"]
    r = {"n": n, "recall": st["agnostic"] / n, "recall_ci": wilson(st["agnostic"], n),
         "recall_typed": st["matched"] / n, "recall_typed_ci": wilson(st["matched"], n)}
    if with_pic:
        r["pi_c_recall"] = st["pi_c"] / n
    if with_flags:
        r["pi_c_record_recall"] = st["pi_c_record"] / n
    return r


# ---------------------------------------------------------------------------------------
# systems

def run_ours(texts: list[str], model: str, profile: str = "balanced") -> tuple[list, list, list, float]:
    from privatize.redaction.detect import Detector

    det = Detector(model, profile=profile)
    det.detect(texts[:4])  # warm-up
    t0 = time.perf_counter()
    res = det.detect(texts, want_intervals=True)
    secs = time.perf_counter() - t0
    preds = [[(s["start"], s["end"], s["entity_type"]) for s in r.spans] for r in res]
    return preds, [r.pi_c_intervals for r in res], [r.pi_c_hit for r in res], secs


def run_presidio(texts: list[str], model: str) -> tuple[list, float]:
    patch_tldextract()
    engine = presidio_analyzer_engine(model)
    engine.analyze(texts[0], language="en")
    t0 = time.perf_counter()
    preds = [[(r.start, r.end, r.entity_type) for r in engine.analyze(t, language="en")] for t in texts]
    return preds, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------
# report

def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _ci(ci) -> str:
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def markdown(results: dict, model: str) -> str:
    lines = [f"### Model `{model}`", ""]
    for name, res in results["sets"].items():
        o, p = res["ours"]["overall"], res["presidio"]["overall"]
        lines += [f"**{name}** ({res['records']} records, {o['n']} gold spans; detection {res['ours_seconds']:.1f} s "
                  f"vs Presidio {res['presidio_seconds']:.1f} s)", "",
                  "| gold type | n | ours recall [95% CI] | ours typed | Presidio recall | Presidio typed | pi_c (span) |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for t, r in res["ours"]["per_type"].items():
            b = res["presidio"]["per_type"][t]
            lines.append(f"| {t} | {r['n']} | {_pct(r['recall'])} {_ci(r['recall_ci'])} | {_pct(r['recall_typed'])} | "
                         f"{_pct(b['recall'])} | {_pct(b['recall_typed'])} | {_pct(r.get('pi_c_recall'))} |")
        lines.append(f"| **overall** | {o['n']} | **{_pct(o['recall'])}** {_ci(o['recall_ci'])} | "
                     f"{_pct(o['recall_typed'])} | {_pct(p['recall'])} | {_pct(p['recall_typed'])} | "
                     f"{_pct(o.get('pi_c_recall'))} |")
        lines += ["",
                  "| measure | ours (pi) | Presidio defaults |", "|---|---:|---:|",
                  f"| character precision (any type) | {_pct(o['char_precision'])} | {_pct(p['char_precision'])} |",
                  f"| character precision, strict (type-matched) | {_pct(o['char_precision_strict'])} | "
                  f"{_pct(p['char_precision_strict'])} |",
                  f"| character precision, lenient (whole words, letters and digits) | "
                  f"{_pct(o['char_precision_lenient'])} | {_pct(p['char_precision_lenient'])} |",
                  f"| share of text flagged | {_pct(o['flagged_share'])} | {_pct(p['flagged_share'])} |",
                  f"| span precision | {_pct(o['span_precision'])} | {_pct(p['span_precision'])} |",
                  f"| gold PII characters left uncovered | {_pct(o['gold_chars_uncovered'])} | "
                  f"{_pct(p['gold_chars_uncovered'])} |",
                  f"| gamma (miss rate), upper 95% | {_pct(o['gamma'])}, {_pct(o['gamma_upper95'])} | "
                  f"{_pct(p['gamma'])}, {_pct(p['gamma_upper95'])} |",
                  f"| delta_2 (pi_c miss rate, span level), upper 95% | {_pct(o['delta2_span'])}, "
                  f"{_pct(o['delta2_span_upper95'])} | - |",
                  f"| delta_2 (record level), upper 95% | {_pct(o['delta2_record'])}, "
                  f"{_pct(o['delta2_record_upper95'])} | - |",
                  f"| records flagged by pi_c | {_pct(o['records_flagged_pi_c'])} | - |",
                  f"| CRT public fraction (sentences pi_c leaves unflagged) | "
                  f"{_pct(o['public_fraction_sentences'])} | - |", ""]
        if "targets" in res:
            met = ", ".join(f"{k} {'met' if v['met'] else 'NOT met'} ({_pct(v['value'])} vs {_pct(v['target'])})"
                            for k, v in res["targets"].items())
            lines += [f"Targets: {met}.", ""]
    return "\n".join(lines)


MULTI = "multi-domain"
MULTI_PARTS = ("clinical", "legal", "email", "dialogue", "customersim")


def check_targets(res: dict, name: str) -> dict:
    out = {}
    o = res["ours"]
    if name.startswith("synth_dataset_v2"):
        for k, target in TARGETS.items():
            v = o["overall"]["recall"] if k == "overall" else o["per_type"].get(k, {}).get("recall")
            if v is not None:
                out[k] = {"target": target, "value": v, "met": v >= target}
        cp, bp = o["overall"]["char_precision"], res["presidio"]["overall"]["char_precision"]
        out["char_precision_vs_presidio"] = {"target": bp - 0.10, "value": cp, "met": cp >= bp - 0.10}
    if name.startswith("synth_dataset_v2"):
        out["recall_0.88"] = {"target": 0.88, "value": o["overall"]["recall"], "met": o["overall"]["recall"] >= 0.88}
    if name.startswith(MULTI):
        r = o["overall"]["recall"]
        out["recall_0.85"] = {"target": 0.85, "value": r, "met": r >= 0.85}
        for t, v in o["per_type"].items():
            b = res["presidio"]["per_type"][t]["recall"]
            out[f"{t}_vs_presidio"] = {"target": b, "value": v["recall"], "met": v["recall"] >= b}
        for k in ("char_precision", "char_precision_strict", "char_precision_lenient"):
            v, b = o["overall"][k], res["presidio"]["overall"][k]
            out[f"{k}_vs_presidio"] = {"target": b, "value": v, "met": v >= b}
    if name.startswith(("synth_dataset_v2", "customersim", "generated_large")):
        d2 = o["overall"]["delta2_span"]
        out["pi_c_delta2_span"] = {"target": PI_C_MAX_MISS, "value": d2, "met": d2 <= PI_C_MAX_MISS}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--limit", type=int, default=None, help="records per set (default: all)")
    ap.add_argument("--sets", default="clinical,legal,email,dialogue,customersim,synth_dataset_v2,generated_large",
                    help="comma-separated; a generated domain's dev split is <domain>-dev (tune there only)")
    ap.add_argument("--profile", default="balanced", choices=("balanced", "high_recall"))
    ap.add_argument("--append", action="store_true", help="append the markdown to benchmarks/results/DIARY.md")
    args = ap.parse_args()

    results = {"date": dt.date.today().isoformat(), "machine": machine(), "model": args.model,
               "profile": args.profile,
               "type_map": {k: sorted(v) for k, v in TYPE_MAP.items()}, "sets": {}}
    runs = {}
    for name, docs in datasets(args.sets.split(","), args.limit).items():
        texts = [d["text"] for d in docs]
        ours, pic, flags, secs = run_ours(texts, args.model, args.profile)
        base, bsecs = run_presidio(texts, args.model)
        runs[name] = (docs, ours, pic, flags, secs, base, bsecs)
    parts = [n for n in MULTI_PARTS if n in runs]
    if len(parts) >= 2:  # the multi-domain aggregate: every test set above but the Presidio ones
        runs[f"{MULTI} ({' + '.join(parts)})"] = tuple(
            [x for n in parts for x in runs[n][k]] if k not in (4, 6) else sum(runs[n][k] for n in parts)
            for k in range(7))
    for name, (docs, ours, pic, flags, secs, base, bsecs) in runs.items():
        res = {"records": len(docs), "ours": score(docs, ours, pic, flags), "presidio": score(docs, base),
               "ours_seconds": secs, "presidio_seconds": bsecs}
        res["targets"] = check_targets(res, name)
        results["sets"][name] = res
        o, p = res["ours"]["overall"], res["presidio"]["overall"]
        print(f"{name}: recall {o['recall']:.3f} (Presidio {p['recall']:.3f}, ratio {o['recall'] / p['recall']:.2f}x), "
              f"char precision {o['char_precision']:.3f} (Presidio {p['char_precision']:.3f}), "
              f"delta_2 span {o['delta2_span']:.4f} record {o['delta2_record']:.4f}; strict {o['char_precision_strict']:.3f} "
              f"(P {p['char_precision_strict']:.3f}), lenient {o['char_precision_lenient']:.3f} "
              f"(P {p['char_precision_lenient']:.3f}), flagged {o['flagged_share']:.3f} (P {p['flagged_share']:.3f}), "
              f"public {o['public_fraction_sentences']:.3f}; {bsecs / secs:.2f}x Presidio's speed")
        for t, r in res["ours"]["per_type"].items():
            print(f"  {t:20s} n={r['n']:5d} recall {r['recall']:.3f} typed {r['recall_typed']:.3f} "
                  f"pi_c {r['pi_c_recall']:.3f} | Presidio {res['presidio']['per_type'][t]['recall']:.3f}")
        print("  predicted types (ours):", {t: (v["n"], round(v["precision"], 2))
                                            for t, v in res["ours"]["pred_types"].items()})
        for k, v in res["targets"].items():
            print(f"  target {k}: {'met' if v['met'] else 'NOT MET'} ({v['value']:.3f} vs {v['target']:.3f})")
    out_dir = ROOT / "benchmarks" / "results"
    out_dir.mkdir(exist_ok=True)
    suffix = ("" if args.model == DEFAULT_MODEL else "-" + Path(args.model).name) + (
        "" if args.profile == "balanced" else "-" + args.profile)
    save_result(f"redaction_quality{suffix}", results)
    md = markdown(results, args.model)
    (out_dir / f"redaction_quality{suffix}.md").write_text(md + "\n", encoding="utf-8")
    print(f"wrote {out_dir / f'redaction_quality{suffix}.json'} and .md")
    if args.append:
        with open(ROOT / "benchmarks" / "results" / "DIARY.md", "a", encoding="utf-8") as fh:
            fh.write("\n" + md + "\n")


if __name__ == "__main__":
    main()
