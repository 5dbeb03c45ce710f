"""What one body of data has spent: every training on it, composed.

Each DP training is a Poisson-sampled Gaussian mechanism on its data (a CRT's private phase
is one too). A model trained twice on the same records, or two models released from them,
protect those records only by the composition of both mechanisms, never by either
training's own epsilon. :func:`compose` gives that figure from each training's
:class:`Spend`:

* the joint history goes to :func:`train.dp.accounting.bounded_composition` (PRV, RDP where
  PRV would pass its budget, the sum of each training's epsilon only where both fail);
* the ledger's delta is the smallest of the trainings' (a smaller delta only makes its
  epsilon larger);
* units compose in their own unit: sequences with sequences, individuals with
  individuals; records of up to k blocks compose their per-block mechanisms, then take
  group privacy over the longest record (k hops of one changed block in each training
  each), as planning does for one training. Trainings in different units make no single
  figure (``unit: mixed``), and a training without DP on the data makes it "no
  guarantee": both stated, never a number.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from train.dp.budget import group_bound


@dataclass(frozen=True)
class Spend:
    """One training's mechanism on the data. ``steps`` are the DP steps it ran (or will:
    planned until it ends); ``delta`` the per-block delta its accountant used;
    ``unit_delta`` and ``group`` the unit's (``group`` blocks at most per unit)."""

    noise_multiplier: float | None
    sample_rate: float
    steps: int
    delta: float
    unit: str = "sequence"
    group: int = 1
    unit_delta: float | None = None

    @property
    def private(self) -> bool:
        """A DP mechanism (False: the data was trained on without one)."""
        return self.noise_multiplier is not None and self.noise_multiplier > 0

    @classmethod
    def from_plan(cls, plan: dict, steps: int | None = None) -> "Spend":
        """From a run's privacy plan (``train.dp.budget.Budget.to_dict()``), at ``steps`` DP
        steps (default: all it planned)."""
        group = int(plan.get("group") or 1)
        unit_delta = plan.get("unit_delta") if group > 1 else plan["delta"]
        return cls(plan["noise_multiplier"], plan["sample_rate"], int(plan["steps"] if steps is None else steps),
                   plan["delta"], plan.get("unit") or "sequence", group, unit_delta)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Ledger:
    """The data's composed guarantee. ``epsilon`` None: ``guarantee`` says why (``none``:
    a training without DP; ``mixed``: trainings in different units)."""

    epsilon: float | None
    delta: float | None
    unit: str | None
    trainings: int
    guarantee: str = "dp"
    accountant: str | None = None
    note: str | None = None
    history: list = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("history")
        return d


def compose(spends: list[Spend], accountant: str = "prv") -> Ledger:
    """The ledger of ``spends`` (see the module's docstring); an empty list spends nothing."""
    from train.dp.accounting import bounded_composition

    n = len(spends)
    if not n:
        return Ledger(0.0, None, None, 0, "dp", None, "no training has used this data")
    if any(not s.private for s in spends):
        k = sum(not s.private for s in spends)
        return Ledger(None, None, None, n, "none", None,
                      f"{k} training(s) used this data without DP: no guarantee remains")
    units = sorted({s.unit for s in spends})
    if len(units) > 1:
        return Ledger(None, None, "mixed", n, "mixed", None,
                      f"trainings in different privacy units ({', '.join(units)}) make no single figure")
    history = [(s.noise_multiplier, s.sample_rate, s.steps) for s in spends]
    unit_delta = min(s.unit_delta if s.unit_delta is not None else s.delta for s in spends)
    k = max(s.group for s in spends)
    if k == 1:
        acc = bounded_composition(history, unit_delta, accountant)
        return Ledger(acc.value, unit_delta, units[0], n, "dp", acc.accountant, acc.note, history)
    block_delta = unit_delta / k
    for _ in range(8):  # the block delta whose group delta stays within the unit's (train.dp.budget.plan_budget)
        acc = bounded_composition(history, block_delta, accountant)
        if not math.isfinite(acc.value) or group_bound(acc.value, block_delta, k)[1] <= unit_delta * (1 + 1e-9):
            break
        if (k - 1) * acc.value > 600:
            return Ledger(math.inf, unit_delta, units[0], n, "dp", acc.accountant,
                          f"records of up to {k} blocks have no useful group bound", history)
        block_delta = 0.5 * unit_delta / (k * math.exp((k - 1) * acc.value))
    eps = group_bound(acc.value, block_delta, k)[0] if math.isfinite(acc.value) else acc.value
    return Ledger(eps, unit_delta, units[0], n, "dp", acc.accountant, acc.note, history)
