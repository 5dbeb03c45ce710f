"""The run's plan, made on the driver before any worker starts: phases and steps from the kind,
the DP budget (planned, or kept from the run's ``privacy_plan.json`` when it resumes: spending
is never reset), and the :class:`~train.plan.WorkerPlan` the workers get."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from privatize.errors import SpecError
from train.config import TrainConfig
from train.plan import DPPlan, OptimPlan, RunPlan, WorkerPlan

if TYPE_CHECKING:
    from train.plan import Prepared

PLAN = "privacy_plan.json"


def saved_plan(output: Path, admitted: dict | None = None) -> dict | None:
    """The plan this run keeps: its ``privacy_plan.json`` when it resumes, else the plan
    the service admitted (``admitted_plan``), else None (plan afresh)."""
    f = output / PLAN
    if f.is_file():
        return json.loads(f.read_text())
    return dict(admitted, admitted=True) if admitted else None


def admitted_phase(phases: list, i: int, saved: dict | None) -> list:
    """An admitted plan fixes the DP phase's sample rate (1 / its steps per epoch): the
    data read now may pack into a few blocks more or fewer than admission counted, and the
    admitted mechanism is what the ledger reserved."""
    if not saved or not saved.get("admitted"):
        return phases
    out = list(phases)
    out[i] = replace(phases[i], steps=max(1, round(1.0 / saved["sample_rate"])))
    return out


def check_admitted(saved: dict, units: int, group: int) -> None:
    """The data read now may not weaken the admitted plan's guarantee: no longer records
    (group privacy over more blocks) and a delta still within 1/N."""
    if group > int(saved.get("group") or 1):
        raise SpecError(f"admitted_plan: records now span up to {group} blocks, more than the {saved.get('group') or 1} "
                        "admitted; the data changed since admission: submit the training again")
    unit_delta = saved.get("unit_delta") or saved["delta"]
    if units and unit_delta > 1.0 / units:
        raise SpecError(f"admitted_plan: delta {unit_delta:g} > 1/N for the {units} units read now; the data changed "
                        "since admission: submit the training again")


def resumed_budget(cfg: TrainConfig, saved: dict, sample_rate: float, dp_steps: int, taken: int):
    """A resumed DP run keeps the noise, sample rate and delta it started with, and may not
    plan past its target epsilon: the accountant's spending is never reset."""
    from train.dp.accounting import bounded_epsilon
    from train.dp.budget import Budget

    sigma, q, delta = saved["noise_multiplier"], saved["sample_rate"], saved["delta"]
    if cfg.dp.noise_multiplier is not None and cfg.dp.noise_multiplier != sigma:
        raise SpecError(f"dp.noise_multiplier: this run started with {sigma}; a resumed run keeps its noise")
    if abs(sample_rate - q) > 1e-12:
        raise SpecError(f"data.path: the DP split changed since this run started (sample rate {q:.4g}); "
                        "start a new run")
    target = cfg.dp.target_epsilon if cfg.dp.target_epsilon is not None else saved.get("target_epsilon")
    if saved.get("admitted"):
        dp_steps = min(dp_steps, int(saved["steps"]))  # the steps the ledger reserved, at most
    acc = bounded_epsilon(sigma, q, dp_steps, delta, saved["accountant"])
    eps = acc.value
    if target is not None and eps > target * (1 + 1e-9):
        raise SpecError(f"dp.target_epsilon: resuming this run to {dp_steps} DP steps ({taken} taken) would spend "
                        f"epsilon {eps:.3f} > target {target}; nothing was run")
    return Budget(sigma, q, dp_steps, delta, acc.accountant, target, eps, saved.get("units", 0), acc.note,
                  saved.get("unit", "sequence"), saved.get("group", 1))


def dp_units(cfg: TrainConfig, ds, blocks: int, extra_units: int = 0) -> tuple[int, int]:
    """(N, k): the privacy units of the DP split and the most blocks one spans. ``sequence``:
    every block is a unit. ``record``: the records (``first`` blocks) and their longest run
    of blocks, read from the packed dataset. ``individual``: the distinct owners, each a
    unit of its own (per-individual clipping: no group bound). ``extra_units`` are
    single-block units added beside it (the audit's canaries)."""
    if cfg.dp.unit == "sequence":
        return blocks, 1
    if ds.count() == 0:
        return extra_units, 1
    if cfg.dp.unit == "individual":
        owners = ds.unique("owner")
        if 0 in owners:
            raise SpecError("dp.unit: individual: records of the DP split have no individual_id (privatize with "
                            "an hmac pseudonym key to keep it, or choose dp.unit record or sequence)")
        return len(owners) + extra_units, 1
    return int(ds.sum("first")) + extra_units, int(ds.max("blocks"))


def plan_run(p: "Prepared", tok, data: dict, progress: bool, extra_units: int = 0):
    """Phases, steps and the DP budget; a SpecError when the config cannot run as asked."""
    from train.batches import plan_phases, total_steps
    from train.dp.budget import plan_budget

    cfg, kind = p.config, p.kind
    mlm = kind.mlm_plan(cfg, tok, p.source)
    model_init = kind.model_init(cfg, p.source, tok)
    sizes = {k: n for k, (_, n) in data.items()}
    phases = plan_phases(cfg.kind, sizes, cfg.optim.batch_size, cfg.dp.batch_size if cfg.dp else None)
    total = total_steps(phases, cfg.optim.epochs, cfg.optim.max_steps)
    budget = dp_plan = None
    if cfg.dp is not None:
        i = next(j for j, ph in enumerate(phases) if ph.dp)
        saved = saved_plan(p.output, cfg.admitted_plan)
        phases = admitted_phase(phases, i, saved)
        total = total_steps(phases, cfg.optim.epochs, cfg.optim.max_steps)
        before, per_epoch = sum(ph.steps for ph in phases[:i]), sum(ph.steps for ph in phases)
        dp_steps = sum(min(phases[i].steps, max(0, total - e * per_epoch - before)) for e in range(cfg.optim.epochs))
        units, group = dp_units(cfg, data[phases[i].split][0], sizes[phases[i].split], extra_units)
        if saved is not None and saved.get("admitted"):
            check_admitted(saved, units, group)
        budget = (plan_budget(cfg.dp, sizes[phases[i].split], phases[i].sample_rate, dp_steps, units=units,
                              group=group) if saved is None
                  else resumed_budget(cfg, saved, phases[i].sample_rate, dp_steps,
                                       (p.resume or {}).get("dp_steps", 0)))
        dp_plan = DPPlan(noise_multiplier=budget.noise_multiplier, max_grad_norm=cfg.dp.max_grad_norm,
                         sample_rate=budget.sample_rate, delta=budget.delta, split=phases[i].split,
                         accountant=budget.accountant, grad_sample_mode=cfg.dp.grad_sample_mode,
                         poisson=cfg.dp.poisson, steps_cap=budget.steps, lr=cfg.dp.lr, group=budget.group,
                         optimizer_state=cfg.dp.optimizer_state,
                         individual_blocks=cfg.dp.max_blocks_per_individual if cfg.dp.unit == "individual" else None)
        if progress and cfg.dp.unit == "individual":
            print(f"DP unit: individual ({budget.units} individuals; each step samples individuals and clips "
                  f"each one's gradient over up to {cfg.dp.max_blocks_per_individual} of its blocks)")
        if progress and budget.group > 1:
            print(f"DP unit: record ({budget.units} records of up to {budget.group} blocks): epsilon "
                  f"{budget.unit_epsilon:.3f} at delta {budget.unit_delta:.3g} per record, by group privacy")
        if progress:
            print(f"DP-SGD: noise multiplier {budget.noise_multiplier:.4f}, sample rate {budget.sample_rate:.4g}, "
                  f"{budget.steps} steps, planned epsilon {budget.planned_epsilon:.3f} at delta {budget.delta:.3g} "
                  f"({budget.accountant})" + (f"; {budget.note}" if budget.note else ""))
    worker = WorkerPlan(
        phases=tuple(phases), total_steps=total, batch_size=cfg.optim.batch_size, seed=cfg.optim.seed,
        init=model_init, optim=OptimPlan(optimizer=cfg.optim.optimizer, lr=cfg.optim.lr,
                                         weight_decay=cfg.optim.weight_decay, warmup_steps=cfg.optim.warmup_steps),
        dp=dp_plan, mlm=mlm, threads=cfg.workers.threads(),
        bf16=cfg.workers.precision == "bf16" and cfg.workers.use_gpu, report_every=cfg.report_every,
        checkpoint_every=cfg.checkpoint_every)
    return RunPlan(worker, budget, sizes)
