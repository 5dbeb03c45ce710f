"""What a Ray Train worker is told: one frozen :class:`WorkerPlan`, built once by
``train.run`` from the :class:`~train.config.TrainConfig` and the data, and read by
``train.loop.train_loop``. No torch here: the plan is made on the driver and pickled to
the workers with the blocks' object references and the metrics actor (``train_loop``'s
other two arguments)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from train.setup import MLMPlan, ModelInit, ModelSource

if TYPE_CHECKING:
    from train.config import TrainConfig
    from train.kinds import TrainKind


@dataclass(frozen=True)
class Phase:
    """One phase of an epoch: ``steps`` steps over ``split``, DP-SGD when ``dp``."""

    name: str
    dp: bool
    steps: int
    split: str

    @property
    def sample_rate(self) -> float:
        """Poisson sampling rate of a DP phase (one step is one draw; the DP optimizer, the
        sampler, the accountant and the budget plan all read it here)."""
        return 1.0 / self.steps


@dataclass(frozen=True)
class OptimPlan:
    optimizer: str
    lr: float
    weight_decay: float
    warmup_steps: int


@dataclass(frozen=True)
class DPPlan:
    """DP-SGD as planned (the noise is the budget plan's, not the config's target)."""

    noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    delta: float
    split: str
    accountant: str = "prv"
    grad_sample_mode: str = "hooks"
    poisson: bool = True
    steps_cap: Optional[int] = None
    """The planned DP steps: a worker refuses to take more (the budget is never overspent)."""
    group: int = 1
    """The most blocks one privacy unit spans (``dp.unit: record``): the live epsilon
    reported is the unit's, by group privacy over the accountant's per-block figure."""
    lr: Optional[float] = None
    """DP-SGD's learning rate (None: the optimizer's ``lr``)."""
    optimizer_state: str = "separate"
    """CRT: ``separate`` (the public steps have an optimizer of their own) or ``shared``."""
    individual_blocks: Optional[int] = None
    """``dp.unit: individual``: the sample is of individuals (the blocks' owners), each
    contributing at most this many blocks a step, and each individual's gradient is clipped."""


@dataclass(frozen=True)
class WorkerPlan:
    phases: tuple[Phase, ...]
    total_steps: int
    batch_size: int
    seed: int
    init: ModelInit
    optim: OptimPlan
    dp: Optional[DPPlan] = None
    mlm: Optional[MLMPlan] = None
    threads: int = 1
    bf16: bool = False
    report_every: int = 10
    checkpoint_every: int = 50

    @property
    def poisson(self) -> bool:
        return self.dp.poisson if self.dp is not None else True


@dataclass(frozen=True)
class RunPlan:
    """The driver's plan: the workers' plan, the DP budget (or None) and the split sizes."""

    worker: WorkerPlan
    budget: Any
    sizes: dict


@dataclass
class Prepared:
    """What the checks before any work decided; ``kind`` is the config's training kind,
    resolved once."""

    config: "TrainConfig"
    kind: "TrainKind"
    output: Path
    data: str
    tokenizer_from: str | None  # an existing tokenizer folder, or None: train one
    source: ModelSource
    splits: dict  # dataset name -> data.split value
    manifest: dict | None
    resume: dict | None  # position.json of the checkpoint this run resumes from
