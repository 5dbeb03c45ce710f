"""What a tenant's terms add to an adapted detector (issue 51), on the clinical development
notes, scored on other patients: the detector adapted on N notes of some patients
(``privatize train-ner --annotated`` with its defaults, general rehearsal included, but NER
only: ``sample_terms=False``), then the same
folder with the terms its training notes teach (:func:`privatize.redaction.terms.sample_terms`),
then with the tenant's lists too (``--terms``; here the deid package's hospital, local-place
and doctor-name lists that ship with the corpus, ``real_dev/physionet_lists``: what a
hospital would give), beside the default detector, all on the notes of the held-out patients.

Records carry their patient as ``group``, so the hold-out is by patient
(:func:`privatize.redaction.adapt.holdout_key`): a patient's name seen in training cannot be
found again in its other notes, which a hold-out by note would allow. Development figures:
the held-out half of the corpus (other patients again) is the judge.

    .venv/bin/python -m experiments.redaction_terms [--sizes 50,200] [--holdout 0.5]
        [--epochs N] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from experiments.common import ROOT, machine, save_result  # noqa: E402  (puts the project on sys.path)

LABEL_MAP = {"HCPName": "PERSON", "PTName": "PERSON", "RelativeProxyName": "PERSON", "Date": "DATE",
             "DateYear": "DATE", "Location": "GPE"}
LISTS = (("LOCATION", "stripped_hospitals.txt"), ("LOCATION", "local_places_unambig.txt"),
         ("PERSON", "doctor_last_names.txt"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="50,200")
    ap.add_argument("--holdout", type=float, default=0.5, help="share of patients held out (by a hash)")
    ap.add_argument("--epochs", type=int, default=None, help="default: the CLI's")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    args = ap.parse_args(argv)
    from privatize.redaction.adapt import adapt, entity_types, evaluate, held_out, holdout_key, read_annotated
    from privatize.redaction.engine import DEFAULT_MODEL, ner_mapping
    from privatize.redaction.detect import Detector
    from privatize.redaction.terms import TermSet, read_term_file, sample_terms

    real = Path(args.data) / "real_dev"
    src = real / "clinical_physionet_dev.jsonl"
    if not src.is_file():
        print(f"redaction_terms: {src} not found (the shared data folder: --data)", file=sys.stderr)
        return 2
    rows_in = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
    for r in rows_in:
        r["group"] = r["patient"]
    test_rows = [r for r in rows_in if held_out(holdout_key(r), args.holdout)]
    pool = [r for r in rows_in if not held_out(holdout_key(r), args.holdout)]
    random.Random(0).shuffle(pool)
    lists = [(etype, real / "physionet_lists" / name) for etype, name in LISTS]
    out: dict = {"holdout": args.holdout, "test_notes": len(test_rows),
                 "test_patients": len({r["group"] for r in test_rows}), "pool_notes": len(pool),
                 "pool_patients": len({r["group"] for r in pool}), "lists": [f"{t}={p.name}" for t, p in lists],
                 "rows": []}
    with tempfile.TemporaryDirectory(prefix="adapt-terms-") as work:
        work = Path(work)
        test_file = work / "test.jsonl"
        test_file.write_text("".join(json.dumps(r) + "\n" for r in test_rows), encoding="utf-8")
        test, _ = read_annotated(test_file)
        texts = [r["text"] for r in test]
        default = evaluate(test, [d.spans for d in Detector().detect(texts)])
        out["default"] = _figures(default)
        print(f"default detector on {len(test)} notes of {out['test_patients']} patients: {_line(default)}", flush=True)
        sizes = sorted({min(int(x), len(pool)) for x in args.sizes.split(",")})
        for k in sizes:
            f = work / f"train_{k}.jsonl"
            f.write_text("".join(json.dumps(r) + "\n" for r in pool[:k] + test_rows), encoding="utf-8")
            folder = work / f"det_{k}"
            t0 = time.perf_counter()
            kw = {"epochs": args.epochs} if args.epochs else {}
            doc = adapt(f, folder, label_map=LABEL_MAP, holdout=args.holdout, sample_terms=False, **kw,
                        progress=lambda m, k=k: print(f"  {k}: {m}", file=sys.stderr, flush=True))
            seconds = time.perf_counter() - t0
            train, _ = read_annotated(f)
            train = [r for r in train if not held_out(holdout_key(r), args.holdout)]
            entity_of = entity_types(doc["types"], doc["labels"], ner_mapping(DEFAULT_MODEL)[0])
            variants = {"adapted NER": None}
            ts = TermSet()
            ts.add(sample_terms(train, entity_of.get), "sample")
            variants["+ the sample's terms"] = ts
            both = TermSet(ts.key, dict(ts.digests), ts.prefixes, dict(ts.sources))
            for etype, p in lists:
                both.add(read_term_file(p, etype), f"{etype}={p.name}")
            variants["+ the tenant's lists"] = both
            row = {"notes": k, "general_rehearsal": doc["provenance"]["general_rehearsal"], "train_patients": len({r["group"] for r in train}), "seconds": round(seconds, 1),
                   "score_threshold": doc["score_threshold"], "trusted_labels": doc.get("trusted_labels", []),
                   "variants": {}}
            for name, terms in variants.items():
                ev = evaluate(test, [d.spans for d in Detector(str(_with_terms(folder, terms, work))).detect(texts)])
                row["variants"][name] = {**_figures(ev), "terms": len(terms) if terms else 0,
                                         "sources": terms.sources if terms else {}}
                print(f"{k} notes, {name}: {_line(ev)}", flush=True)
            out["rows"].append(row)
    out["machine_note"] = machine()
    save_result("redaction_terms", out)
    return 0


def _with_terms(folder: Path, terms, work: Path) -> Path:
    """A copy of ``folder`` holding ``terms`` (none: without any)."""
    dst = work / f"{folder.name}-{id(terms)}"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(folder, dst)
    doc = json.loads((dst / "detector.json").read_text(encoding="utf-8"))
    doc.pop("terms", None)
    if terms is not None:
        terms.save(dst)
        doc["terms"] = {"file": "terms.json", "terms": len(terms), "sources": terms.sources}
    (dst / "detector.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return dst


def _figures(ev: dict) -> dict:
    return {k: ev[k] for k in ("recall", "char_precision", "char_recall", "misses", "gold_spans",
                               "miss_rate_upper_95")}


def _line(ev: dict) -> str:
    return (f"recall {ev['recall']:.4f} ({ev['misses']} misses of {ev['gold_spans']}), "
            f"character precision {ev['char_precision']:.4f}")


if __name__ == "__main__":
    sys.exit(main())
