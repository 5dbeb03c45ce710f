"""A learning curve for detector adaptation (issue 51, item 3): how many annotated
documents a tenant needs. Per domain, on the development halves of the real corpora
(``../shared/data/real_dev``): the detector adapted on 25, 50, 100, 200 and all of the
training pool (``privatize train-ner --annotated``, rehearsal on), each scored on the same
held-out slice (the records ``privatize.redaction.adapt.held_out`` puts aside, by a hash of
their text, never trained on), beside the default detector on that slice in the same run.
Recall (gold spans fully covered), character precision, the one-sided 95% bound on the
miss rate, and training seconds; on TAB also TAB's own measures (``tab``: entity recall of
direct and quasi identifiers, token precision, recall and F1, as ``redaction_real.py``
scores them) of the adapted and the default detector on the same slice. Development
figures: the held-out halves of the corpora are the judge.

``--complete on`` adapts with ``--complete`` (the sample annotates everything the tenant
redacts: no rehearsal of the labels it does not cover, and the detector redacts only the
types it teaches), ``both`` adapts each size with and without it in the same run (rows
keyed by ``complete``). Those runs are saved as ``redaction_adapt_complete``. A run of some
domains keeps the other domains' curves of the last saved result (marked ``from_run``: that
run's commit and date) rather than dropping them.

    .venv/bin/python -m experiments.redaction_adapt [--domains clinical,multiwoz,tab]
        [--sizes 25,50,100,200,all] [--epochs N] [--complete off|on|both] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from experiments.common import ROOT, machine, save_result  # noqa: E402  (puts the project on sys.path)

DOMAINS = {  # file under real_dev, its --format, label maps (the clinical set's own types)
    "clinical": ("clinical_physionet_dev.jsonl", "jsonl",
                 {"HCPName": "PERSON", "PTName": "PERSON", "RelativeProxyName": "PERSON", "Date": "DATE",
                  "DateYear": "DATE", "Location": "GPE"}),
    "multiwoz": ("dialogue_multiwoz_val.jsonl", "multiwoz", {}),
    "tab": ("legal_tab_train.jsonl", "tab", {"LOC": "GPE"}),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", default="clinical,multiwoz,tab")
    ap.add_argument("--sizes", default="25,50,100,200,all")
    ap.add_argument("--epochs", type=int, default=None, help="default: the CLI's")
    ap.add_argument("--complete", default="off", choices=("off", "on", "both"),
                    help="adapt with --complete (on), without (off, the default) or both in the same run")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    args = ap.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from privatize.redaction.adapt import DEFAULT_HOLDOUT, adapt, held_out
    from privatize.redaction.engine import DEFAULT_MODEL

    real = Path(args.data) / "real_dev"
    if not real.is_dir():
        print(f"redaction_adapt: {real} not found (the shared data folder: --data)", file=sys.stderr)
        return 2
    out: dict = {"domains": {}, "holdout": DEFAULT_HOLDOUT}
    variants = {"off": (False,), "on": (True,), "both": (False, True)}[args.complete]
    for domain in args.domains.split(","):
        name, fmt, label_map = DOMAINS[domain]
        lines = (real / name).read_text(encoding="utf-8").splitlines()
        text_of = _text_reader(fmt)
        dev = [x for x in lines if held_out(text_of(x), DEFAULT_HOLDOUT)]
        pool = [x for x in lines if not held_out(text_of(x), DEFAULT_HOLDOUT)]
        random.Random(0).shuffle(pool)
        rows = []
        sizes = sorted({len(pool) if x == "all" else min(int(x), len(pool)) for x in args.sizes.split(",")})
        for k, complete in [(k, c) for k in sizes for c in variants]:  # a size past the pool is the pool
            with tempfile.TemporaryDirectory(prefix="adapt-curve-") as work:
                f = Path(work) / f"{domain}.jsonl"
                f.write_text("\n".join(pool[:k] + dev) + "\n", encoding="utf-8")
                t0 = time.perf_counter()
                kw = {"epochs": args.epochs} if args.epochs else {}
                tag = f"{domain} {k}{' complete' if complete else ''}"
                det = adapt(f, Path(work) / "detector", fmt=fmt, label_map=label_map or None, complete=complete,
                            **kw, progress=lambda m: print(f"  {tag}: {m}", file=sys.stderr, flush=True))
                seconds = time.perf_counter() - t0
                tab = _tab_measures(dev, str(Path(work) / "detector")) if domain == "tab" else None
            ev, base = det["evaluation"], det["base_evaluation"]
            row = {"docs": k, "complete": complete, "recall": ev["recall"], "char_precision": ev["char_precision"],
                   "char_recall": ev.get("char_recall"),
                   "recall_by_type": {t: r["recall"] for t, r in (ev.get("by_type") or {}).items()},
                   "miss_rate_upper_95": ev.get("miss_rate_upper_95"), "seconds": seconds,
                   "train_seconds": det.get("provenance", {}).get("train_seconds"),
                   "misses": ev.get("misses"), "gold_spans": ev.get("gold_spans"),
                   "trusted_labels": det.get("trusted_labels", []), "score_threshold": det.get("score_threshold"),
                   "train_spans": det.get("provenance", {}).get("train_spans")}
            if tab is not None:
                row["tab"] = tab
            rows.append(row)
            print(f"{domain}: {k:>4} annotated docs{' (complete)' if complete else ''}: recall {row['recall']:.3f}, "
                  f"character precision {row['char_precision']:.3f} (default detector {base['recall']:.3f} / {base['char_precision']:.3f}), "
                  f"trusted NER labels {row['trusted_labels'] or 'none'}, "
                  f"{seconds:.0f} s" + (f"; TAB token F1 {tab['token_f1']:.3f}, direct entity recall "
                                        f"{tab['entity_recall_direct']:.3f}" if tab else ""), flush=True)
        default = {"recall": base["recall"], "char_precision": base["char_precision"]}
        if domain == "tab":
            default["tab"] = _tab_measures(dev, DEFAULT_MODEL)
            print(f"tab: default detector: TAB token F1 {default['tab']['token_f1']:.3f}, direct entity recall "
                  f"{default['tab']['entity_recall_direct']:.3f}", flush=True)
        out["domains"][domain] = {"held_out_docs": len(dev), "pool_docs": len(pool), "curve": rows,
                                  "default": default}
    out["machine_note"] = machine()
    out["complete"] = args.complete
    name = "redaction_adapt" if args.complete == "off" else "redaction_adapt_complete"
    _keep_other_domains(out, ROOT / "benchmarks" / "results" / f"{name}.json")
    save_result(name, out)
    return 0


def _tab_measures(dev_lines: list[str], model: str) -> dict:
    """TAB's own measures (``redaction_real.score_tab``) on the held-out judgments of the
    detector ``model``: an adapted folder (at the threshold and trusted labels its
    ``detector.json`` holds, as ``--model DIR`` uses it) or the default model."""
    from experiments.redaction_real import legal_doc, score_tab
    from privatize.redaction.detect import Detector

    docs = [legal_doc(json.loads(x)) for x in dev_lines]
    found = Detector(model).detect([d["text"] for d in docs])
    preds = [[(s["start"], s["end"], s["entity_type"]) for s in r.spans] for r in found]
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in score_tab(docs, preds).items()}


def _keep_other_domains(out: dict, previous: Path) -> None:
    """A run of some domains keeps the other domains' curves from the last saved result
    (each marked with that run's commit and date under ``from_run``) instead of dropping them."""
    try:
        old = json.loads(previous.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for domain, block in (old.get("domains") or {}).items():
        if domain not in out["domains"]:
            out["domains"][domain] = {**block, "from_run": block.get("from_run") or
                                      {"commit": old.get("commit"), "date": old.get("date")}}


def _text_reader(fmt: str):
    if fmt == "multiwoz":
        return lambda line: "\n".join(t["text"] for t in json.loads(line)["turns"])
    return lambda line: json.loads(line)["text"]


if __name__ == "__main__":
    sys.exit(main())
