"""What a Ray Train worker is told: one frozen :class:`WorkerPlan`, built once by
``train.run`` from the :class:`~train.config.TrainConfig` and the data, and read by
``train.loop.train_loop``. No torch here: the plan is made on the driver and pickled to
the workers with the blocks' object references and the metrics actor (``train_loop``'s
other two arguments)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from train.config import TrainConfig


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
class ModelInit:
    """Where the weights come from: a preset (new weights of ``vocab_size``), or a checkpoint
    (its weights; only its architecture with ``fresh_weights``; resized to ``resize_to``)."""

    seed: int
    special: dict = field(default_factory=dict)
    preset: Optional[str] = None
    vocab_size: Optional[int] = None
    checkpoint: Optional[str] = None
    fresh_weights: bool = False
    resize_to: Optional[int] = None
    grow_to: Optional[int] = None
    """Entity tokens the checkpoint's tokenizer lacked were added: its embedding and output
    rows grow to this size, the new rows the mean of the old ones (``train.models.add_token_rows``)."""
    mlm: bool = False
    lora: Optional["LoraPlan"] = None


@dataclass(frozen=True)
class LoraPlan:
    """Low-rank adapters on ``target_modules`` (``peft``); only they train."""

    r: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...]


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
    individual_blocks: Optional[int] = None
    """``dp.unit: individual``: the sample is of individuals (the blocks' owners), each
    contributing at most this many blocks a step, and each individual's gradient is clipped."""


@dataclass(frozen=True)
class MLMPlan:
    """A masked LM's masking: the chance a target token is chosen, the mask token, the
    vocabulary random tokens are drawn from, the padding left out of attention."""

    probability: float
    mask_id: int
    vocab_size: int
    pad_id: int


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
    """What the checks before any work decided."""

    config: "TrainConfig"
    output: Path
    data: str
    tokenizer_from: str | None  # an existing tokenizer folder, or None: train one
    init: dict
    splits: dict  # dataset name -> data.split value
    manifest: dict | None
    resume: dict | None  # position.json of the checkpoint this run resumes from
