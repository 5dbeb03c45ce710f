"""Training kinds: what a ``kind:`` in a training config means, one class each, registered by
name as stages are (:func:`register_train_kind`). The config validator, the planner
(``train.run``) and the phase plan (``train.batches.plan_phases``) ask the kind; none of them
compares kind names. A new kind is one class here or in any module that is imported before its
config is parsed.

A kind says which splits of the data it reads, its phases (plain steps over a split, DP-SGD
steps over a split), whether it trains with DP (then the config needs a ``dp`` section) or a
masked LM, what a checkpoint gives it (weights, or only an architecture), any rule of its
own on the config (:meth:`TrainKind.check`), and its model set-up: the presets it builds
from (:meth:`TrainKind.presets`), what each worker builds once the tokenizer is known
(:meth:`TrainKind.model_init`, from the run's :class:`~train.setup.ModelSource`) and a
masked LM's masking (:meth:`TrainKind.mlm_plan`). The run resolves its kind once
(``Prepared.kind``).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from privatize.registry import Registry

KINDS: "Registry[TrainKind]" = Registry("training kind", group="privatize.train_kinds")
"""Every training kind: the built-ins below, and a plugin's from the module its entry point
names (or any module imported before its config is parsed)."""


class TrainKind:
    name: ClassVar[str]
    dp: ClassVar[bool] = False
    """Trains with DP-SGD: the config needs a ``dp`` section (and may not have one otherwise)."""
    masked_lm: ClassVar[bool] = False
    """A masked LM (bidirectional, BERT-style masking) instead of a causal one."""
    fresh_weights: ClassVar[bool] = False
    """A checkpoint gives only the architecture (and its tokenizer): its weights are re-initialised."""
    needs_checkpoint: ClassVar[bool] = False
    trains_tokenizer: ClassVar[bool] = False
    """May train the shared tokenizer on further corpora (``tokenizer.also_on``)."""
    confidentiality: ClassVar[bool] = False
    """Reports CRT's confidentiality (epsilon, delta from gamma and delta_2): takes a ``crt`` section."""
    protection: ClassVar[str | None] = None
    """What protects the data in a run of this kind, as the privacy report says it when the
    evaluation config names none (None: the report shows the kind's name; a label starting
    with "none" makes the run a candidate for the unprotected reference)."""

    def splits(self, cfg: Any) -> dict[str, str]:
        """{phase data name: split of the privatized data} this kind reads."""
        return {"train": cfg.data.split}

    def phases(self, plain: Callable[[str, str], Any], dp: Callable[[str], Any]) -> list:
        """The phases of one epoch, built with ``plain(split, name)`` and ``dp(split)``."""
        return [dp("train")] if self.dp else [plain("train", "train")]

    def may_be_empty(self, split: str) -> bool:
        """Whether ``split`` may hold no example (the run then warns instead of refusing)."""
        return False

    def check(self, cfg: Any) -> None:
        """Rules of this kind on the whole config: a ValueError naming the field."""

    def check_data(self, fmt: str) -> None:
        """Rules of this kind on the data's format (``parquet``, ``jsonl``, ``text``): a ValueError."""


    def presets(self) -> dict:
        """The model presets this kind builds from (``train.models``: causal ones)."""
        from train.models import PRESETS

        return PRESETS

    def model_init(self, cfg: Any, source: Any, tok: Any) -> Any:
        """The workers' :class:`~train.plan.ModelInit` from the run's
        :class:`~train.plan.ModelSource` and its tokenizer: a preset's vocabulary, a
        checkpoint resized (new weights or another tokenizer) or grown by the data's entity
        tokens, LoRA adapters."""
        from train.setup import LoraPlan, ModelInit
        from train.tokenizer import special_ids

        resize = grow = None
        if source.checkpoint and (self.fresh_weights or cfg.tokenizer.mode == "separate"):
            resize = len(tok)
        elif source.checkpoint and source.base_vocab and len(tok) > source.base_vocab:
            grow = len(tok)  # entity tokens the base's tokenizer lacked (run._tokenizer)
        lo = cfg.model.lora
        return ModelInit(seed=source.seed, special=special_ids(tok), preset=source.preset,
                         vocab_size=len(tok) if source.preset else None, checkpoint=source.checkpoint,
                         fresh_weights=source.fresh_weights, resize_to=resize, grow_to=grow, mlm=self.masked_lm,
                         lora=None if lo is None else LoraPlan(r=lo.r, alpha=lo.alpha, dropout=lo.dropout,
                                                               target_modules=tuple(lo.target_modules)))

    def mlm_plan(self, cfg: Any, tok: Any, source: Any) -> Any:
        """The masking plan of a masked-LM kind; None for a causal one."""
        return None

def register_train_kind(cls: type[TrainKind]) -> type[TrainKind]:
    """Class decorator: make a training kind available by its ``name``."""
    KINDS.add(cls.name, cls(), cls)
    return cls


def train_kinds() -> tuple[str, ...]:
    return tuple(KINDS.names())


def train_kind(name: str) -> TrainKind:
    """The kind ``name`` (:class:`privatize.registry.UnknownName`, a ValueError, for none)."""
    return KINDS.get(name)


# ---- the built-in kinds ----------------------------------------------------------------------

@register_train_kind
class Pretrain(TrainKind):
    """Pre-training from scratch (a preset, or a checkpoint's architecture with fresh weights)."""

    name = "pretrain"
    protection = "none (plain training)"
    fresh_weights = True
    trains_tokenizer = True


@register_train_kind
class Continue(TrainKind):
    """Continual pre-training of a checkpoint."""

    name = "continue"
    protection = "none (continual pre-training)"
    needs_checkpoint = True


@register_train_kind
class DP(TrainKind):
    """DP-SGD over the whole split."""

    name = "dp"
    protection = "DP-SGD"
    dp = True


@register_train_kind
class CRT(TrainKind):
    """Confidentially redacted training: plain steps on the public split, then DP-SGD on the
    private one, every epoch (the public split may be empty: then DP-SGD on everything)."""

    name = "crt"
    protection = "CRT: public split plain, private split DP-SGD"
    dp = True
    confidentiality = True

    def splits(self, cfg: Any) -> dict[str, str]:
        return {"public": "public", "private": "private"}

    def phases(self, plain, dp) -> list:
        return [plain("public", "public"), dp("private")]

    def may_be_empty(self, split: str) -> bool:
        return split == "public"

    def check(self, cfg: Any) -> None:
        if cfg.data.split != "all":
            raise ValueError("kind crt reads both splits: leave data.split at 'all'")

    def check_data(self, fmt: str) -> None:
        if fmt != "parquet":
            raise ValueError("data.path: kind crt reads the private/public split of privatized Parquet shards")


@register_train_kind
class MLM(TrainKind):
    """A masked LM, from a preset or fine-tuning a masked-LM checkpoint with its tokenizer."""

    name = "mlm"
    protection = "none (a masked LM, plain training)"
    masked_lm = True

    def presets(self) -> dict:
        from train.models import MLM_PRESETS

        return MLM_PRESETS

    def mlm_plan(self, cfg: Any, tok: Any, source: Any) -> Any:
        from privatize.errors import SpecError
        from train.setup import MLMPlan
        from train.tokenizer import special_ids

        if tok.mask_token_id is None:
            raise SpecError(f"tokenizer: {source.checkpoint or 'the trained tokenizer'} has no mask token: a masked "
                            "LM needs one")
        return MLMPlan(probability=cfg.data.mlm_probability, mask_id=tok.mask_token_id, vocab_size=len(tok),
                       pad_id=special_ids(tok)["pad_token_id"])

    def check(self, cfg: Any) -> None:
        if cfg.model.checkpoint and cfg.tokenizer.mode == "separate":
            raise ValueError("tokenizer.mode: kind mlm fine-tunes a checkpoint with its own tokenizer (shared)")
        if cfg.model.preset == "paper-551m" and not cfg.model.checkpoint:
            raise ValueError("model.preset: paper-551m is a causal model; kind mlm takes tiny or small")
