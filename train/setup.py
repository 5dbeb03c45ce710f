"""How a run's model is set up, as plain data (no torch: the driver builds it, the workers
get it pickled in their :class:`~train.plan.WorkerPlan`): where the weights come from
(:class:`ModelSource`, what the checks found), what each worker builds
(:class:`ModelInit`, made by the training kind once the tokenizer is known:
``TrainKind.model_init``), LoRA adapters and a masked LM's masking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class ModelSource:
    """Where a run's weights come from, as its checks found it (before its tokenizer is
    known): a preset, or a checkpoint (its weights, or only its architecture with
    ``fresh_weights``). ``base_vocab``: a causal base fine-tuned with its own tokenizer,
    whose vocabulary the data's entity tokens may grow. The kind turns it into the
    workers' :class:`ModelInit` once the tokenizer is there (``TrainKind.model_init``)."""

    seed: int
    preset: Optional[str] = None
    checkpoint: Optional[str] = None
    fresh_weights: bool = False
    base_vocab: Optional[int] = None


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
class MLMPlan:
    """A masked LM's masking: the chance a target token is chosen, the mask token, the
    vocabulary random tokens are drawn from, the padding left out of attention."""

    probability: float
    mask_id: int
    vocab_size: int
    pad_id: int
