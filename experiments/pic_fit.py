"""Fit and calibrate the conservative policy pi_c on labelled sentences (issue 50).

    python -m experiments.pic_fit --data ../shared/data [--target 0.01] [--out privatize/redaction/pic_calibrated.json]

1. The development halves of the clinical notes and MultiWOZ and a seeded sample of
   CustomerSim's train split are cut into sentences (:mod:`experiments.gold_sentences`)
   and each document assigned to ``fit``, ``calibration`` or ``report`` by its group
   (patient, dialogue). CustomerSim's test split is never read here.
2. The product's detector (:class:`privatize.redaction.detect.Detector`, defaults) runs
   over every sentence once, in its document's style (as the recipe's ``split.doc_style``
   records it), and returns pi's spans and every pi_c candidate with its
   features (:mod:`privatize.redaction.evidence`); cached under ``--work``.
3. **Fit** on the ``fit`` part: a logistic regression on candidates, label "overlaps a
   gold secret" (:func:`privatize.redaction.calibration.fit`), each corpus weighted
   equally.
4. **Calibrate** on the ``calibration`` part only: per corpus, the largest threshold at
   which the one-sided 95% Clopper-Pearson bound on the share of secret sentences routed
   public (neither a pi hit nor a candidate at or above the threshold) is at most
   ``--target`` (a corpus too small for the target allows no miss); the model's
   threshold is the smallest of them, so every corpus meets its own bound.
5. The model file records the weights, the threshold, the calibration figures per corpus
   and pooled (delta_2's bound is the pooled one), gamma (pi's miss rate on the same
   sentences) and the provenance; the ``report`` part's figures are printed, not used.

``--keep-weights FILE`` skips step 3: FILE's weights (an earlier fit on the same fit part)
are calibrated anew with today's detector, so the thresholds and bounds hold for the
detector that ships without the weights moving (a refit moves every domain's threshold).

``--rest`` (run after a fit: a fit rewrites the file without it) keeps ``--out``'s weights
and adds what ``pi_c.scope: rest`` needs: the weights of the ``beside`` candidates (words
beside a span pi removes, fitted apart on the same fit part) and, per corpus and by
default, thresholds calibrated on the same calibration part, where a miss is a secret
sentence that keeps a readable secret after pi's spans and has no candidate outside them
at or above the threshold::

    python -m experiments.pic_fit --rest [--target 0.02]
"""

from __future__ import annotations

import argparse
import math
import pickle
import subprocess
import time
from datetime import date
from pathlib import Path

from experiments.gold_sentences import CORPORA, Sentence, load, part_of, sentences
from privatize.redaction.spans import left_readable

ROOT = Path(__file__).resolve().parents[1]
CUSTOMERSIM_SAMPLE = 1500
DOMAIN_NAMES = {"clinical": "clinical", "multiwoz": "booking", "customersim": "support"}
"""The calibration domains a spec names (``pi_c.domain``), by corpus."""
DATA_DESC = {"clinical": "PhysioNet deid ICU notes, development half (real_dev/clinical_physionet_dev.jsonl)",
             "multiwoz": "MultiWOZ 2.1 validation (real_dev/dialogue_multiwoz_val.jsonl; Addr, Phone, Post, Ref, Id)",
             "customersim": f"CustomerSim train.jsonl, seeded sample of {CUSTOMERSIM_SAMPLE} dialogues"}


def _overlaps(a: int, b: int, spans) -> bool:
    return any(s < b and a < e for s, e, *_ in spans)


def balanced(fit_rows: dict[str, list]) -> tuple[list, dict[str, int]]:
    """The fit part's rows of every corpus, each corpus weighted equally (repeated up to
    the largest): the training rows and each corpus's repeat count."""
    most = max(len(v) for v in fit_rows.values())
    reps = {c: max(1, round(most / max(1, len(v)))) for c, v in fit_rows.items()}
    return [x for c, v in fit_rows.items() for x in v * reps[c]], reps


def calibrated(scores, target: float, corpus: str):
    """:func:`calibrate_within`, saying where a corpus is too small for the target."""
    from privatize.redaction.calibration import calibrate_within

    cal, shown = calibrate_within(scores, target)
    if not shown:
        finite = sorted(s for s in scores if s is not None and s != math.inf)
        print(f"  {corpus}: {len(scores)} secret sentences cannot show {target}; no avoidable miss allowed "
              f"(lowest score {finite[0] if finite else None})")
    return cal


def evidence(corpus: str, data: Path, work: Path, *, split: str = "train", limit: int | None = None,
             progress: bool = True) -> list[dict]:
    """Per sentence of ``corpus``: part, secret, pi hit, pi's miss and the candidates
    (kind, features, label), cached in ``work``."""
    cache = work / f"{corpus}-{split}-{limit}-v3.pkl"  # v3: with in_pi and the beside candidates
    if cache.is_file():
        return pickle.loads(cache.read_bytes())
    from privatize.redaction.detect import Detector, PiCOptions
    from privatize.redaction.spans import inside_any
    from privatize.redaction.styles import detect_style

    det = Detector(pi_c=PiCOptions(policy="strict"))
    docs = load(corpus, data, split=split, limit=limit)
    # each sentence read in its document's style, as the CRT recipe's split stage records it (doc_style)
    sents: list[tuple[str, str, Sentence]] = [(part_of(corpus, d.group) if split == "train" or corpus != "customersim"
                                               else "report", detect_style(d.text), s)
                                              for d in docs for s in sentences(d)]
    out = []
    t0 = time.perf_counter()
    step = 512
    for k in range(0, len(sents), step):
        chunk = sents[k:k + step]
        dets = det.detect([s.text for _, _, s in chunk], want_evidence=True, styles=[st for _, st, _ in chunk])
        for (part, _, s), d in zip(chunk, dets):
            removed = [(sp["start"], sp["end"]) for sp in d.spans]
            pi_miss = left_readable(s.text, s.secrets, removed)
            out.append({"part": part, "doc": s.doc, "secret": s.secret, "pi_hit": bool(d.spans), "pi_miss": pi_miss,
                        "types": sorted({t for *_, t in s.secrets}), "chars": len(s.text),
                        "cands": [(kind, feats, int(_overlaps(a, b, s.secrets))) for a, b, kind, feats in d.evidence],
                        # per candidate: wholly inside a span pi removes (pi_c.scope rest does not score it)
                        "in_pi": [int(inside_any(a, b, removed)) for a, b, _, _ in d.evidence],
                        "strict": d.pi_c_hit})
        if progress:
            print(f"  {corpus}: {min(k + step, len(sents))}/{len(sents)} sentences "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    work.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(pickle.dumps(out))
    return out


def sentence_score(model, row: dict) -> float | None:
    """``inf`` for a pi hit, the strongest candidate's score, ``None`` without candidates."""
    if row["pi_hit"]:
        return math.inf
    scores = [model.score(f) for k, f, _ in row["cands"] if k != "beside"]  # beside: the rest scope's own
    return max(scores) if scores else None


def rest_score(model, row: dict) -> float | None:
    """``pi_c.scope: rest``: the strongest score among the candidates pi's spans leave in the
    clear, ``None`` without one."""
    scores = [model.score(f) for (_, f, _), inside in zip(row["cands"], row["in_pi"]) if not inside]
    return max(scores) if scores else None


def rest_secret_score(model, row: dict) -> float | None:
    """A secret sentence's entry for :func:`calibrate` under ``scope: rest``: ``inf`` where
    pi's spans leave no secret readable (public or not, its text holds none), else its
    rest score (a miss below the threshold)."""
    return math.inf if not row["pi_miss"] else rest_score(model, row)


def split_figures(rows: list[dict], public, missed) -> dict:
    """The split's figures over labelled ``rows``: ``public(r)`` says where a sentence goes,
    ``missed(r)`` whether a secret sentence made public counts against delta_2."""
    from privatize.redaction.calibration import clopper_pearson_upper

    secret = [r for r in rows if r["secret"]]
    free = [r for r in rows if not r["secret"]]
    pub = sum(public(r) for r in rows)
    misses = sum(public(r) and missed(r) for r in secret)
    return {"sentences": len(rows), "secret": len(secret), "secret_free": len(free), "public": pub,
            "public_share": pub / len(rows) if rows else 0.0,
            "efficiency": sum(public(r) for r in free) / len(free) if free else 0.0, "misses": misses,
            "miss_rate": misses / len(secret) if secret else 0.0,
            "miss_upper95": clopper_pearson_upper(misses, len(secret)) if secret else None}


def rest_routing(model, rows: list[dict], threshold: float) -> dict:
    """Split figures under ``scope: rest``: a sentence is public when no candidate pi left
    in the clear reaches ``threshold``; a miss is a public sentence that keeps a readable
    secret."""
    def public(r):
        sc = rest_score(model, r)
        return sc is None or sc < threshold

    return split_figures(rows, public, lambda r: r["pi_miss"])


def calibrate_rest(args, rows: dict) -> None:
    """``--rest``: thresholds for ``pi_c.scope: rest`` added to the model file ``--out``
    (its weights kept), calibrated per corpus on the same ``calibration`` part."""
    from privatize.redaction.calibration import clopper_pearson_upper, fit, load_model

    load_model.cache_clear()
    model = load_model(str(args.out))
    # the beside candidates' weights, fitted apart on the fit part (each corpus weighted
    # equally), their own intercept folded into the always-present feature "beside"
    weights = {f: w for f, w in model.weights.items() if not f.startswith("beside")}
    fit_rows = {c: [(f, y) for r in rs if r["part"] == "fit" for k, f, y in r["cands"] if k == "beside"]
                for c, rs in rows.items()}
    train, _ = balanced(fit_rows)
    for c, v in fit_rows.items():
        print(f"fit beside {c}: {len(v)} candidates ({sum(y for _, y in v)} on secrets)")
    bw, bb = fit(train, l2=args.l2, min_count=args.min_count)
    weights.update(bw)
    weights["beside"] = bw.get("beside", 0.0) + bb - model.bias
    model = type(model)(weights, model.bias, model.threshold, model.meta, model.path)
    cal = {c: [r for r in rs if r["part"] == "calibration"] for c, rs in rows.items()}
    per = {}
    for c, rs in cal.items():
        per[c] = calibrated([rest_secret_score(model, r) for r in rs if r["secret"]], args.target, c)
        print(f"rest calibration {c}: threshold {per[c].threshold:.4f}, misses {per[c].misses}/{per[c].n_secret}, "
              f"bound {per[c].bound:.4f}")
    threshold = min(p.threshold for p in per.values())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or None
    rule = ("per corpus, the largest threshold whose one-sided 95% Clopper-Pearson bound on secret sentences that "
            "keep a readable secret after pi's spans and have no candidate outside them at or above the threshold "
            "is at most the target; the default threshold is the smallest of these, each domain's its own")

    def block(data, f, gamma_rows, t, per_corpus=None):
        g = sum(r["pi_miss"] for r in gamma_rows)
        cal = {"data": data, "target": args.target, "confidence": 0.95, "misses": f["misses"],
               "n_secret": f["secret"], "bound": f["miss_upper95"], "efficiency": f["efficiency"],
               "public_share": f["public_share"], "gamma": g / len(gamma_rows),
               "gamma_upper95": clopper_pearson_upper(g, len(gamma_rows)), "rule": rule}
        if per_corpus:  # the default's figures on each corpus: its stated delta_2 is their largest bound
            cal["per_corpus"] = per_corpus
        return {"threshold": t, "created": date.today().isoformat(), "commit": commit,
                "command": f"python -m experiments.pic_fit --rest --target {args.target}", "calibration": cal}

    meta = dict(model.meta)
    meta["beside_fit"] = {"data": meta.get("fit", {}).get("data"), "l2": args.l2, "min_count": args.min_count,
                          "candidates": {c: len(v) for c, v in fit_rows.items()}, "weights": len(bw),
                          "rule": "the beside candidates' own logistic fit on the fit part; record scope never "
                                  "scores them"}
    pooled = [r for rs in cal.values() for r in rs]
    meta["rest"] = block([f"{DATA_DESC[c]}: groups hashed to 50-74 of 100" for c in CORPORA],
                         rest_routing(model, pooled, threshold), [r for r in pooled if r["secret"]], threshold,
                         {c: rest_routing(model, rs, threshold) for c, rs in cal.items()})
    domains = {k: dict(v) for k, v in (meta.get("domains") or {}).items()}
    for c in CORPORA:
        domains[DOMAIN_NAMES[c]]["rest"] = block([f"{DATA_DESC[c]}: groups hashed to 50-74 of 100"],
                                                 rest_routing(model, cal[c], per[c].threshold),
                                                 [r for r in cal[c] if r["secret"]], per[c].threshold)
    meta["domains"] = domains
    type(model)(weights, model.bias, model.threshold, meta).save(args.out)
    print(f"rest threshold {threshold:.4f}; pooled: {meta['rest']['calibration']}")
    for c, rs in rows.items():
        rep = [r for r in rs if r["part"] == "report"]
        for name, t in (("record scope, default", model.threshold), ("rest, default", threshold),
                        (f"rest, {DOMAIN_NAMES[c]}", per[c].threshold)):
            f = rest_routing(model, rep, t) if name.startswith("rest") else routing(model, rep, t)
            if f["sentences"]:
                print(f"report part {c}, {name} ({t:.4f}): efficiency {f['efficiency']:.3f}, "
                      f"public {f['public_share']:.3f}, misses {f['misses']}/{f['secret']} "
                      f"(upper95 {f['miss_upper95']:.4f})")
    print(f"wrote {args.out}")


def routing(model, rows: list[dict], threshold: float | None = None) -> dict:
    """Split figures of ``rows`` under ``model`` (its threshold unless given); every secret
    sentence made public is a miss."""
    t = model.threshold if threshold is None else threshold

    def public(r):
        s = sentence_score(model, r)
        return s is None or s < t

    return split_figures(rows, public, lambda r: True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "work" / "pic_evidence")
    ap.add_argument("--target", type=float, default=0.02, help="miss-rate bound each corpus must meet (95%%)")
    ap.add_argument("--l2", type=float, default=2.0)
    ap.add_argument("--min-count", type=int, default=5, help="features seen in fewer fit candidates are dropped")
    ap.add_argument("--out", type=Path, default=ROOT / "privatize" / "redaction" / "pic_calibrated.json")
    ap.add_argument("--keep-weights", type=Path, default=None, metavar="FILE",
                    help="take FILE's weights (fitted earlier on the same fit part) and calibrate them anew with "
                         "today's detector: thresholds and bounds stay valid for the detector that ships")
    ap.add_argument("--rest", action="store_true",
                    help="keep --out's weights and add thresholds for pi_c.scope rest (what pi leaves in the clear)")
    args = ap.parse_args()
    from privatize.redaction.calibration import PiCModel, clopper_pearson_upper, fit

    rows = {c: evidence(c, args.data, args.work, limit=CUSTOMERSIM_SAMPLE if c == "customersim" else None)
            for c in CORPORA}
    if args.rest:
        calibrate_rest(args, rows)
        return
    # fit: candidates of the fit part, each corpus weighted equally (by repetition to the largest)
    fit_rows = {c: [(f, y) for r in rs if r["part"] == "fit" for k, f, y in r["cands"] if k != "beside"]
                for c, rs in rows.items()}
    kept = None
    if args.keep_weights is not None:
        from privatize.redaction.calibration import load_model

        old = load_model(args.keep_weights)
        weights, bias = old.weights, old.bias
        kept = {"from": str(args.keep_weights.name), "created": old.meta.get("created"),
                "commit": old.meta.get("commit"), "candidates": (old.meta.get("fit") or {}).get("candidates")}
        print(f"kept {len(weights)} weights fitted {kept['created']} at {kept['commit']}")
    else:
        train, reps = balanced(fit_rows)
        for c, v in fit_rows.items():
            print(f"fit {c}: {len(v)} candidates ({sum(y for _, y in v)} on secrets), weight x{reps[c]}")
        t0 = time.perf_counter()
        weights, bias = fit(train, l2=args.l2, min_count=args.min_count)
        print(f"fitted {len(weights)} weights in {time.perf_counter() - t0:.1f} s")
    model = PiCModel(weights, bias, 0.0)
    # calibrate on the calibration part: per corpus, then the smallest threshold
    cal = {c: [r for r in rs if r["part"] == "calibration"] for c, rs in rows.items()}
    per = {}
    for c, rs in cal.items():
        per[c] = calibrated([sentence_score(model, r) for r in rs if r["secret"]], args.target, c)
        print(f"calibration {c}: threshold {per[c].threshold:.4f}, misses {per[c].misses}/{per[c].n_secret}, "
              f"bound {per[c].bound:.4f}")
    threshold = min(p.threshold for p in per.values())
    model = PiCModel(weights, bias, threshold)
    pooled = [r for rs in cal.values() for r in rs]
    figures = {c: routing(model, rs) for c, rs in cal.items()}
    figures["pooled"] = routing(model, pooled)
    own = {c: routing(model, rs, per[c].threshold) for c, rs in cal.items()}
    secret_pooled = [r for r in pooled if r["secret"]]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or None

    def cal_block(data, f, gamma_rows):
        g = sum(r["pi_miss"] for r in gamma_rows)
        return {"data": data, "target": args.target, "confidence": 0.95, "misses": f["misses"],
                "n_secret": f["secret"], "bound": f["miss_upper95"], "efficiency": f["efficiency"],
                "public_share": f["public_share"], "gamma": g / len(gamma_rows),
                "gamma_upper95": clopper_pearson_upper(g, len(gamma_rows))}

    domains = {DOMAIN_NAMES[c]: {"threshold": per[c].threshold,
                                 "calibration": cal_block([f"{DATA_DESC[c]}: groups hashed to 50-74 of 100"], own[c],
                                                          [r for r in cal[c] if r["secret"]])}
               for c in CORPORA}
    meta = {
        "created": date.today().isoformat(), "commit": commit,
        "command": f"python -m experiments.pic_fit --target {args.target} --l2 {args.l2} --min-count {args.min_count}"
                   + (f" --keep-weights {args.keep_weights.name}" if kept else ""),
        "unit": "sentence (the CRT recipe's split rules)",
        "fit": {"data": [f"{DATA_DESC[c]}: groups hashed to 0-49 of 100" for c in CORPORA],
                "candidates": kept["candidates"] if kept else {c: len(v) for c, v in fit_rows.items()},
                "l2": args.l2, "min_count": args.min_count,
                **({"weights_kept": f"fitted {kept['created']} at {kept['commit']} on this fit part with that "
                                    "commit's detector; calibrated here with this one"} if kept else {})},
        "calibration": {**cal_block([f"{DATA_DESC[c]}: groups hashed to 50-74 of 100" for c in CORPORA],
                                    figures["pooled"], secret_pooled),
                        "rule": "per corpus, the largest threshold whose one-sided 95% Clopper-Pearson bound on "
                                "secret sentences routed public is at most the target (no avoidable miss where the "
                                "corpus is too small for the target); the default threshold is the smallest of "
                                "these, each domain's its own",
                        "per_corpus": figures},
        "domains": domains,
    }
    model = PiCModel(weights, bias, threshold, meta)
    model.save(args.out)
    print(f"threshold {threshold:.4f}; pooled calibration: {figures['pooled']}")
    for c, rs in rows.items():
        rep = [r for r in rs if r["part"] == "report"]
        for name, t in (("default", threshold), (DOMAIN_NAMES[c], per[c].threshold)):
            f = routing(model, rep, t)
            if f["sentences"]:
                print(f"report part {c}, threshold {name} ({t:.4f}): efficiency {f['efficiency']:.3f}, "
                      f"public {f['public_share']:.3f}, misses {f['misses']}/{f['secret']} "
                      f"(upper95 {f['miss_upper95']:.4f})")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
