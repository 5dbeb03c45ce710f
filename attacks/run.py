"""Run an evaluation: every configured attack against every model, one report.

``run_evaluation(cfg)`` checks everything it can before it writes (model folders, data
sources, the canary and entity keys: each attack's ``prepare``), then the corpus
statistics, then per model every configured attack (``attacks.registry``; the papers' in
``attacks.kinds``: perplexity, canary exposure, membership inference with scoring spread
over Ray workers when ``scoring.workers`` > 0, name reconstruction, true-prefix, data
extraction, entity tokens in generations, paper 003's identifier metrics), each result
the model's ``attacks[NAME]``; and writes ``OUTPUT/evaluation.json`` and
``OUTPUT/report.html``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path


from attacks.config import SECTIONS, AttackConfig
from attacks.data import read_texts
from attacks.registry import Attack, Target, attack, jsonable, prepare_all
from attacks.results import Evaluation, ModelResult, training_info
from privatize.errors import SpecError


def _corpus_texts(cfg: AttackConfig) -> dict[str, list]:
    """Each corpus' texts, or token id lists for unit token (the named tokenizer, else
    the first model's)."""
    from attacks.model import checkpoint_dir

    s = cfg.corpus_stats
    out = {name: read_texts(src, column=s.text_column, limit=s.limit, what=f"corpus_stats.sources.{name}")
           for name, src in s.sources.items()}
    if s.unit == "token":
        from train.tokenizer import load_tokenizer

        what = "corpus_stats.tokenizer" if s.tokenizer else "models.0.path"
        path = s.tokenizer or cfg.models[0].path
        try:
            folder = str(checkpoint_dir(path))
        except SpecError:
            folder = path  # a bare tokenizer folder
        tok = load_tokenizer(folder, what=what)
        out = {name: tok(texts, add_special_tokens=False)["input_ids"] for name, texts in out.items()}
    return out


def corpus_stats(cfg: AttackConfig, corpora: dict[str, list]) -> dict:
    from attacks.corpus_stats import ngram_entropies

    stats = {}
    for name, texts in corpora.items():
        try:
            stats[name] = ngram_entropies(texts, unit=cfg.corpus_stats.unit, max_n=cfg.corpus_stats.max_n)
        except ValueError as exc:
            raise SpecError(f"corpus_stats.sources.{name}: {exc}") from None
    return stats


def entries(cfg: AttackConfig) -> list[tuple[str, Attack, object]]:
    """The configured attacks in the order they run (each attack's ``order``; the
    ``attacks`` list's order among equals): the ``attacks`` list and the older named
    sections alike, each as (where it is in the config, the attack, its settings)."""
    out = [(name, attack(name), getattr(cfg, name)) for name in SECTIONS if getattr(cfg, name) is not None]
    for i, entry in enumerate(cfg.attacks):  # each entry is its attack's settings (and its kind)
        out.append((f"attacks.{i}", attack(entry.kind), entry))
    return sorted(out, key=lambda e: e[1].order)


def prepare(cfg: AttackConfig, base_dir: str | None = None) -> dict:
    """Every check that can fail, before anything is written: models, then each attack's
    inputs (data, keys), and the corpora of ``corpus_stats``."""
    from attacks.model import checkpoint_dir

    for i, m in enumerate(cfg.models):
        try:
            checkpoint_dir(m.path)
        except SpecError as exc:
            raise SpecError(f"models.{i}.path: {exc}") from None
    return {"attacks": prepare_all(entries(cfg), base_dir),
            "corpora": _corpus_texts(cfg) if cfg.corpus_stats else None}


def scoring_device(asked: str) -> str:
    """``scoring.device`` resolved on this machine: ``auto`` is cuda when there is a CUDA
    device; ``cuda`` without one is refused before any model loads."""
    import torch

    have = torch.cuda.is_available()
    if asked == "cuda" and not have:
        raise SpecError("scoring.device: cuda asked, but this machine has no CUDA device (use cpu or auto)")
    return "cuda" if asked == "cuda" or (asked == "auto" and have) else "cpu"


def run_evaluation(cfg: AttackConfig, *, base_dir: str | None = None, progress: bool = True,
                   evaluation_id: str | None = None) -> Evaluation:
    """Run ``cfg``; writes OUTPUT/evaluation.json and OUTPUT/report.html."""
    from attacks.model import ModelAdapter, checkpoint_dir
    from attacks.report import write_report

    device = scoring_device(cfg.scoring.device)
    inputs = prepare(cfg, base_dir)
    out = Path(cfg.output)
    ev = Evaluation(id=evaluation_id or uuid.uuid4().hex[:12],
                    created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), models=[])
    if cfg.corpus_stats:
        ev.corpus_stats = corpus_stats(cfg, inputs["corpora"])
        ev.notes.append(f"corpus statistics: unigram entropy and n-gram conditional entropies (bits) over "
                        f"{cfg.corpus_stats.unit}s")
    pids: set[int] = set()
    for spec in cfg.models:
        t0 = time.perf_counter()
        path = str(checkpoint_dir(spec.path))
        model = Target(spec.name, path, ModelAdapter.load(path, device=device), cfg.scoring, progress)
        res = ModelResult(name=spec.name, path=str(Path(spec.path).resolve()),
                          training=training_info(spec.path, spec.protection), reference=spec.reference)
        for attack_, settings, prepared in inputs["attacks"]:
            result = attack_.run(settings, model, prepared)
            res.attacks[attack_.name] = result if attack_.Result is not None else jsonable(result)
        pids |= model.pids
        res.seconds = round(time.perf_counter() - t0, 2)
        ev.models.append(res)
        if progress:
            print(f"privatize: evaluated {spec.name} in {res.seconds:.1f} s", file=sys.stderr)
    if device != "cpu":
        ev.notes.append(f"the models were scored on {device}")
    if cfg.scoring.workers:
        ev.notes.append(f"membership scoring ran on Ray ({cfg.scoring.workers} workers asked, "
                        f"{len(pids - {os.getpid()})} worker processes took batches)")
    write_report(ev, out)
    return ev
