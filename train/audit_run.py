"""The one-run audit inside a training run (``audit`` in the config; the theorem and the
canaries themselves are :mod:`train.dp.audit`): canaries drawn from the run's audit seed and
inserted into the DP split before planning, scored with the final model after it."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from train.dp.audit import SEED_FIELD
from train.planning import saved_plan

if TYPE_CHECKING:
    from train.plan import Prepared

log = logging.getLogger(__name__)


@dataclass
class Canaries:
    """The audit's canaries (``train.dp.audit``): all ``ids``, which were ``inserted``, into
    which dataset, and the object reference of the inserted blocks the workers read."""

    seed: int
    split: str
    ids: Any
    inserted: Any
    ref: object


def insert_canaries(p: "Prepared", tok, data: dict) -> Canaries | None:
    """With ``audit``, draw the canaries from the run's audit seed (kept in its privacy plan,
    so a resumed run inserts the same ones) and add the inserted half to the DP split:
    its size, so its sample rate and accounting, counts them."""
    cfg = p.config
    if cfg.audit is None:
        return None
    import secrets

    import numpy as np
    import ray

    from train.dp.audit import canaries as draw
    from train.batches import plan_phases

    phases = plan_phases(cfg.kind, {k: n for k, (_, n) in data.items()}, cfg.optim.batch_size,
                         cfg.dp.batch_size)
    split = next(ph.split for ph in phases if ph.dp)
    saved = saved_plan(p.output, cfg.admitted_plan) or {}
    seed = saved.get(SEED_FIELD, secrets.randbits(63))
    ids, inserted = draw(seed, cfg.audit.canaries, cfg.data.seq_len, 0, len(tok))
    block = {"ids": ids[inserted], "loss": np.ones(ids[inserted].shape, np.uint8)}
    if cfg.dp.unit == "individual":  # each canary its own individual (train.data.owner_id)
        block["owner"] = -1 - np.arange(int(inserted.sum()), dtype=np.int64)
    ds, n = data[split]
    data[split] = (ds, n + int(inserted.sum()))
    return Canaries(seed, split, ids, inserted, ray.put(block))


def run_audit(p: "Prepared", canaries: Canaries, model_dir: Path, epsilon: float | None, delta: float,
               progress: bool) -> dict:
    """Score every canary with the final model and bound epsilon from below."""
    from transformers import AutoModelForCausalLM

    from train.dp.audit import audit, canary_scores

    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    result = audit(canary_scores(model, canaries.ids), canaries.inserted, delta, p.config.audit.confidence)
    out = result.to_dict() | {"accountant_epsilon": epsilon, "seconds": round(time.perf_counter() - t0, 2)}
    if epsilon is not None and result.epsilon_lower_bound > epsilon * (1 + 1e-9):
        # the accountant's epsilon is an upper bound; an audit above it means the DP code is wrong
        out["exceeds_accountant"] = True
        log.error("the audited epsilon %.3f exceeds the accountant's %.3f: the DP guarantee does not hold",
                  result.epsilon_lower_bound, epsilon)
    if progress:
        claim = f"accountant epsilon {epsilon:.3f}" if epsilon is not None else "no guarantee claimed"
        print(f"audit: epsilon >= {result.epsilon_lower_bound:.3f} ({result.confidence:.0%}) from "
              f"{result.correct} of {result.guesses} guesses on {result.canaries} canaries; {claim}")
    return out
