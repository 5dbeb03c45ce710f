"""``privatize attack CONFIG [--output DIR] [--workers N] [--ray ADDRESS]``.

Registered through the ``privatize.commands`` entry-point group. Bad configs are one line
on stderr and exit 2, before anything is written; the last stdout line is a JSON summary
(per model: perplexity, max exposure, best MIA AUC) with the report's path.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attacks.results import REPORT


def summary(ev, output: str) -> dict:
    models = []
    for m in ev.models:
        row = {"name": m.name, "perplexity": m.perplexity}
        if m.perplexity_spans:
            row["perplexity_outside_secrets"] = m.perplexity_spans.outside
        if m.exposure:
            row["max_exposure"] = round(m.exposure.max_exposure, 3)
        if m.mia:
            best = max(m.mia.scores, key=lambda r: r.auc)
            row["mia_auc"] = {"score": best.score, "auc": round(best.auc, 4)}
        if m.extraction:
            row["extracted"] = m.extraction.unique_extracted
        if m.reconstruction:
            row["name_reconstruction"] = round(m.reconstruction.rate, 4)
        if m.true_prefix:
            row["true_prefix_distance"] = round(m.true_prefix.mean_best_distance, 4)
        if m.cipher_outputs:
            row["cipher_failure_ratio"] = round(m.cipher_outputs.failure_ratio, 4)
        models.append(row)
    return {"status": "ok", "evaluation": ev.id, "report": str(Path(output) / REPORT), "models": models}


def _attack(args: argparse.Namespace) -> int:
    from attacks.config import load_config
    from attacks.run import run_evaluation

    cfg = load_config(args.config).with_output(args.output)
    if args.workers is not None:
        cfg = cfg.model_copy(update={"scoring": cfg.scoring.model_copy(update={"workers": args.workers})})
    if args.ray:
        from privatize.ray.cluster import connect

        connect(args.ray)
    ev = run_evaluation(cfg, base_dir=str(Path(args.config).resolve().parent))
    print(json.dumps(summary(ev, cfg.output)))
    return 0


def register(sub) -> None:
    a = sub.add_parser("attack", help="attack trained models (canary exposure, membership inference, extraction) "
                                      "and write one report")
    a.add_argument("config", help="evaluation config (YAML; see attacks/configs/)")
    a.add_argument("--output", help="report folder (overrides output)")
    a.add_argument("--workers", type=int, default=None, help="Ray workers for membership scoring (0: in process)")
    a.add_argument("--ray", metavar="ADDRESS", default=None, help="a Ray cluster address for the scoring workers")
    a.set_defaults(func=_attack)
