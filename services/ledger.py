"""The privacy ledger: what the trainings on each uploaded corpus have spent together.

Every training has a row in ``privacy_spends`` keyed on the content hash of the corpus its
data came from (through its privatization job), so deleting a corpus or a training and
uploading the same file again keeps what was spent. Its figure is the composition of every
training's mechanism on that data (:func:`train.dp.ledger.compose`: PRV over the joint history,
RDP where PRV would pass its budget, the sum only where both fail; units in their own
unit; a training without DP makes it "no guarantee").

Admission, for a training with DP: the run's own planning is made first
(:func:`plan_training`, outside the admission lock: :func:`train.admission.plan_offline` on a
local copy of its input), its plan becomes the config's ``admitted_plan`` (the run takes
exactly that mechanism, at most those steps), and under the admission lock and the
tenant's row lock the ledger with the new training is composed and checked against the
tenant's ``max_epsilon_per_corpus`` (:func:`admit`): over it, 403 naming the budget; else
the planned spend is reserved, so two concurrent trainings cannot both pass one remaining
budget. When the training ends (:func:`settle`) its row keeps the DP steps it took: all
of them when it succeeded; when it failed or was cancelled, at most the last reported
count plus the steps until the next report (never fewer than it may have run).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.errors import BudgetExceeded, NotFound, config_error
from services.models import Corpus, Job, PrivacySpend, Tenant, utcnow

log = logging.getLogger(__name__)

LEDGER_FILE = "ledger.json"
"""The ledger of its data when a DP training succeeded, written beside its summary."""

WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx")
"""Files planning never needs from a base model (its config and tokenizer are enough)."""


# ---- planning before admission ------------------------------------------------------------

def _copy_tree(storage, rel_dir: str, dest: Path, skip: tuple[str, ...] = ()) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name, _ in storage.list_files(rel_dir):
        if name.endswith(skip):
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            for chunk in storage.open_chunks(f"{rel_dir}/{name}"):
                f.write(chunk)


def plan_training(ctx, input_job: Job, base_folder: str | None, spec):
    """``spec`` (a ``services.trainings.TrainSpec``) with the DP plan its run will take as
    ``admitted_plan``; ``spec`` itself for a training without DP. ``base_folder``: the
    storage folder (relative to the root) of the model it fine-tunes (a training's
    ``model/``, a catalogued model's folder), of which planning copies the config and the
    tokenizer, not the weights. A 422 with the field path when it cannot be planned (a
    delta past 1/N, an unreachable target, an overspend)."""
    from privatize.errors import PrivatizeError
    from train.admission import plan_offline

    cfg = spec.config
    if cfg.dp is None:
        return spec
    work = Path(tempfile.mkdtemp(prefix="privatize-ledger-"))
    try:
        _copy_tree(ctx.storage, input_job.output_path, work / "input")
        local = cfg.with_paths(data=str(work / "input"))
        if base_folder is not None:
            _copy_tree(ctx.storage, base_folder, work / "base", WEIGHTS)
            local = local.model_copy(update={"model": local.model.model_copy(update={"checkpoint": str(work / "base")})})
        try:
            plan = plan_offline(local)
        except PrivatizeError as exc:
            raise config_error(exc) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return type(spec)(cfg.model_copy(update={"admitted_plan": plan}))


# ---- the ledger ---------------------------------------------------------------------------

def _spend(row: PrivacySpend):
    from train.dp.ledger import Spend

    return Spend(row.noise_multiplier, row.sample_rate, row.steps, row.delta, row.unit, row.group_size,
                 row.unit_delta)


def rows_of(s: Session, tenant_id: str, sha256: str) -> list[PrivacySpend]:
    return list(s.scalars(select(PrivacySpend).where(PrivacySpend.tenant_id == tenant_id,
                                                     PrivacySpend.corpus_sha256 == sha256)
                          .order_by(PrivacySpend.created_at, PrivacySpend.job_id)))


def compose_rows(rows: list[PrivacySpend]):
    """The ledger of ``rows``: PRV unless a training planned with RDP (then RDP, so no
    training's own figure exceeds the total it is part of)."""
    from train.dp.ledger import compose

    accountant = "rdp" if any(r.accountant == "rdp" for r in rows if r.noise_multiplier is not None) else "prv"
    return compose([_spend(r) for r in rows], accountant)


def _figure(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _new_row(tenant_id: str, corpus: Corpus, job: Job, spec, base_training: str | None) -> PrivacySpend:
    plan = spec.config.admitted_plan
    row = PrivacySpend(job_id=job.id, tenant_id=tenant_id, corpus_sha256=corpus.sha256, corpus_id=corpus.id,
                       base_training_id=base_training, state="reserved", created_at=utcnow())
    if plan is None:  # a training without DP
        row.noise_multiplier, row.sample_rate, row.steps, row.planned_steps, row.delta = None, 0.0, 0, 0, 0.0
        row.unit, row.group_size, row.accountant = "sequence", 1, "prv"
        return row
    group = int(plan.get("group") or 1)
    row.noise_multiplier, row.sample_rate = plan["noise_multiplier"], plan["sample_rate"]
    row.steps = row.planned_steps = int(plan["steps"])
    row.delta, row.unit, row.group_size = plan["delta"], plan.get("unit") or "sequence", group
    row.accountant = plan.get("accountant") or "prv"
    row.unit_delta = plan.get("unit_delta") if group > 1 else plan["delta"]
    row.epsilon = plan.get("unit_epsilon") if group > 1 else plan.get("planned_epsilon")
    return row


def admit(s: Session, tenant_id: str, corpus: Corpus, job: Job, spec, base_training: str | None) -> None:
    """Check the training against its corpus's ledger and the tenant's limit, and reserve
    its planned spend (in the admission transaction, under the tenant's row lock)."""
    tenant = s.get(Tenant, tenant_id, with_for_update=True)
    row = _new_row(tenant_id, corpus, job, spec, base_training)
    limit = tenant.max_epsilon_per_corpus
    if limit is not None:
        rows = rows_of(s, tenant_id, corpus.sha256)
        before = compose_rows(rows)
        after = compose_rows(rows + [row])
        asked = _figure(row.epsilon)
        budget = {"limit": limit, "spent": _figure(before.epsilon), "trainings": before.trainings,
                  "asked": asked, "after": _figure(after.epsilon), "unit": after.unit}
        spent = ("nothing yet" if not before.trainings else
                 f"epsilon {before.epsilon:.3f} over {before.trainings} training(s)" if before.epsilon is not None
                 else f"no guarantee ({before.note})")
        where = f"corpus {corpus.id}'s privacy budget (epsilon {limit:g} per corpus for this tenant)"
        if row.noise_multiplier is None:
            raise BudgetExceeded(f"{where}: a training without DP leaves its data no guarantee; use kind dp or crt",
                                 path="kind", budget=budget)
        if after.epsilon is None or after.epsilon > limit * (1 + 1e-9):
            total = (f"together epsilon {after.epsilon:.3f}" if after.epsilon is not None
                     else f"together no single figure ({after.note})")
            raise BudgetExceeded(f"{where}: spent {spent}; this training asks epsilon {asked:.3f}, {total} > "
                                 f"{limit:g}; nothing was run", path="dp.target_epsilon", budget=budget)
    s.add(row)


def settle(ctx, s: Session, job: Job, last: dict | None = None) -> None:
    """A training ended: its row keeps the DP steps it took (see the module's docstring;
    ``last``: the last metrics it reported, when it did not succeed); a succeeded DP
    training's summary gets the ledger after it."""
    from train.dp.accounting import bounded_epsilon
    from train.dp.budget import group_bound

    row = s.get(PrivacySpend, job.id)
    if row is None or row.state != "reserved":
        return
    row.state, row.settled_at = "spent", utcnow()
    if row.noise_multiplier is None:
        return
    if job.status == "succeeded":
        taken = int((job.counts or {}).get("dp_steps") or row.planned_steps)
    else:
        every = int((job.spec or {}).get("report_every") or 1)
        if last is not None:
            taken = int(last.get("dp_steps") or 0) + every - 1
        else:
            taken = every - 1 if job.started_at is not None else 0
    taken = min(row.planned_steps, taken)
    if taken != row.steps:
        row.steps = taken
        eps = bounded_epsilon(row.noise_multiplier, row.sample_rate, taken, row.delta, row.accountant).value
        row.epsilon = group_bound(eps, row.delta, row.group_size)[0] if math.isfinite(eps) else eps
    if job.status == "succeeded" and job.counts is not None:
        ledger = _ledger_dict(compose_rows(rows_of(s, row.tenant_id, row.corpus_sha256)))
        job.counts = dict(job.counts, ledger=ledger, lineage=lineage(s, job.id))
        # beside the run's summary, for what reads the run folder (an evaluation's report)
        ctx.storage.write_bytes(f"{job.output_path}/{LEDGER_FILE}",
                                json.dumps(dict(ledger, lineage=job.counts["lineage"]), indent=2).encode())


def lineage(s: Session, job_id: str) -> dict:
    """The corpus a training's data came from and the trainings its checkpoint descends
    from (nearest first)."""
    row = s.get(PrivacySpend, job_id)
    out = {"corpus_sha256": row.corpus_sha256 if row else None, "descends_from": []}
    seen = {job_id}
    while row is not None and row.base_training_id and row.base_training_id not in seen:
        seen.add(row.base_training_id)
        out["descends_from"].append(row.base_training_id)
        row = s.get(PrivacySpend, row.base_training_id)
    return out


def _ledger_dict(ledger) -> dict:
    d = ledger.to_dict()
    d["epsilon"] = _figure(d["epsilon"])
    return d


def corpus_privacy(s: Session, tenant_id: str, corpus_id: str) -> dict:
    """``GET /v1/corpora/{id}/privacy``: the ledger of the corpus's content."""
    corpus = s.get(Corpus, corpus_id)
    if corpus is None or corpus.tenant_id != tenant_id:
        raise NotFound(f"no corpus {corpus_id!r}")
    rows = rows_of(s, tenant_id, corpus.sha256)
    ledger = compose_rows(rows)
    tenant = s.get(Tenant, tenant_id)
    out = _ledger_dict(ledger)
    out.pop("trainings")
    return dict(corpus_id=corpus.id, sha256=corpus.sha256, **out, limit=tenant.max_epsilon_per_corpus,
                trainings=[{"id": r.job_id, "state": r.state, "dp": r.noise_multiplier is not None,
                            "epsilon": _figure(r.epsilon), "delta": (r.unit_delta or r.delta) or None,
                            "unit": r.unit, "steps": r.steps, "planned_steps": r.planned_steps,
                            "corpus_id": r.corpus_id, "base_training_id": r.base_training_id} for r in rows])
