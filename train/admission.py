"""A DP run's plan made before it is admitted, in the caller's process and without Ray.

The service must know what a training will spend before it admits it against its data's
privacy ledger (``services.ledger``): the noise, sample rate, steps and delta that the run's
own planning (:func:`train.planning.plan_run`) would choose. :func:`plan_offline` runs that
same planning on the same data, tokenizer and config, packing blocks with the run's own
packer (:func:`train.data.pack_local`, as a run on small data does) in process instead of Ray Data.

The result is the config's ``admitted_plan``: the run takes its noise, its sample rate (1 /
the DP phase's steps per epoch, whatever the blocks Ray Data packs now), its delta and
audit seed, at most its steps, and fails before any step if its data would weaken it
(longer records, a delta past 1/N): :func:`train.planning.admitted_phase` and
:func:`train.planning.check_admitted`.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from pathlib import Path

from train.config import TrainConfig

def plan_offline(cfg: TrainConfig) -> dict | None:
    """The plan a DP run of ``cfg`` (with its ``data.path``, a local folder) would make,
    as its ``privacy_plan.json`` holds it (``train.dp.budget.Budget.to_dict()``, with the
    audit's seed); None for a run without DP. A :class:`~privatize.errors.SpecError` (one
    line, with the field) when it cannot be planned: a delta past 1/N, a target that cannot
    be met, an overspend."""
    from train.dp.audit import SEED_FIELD, canaries
    from train.planning import plan_run
    from train.run import _tokenizer, prepare, split_blocks

    if cfg.dp is None:
        return None
    work = Path(tempfile.mkdtemp(prefix="privatize-admission-"))
    try:
        p = prepare(cfg.with_paths(output=str(work / "run")).model_copy(update={"admitted_plan": None}))
        tok = _tokenizer(p, False, work / "tokenizer")
        data = {}
        for name, split in p.splits.items():
            local = split_blocks(p, split, str(work / "tokenizer"), local=True, counts_only=True)
            data[name] = (local, local.count())
        seed, extra = None, 0
        if cfg.audit is not None:
            from train.batches import plan_phases

            seed = secrets.randbits(63)
            _, inserted = canaries(seed, cfg.audit.canaries, cfg.data.seq_len, 0, len(tok))
            split = next(ph.split for ph in plan_phases(cfg.kind, {k: n for k, (_, n) in data.items()},
                                                       cfg.optim.batch_size, cfg.dp.batch_size) if ph.dp)
            extra = int(inserted.sum())
            ds, n = data[split]
            data[split] = (ds, n + extra)
        plan = plan_run(p, tok, data, False, extra)
        out = plan.budget.to_dict()
        if seed is not None:
            out[SEED_FIELD] = seed
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
