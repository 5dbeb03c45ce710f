"""One pydantic model per training run, read from a YAML file.

``kind`` chooses the run:

* ``pretrain``: a model from a preset (or a local Hugging Face checkpoint's config), from
  scratch, on ``data``.
* ``continue``: from ``model.checkpoint`` (a run's ``model/`` folder or any local Hugging
  Face causal-LM directory), with the checkpoint's tokenizer (``tokenizer.mode: shared``)
  or a new one trained on ``data`` (``separate``: the input and output embeddings are
  re-initialised for the new vocabulary, as the Crypto-LLM paper describes).
* ``dp``: DP-SGD with Opacus on ``data.split`` (Poisson sampling, per-example clipping,
  Gaussian noise).
* ``crt``: confidentially redacted training (Algorithm 1 of the CRT paper): each epoch one
  epoch of plain steps on the public split, then one of DP-SGD on the private split.
* ``mlm``: a BERT-style masked language model (the ``refill`` stage's filler, paper 002),
  from a preset or fine-tuned from ``model.checkpoint`` (any local masked-LM folder):
  each step masks ``data.mlm_probability`` of the target tokens (80% ``<MASK>``, 10% a
  random token, 10% kept) and predicts them. Tokens with no loss weight (padding,
  ``<MASK>`` already in the text) are never chosen.

Every number that sizes memory, CPU or time has an upper bound, so a config cannot ask
a cluster for the impossible. Unknown fields are errors (with their path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from privatize.io.configfile import read_mapping, validate
from privatize.policy import Quota, ServerPath, ServiceSets
from train.kinds import train_kind

Split = Literal["all", "public", "private"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Strict):
    """Where the training text is: a privatization run's output folder (its
    ``shards/*.parquet``), a folder of Parquet or JSONL files, or one such file."""

    path: Annotated[Optional[str], ServerPath(
        why="set by the service: a training reads the privatization job named by job_id", runner_sets=True)] = None
    text_column: str = "text"
    description: Optional[str] = Field(None, min_length=1, max_length=500, description=(
        "what this text is (source, licence, split), written into the model's training.json: a run that "
        "starts from the model names it as its base's training data; default: the data path"))
    split: Split = "all"
    seq_len: Annotated[int, Quota("train_max_seq_len")] = Field(128, ge=8, le=8192)
    mask_token_loss: bool = Field(True, description="zero loss weight on <MASK> tokens (paper 002 'Baseline1')")
    max_records: Optional[int] = Field(None, ge=1, le=100_000_000)
    mlm_probability: float = Field(0.15, gt=0, lt=1, description="kind mlm: the share of target tokens masked per step")
    ignore_spans: Optional[str] = Field(None, max_length=200, description=(
        "a column of character spans (list<struct<start, end[, kind]>>, e.g. the identifiers stage's "
        "identifier_spans) whose tokens stay in the context but are never prediction targets "
        "(privacy-preserving causal LM, paper 003) nor chosen as masks by kind mlm (PPMLM)"))
    ignore_kinds: list[str] = Field(default_factory=list, max_length=16, description=(
        "only spans whose 'kind' is one of these (direct, indirect); empty: every span"))
    packing: Literal["ray", "local", "auto"] = Field("auto", description=(
        "where the text is tokenized and packed into blocks: 'ray' (Ray Data tasks on the cluster), "
        "'local' (the run's driver process: seconds faster on small data, where Ray Data's task "
        "start-up costs more than the work), 'auto' (local for data files of up to 64 MiB in all). "
        "The same packer in the same 256-record batches; Ray Data also ends a batch at each of its "
        "read blocks, so on a file it reads as several blocks the two differ by a few blocks"))


class TokenizerConfig(_Strict):
    """``shared``: one tokenizer for both stages of a two-stage run (trained on ``data``
    plus ``also_on`` for a pretrain, the checkpoint's own for a continue). ``separate``:
    a new one trained on this run's data (a continue re-initialises the embeddings)."""

    mode: Literal["shared", "separate"] = "shared"
    path: Annotated[Optional[str], ServerPath(
        why="not taken by the service: the tokenizer is trained on the job's data")] = Field(
        None, description="an existing Hugging Face tokenizer folder instead of training one")
    also_on: Annotated[list[str], ServerPath(why="not taken by the service: a training reads its job's data only")] \
        = Field(default_factory=list, max_length=16)
    vocab_size: Annotated[int, Quota("train_max_vocab_size")] = Field(4096, ge=300, le=262_144)
    min_frequency: int = Field(2, ge=1, le=1000)
    max_entity_tokens: Annotated[int, Quota("train_max_vocab_size")] = Field(4096, ge=0, le=100_000)
    """Entity tokens added to the vocabulary (embedding rows, as ``vocab_size``'s)."""


class LoraConfig(_Strict):
    """Low-rank adapters (LoRA, via ``peft``) on the checkpoint's ``target_modules``: only the
    adapters train (and, under DP, only they are clipped and noised); the run saves the
    merged model (``model/``) and the adapter beside it (``adapter/``)."""

    r: Annotated[int, Quota("train_max_lora_rank")] = Field(8, ge=1, le=1024)
    alpha: float = Field(16.0, gt=0, le=100_000)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]{0,99}$")]] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1, max_length=64)


class ModelConfig(_Strict):
    preset: Optional[Literal["tiny", "small", "paper-551m"]] = "tiny"
    checkpoint: Annotated[Optional[str], ServerPath(
        why="through the service a checkpoint is training:<id>, one of your succeeded trainings (the model it "
            "ended with), or base:<name>, a model of the service's catalog or one you uploaded (GET /v1/models)",
        model_ref=True)] = None
    lora: Optional[LoraConfig] = None


class OptimConfig(_Strict):
    batch_size: Annotated[int, Quota("train_max_batch_size")] = Field(16, ge=1, le=4096, description="examples per step over all workers (expected, under Poisson sampling)")
    epochs: Annotated[int, Quota("train_max_epochs")] = Field(1, ge=1, le=1000)
    max_steps: Annotated[Optional[int], Quota("train_max_steps")] = Field(None, ge=1, le=10_000_000)
    lr: float = Field(1e-3, gt=0, le=1.0)
    weight_decay: float = Field(0.0, ge=0, le=1.0)
    warmup_steps: int = Field(0, ge=0, le=1_000_000)
    optimizer: Literal["adamw", "sgd"] = "adamw"
    seed: int = Field(0, ge=0, le=2**31 - 1)


class DPConfig(_Strict):
    unit: Literal["sequence", "record", "individual"] = "sequence"
    """What one epsilon protects. ``sequence``: one packed block of ``data.seq_len`` tokens
    (records are packed end to end, so a record spread over k blocks has up to k times the
    epsilon). ``record``: blocks never mix records, and a record of up to k blocks is
    accounted as a group (group privacy: k eps, k e^((k-1) eps) delta); the target epsilon
    and delta are the record's. ``individual``: user-level DP over the records'
    ``individual_id`` (user-level sampling, Chua et al. 2024): each step samples
    individuals, an individual's gradient is the mean over its blocks (at most
    ``max_blocks_per_individual`` a step), and that gradient is clipped; one epsilon
    protects everything one individual contributed, however many records."""
    max_blocks_per_individual: Annotated[int, Quota("train_max_batch_size", when={"unit": "individual"})] = Field(
        16, ge=1, le=4096)
    """``unit: individual``: a sampled individual with more blocks contributes a seeded
    draw of this many in that step (the clipping bounds its influence either way; this
    bounds the step's memory)."""
    no_guarantee: bool = False
    """DP-SGD's sampling and clipping with any noise, 0 included, and no privacy claim: the
    summary has no epsilon and says so. For audits and comparisons (kind dp, the CLI only:
    the service refuses it)."""
    target_epsilon: Optional[float] = Field(None, gt=0, le=100)
    """At most 100: past it the guarantee protects nothing (and PRV's search grows without bound)."""
    noise_multiplier: Optional[float] = Field(None, ge=0, le=1000)
    """At least 0.3 (unless ``no_guarantee``): below it epsilon passes 100 in a few hundred
    steps at usual sample rates, and PRV's grid grows as 1/sigma^2 (gigabytes by 0.1)."""

    @field_validator("noise_multiplier")
    @classmethod
    def _enough_noise(cls, v, info):
        if v is not None and v < 0.3 and not info.data.get("no_guarantee"):
            raise ValueError(f"{v} is below 0.3, where no useful guarantee remains (dp.no_guarantee runs it "
                             "without one)")
        return v
    delta: Optional[float] = Field(None, gt=0, le=0.1)
    """Default: 1/(10 N) over the DP split's N units; above 1/N it is refused at planning."""
    max_grad_norm: float = Field(1.0, gt=0, le=1e6)
    batch_size: Annotated[Optional[int], Quota("train_max_batch_size")] = Field(None, ge=1, le=4096)
    """Expected examples per DP-SGD step (Poisson sampling at batch_size / N); default
    ``optim.batch_size``. For ``crt``, the private phase's batch while the public phase keeps
    ``optim.batch_size``: a smaller one gives the private split more (noisier) steps."""
    lr: Optional[float] = Field(None, gt=0, le=10)
    """DP-SGD's learning rate; default ``optim.lr``. The DP steps follow the same warmup
    and cosine, scaled by ``dp.lr / optim.lr``; for ``crt`` only the private phase's steps
    are (the public ones keep ``optim.lr``)."""
    optimizer_state: Literal["separate", "shared"] = "separate"
    """``crt``: whether the private phase's steps keep an optimizer state of their own
    (``separate``) or step the public phase's (``shared``, the product before session 49).
    Shared, Adam's second moments fill with the DP noise and shrink every later public step
    about 100-fold: a brake that helps on text the public split never resembles and costs on
    text it does. Measured at epsilon 3 (``experiments/crt_paper.py``, DIARY session 49):
    separate 1.29x plain perplexity on the clinical notes (shared 2.13x) and 2.37x on MultiWOZ
    (2.68x); on CustomerSim, whose held-out sentences are 18.7% names and addresses the CRT
    model never sees, shared 4.52x against separate 12.0x (outside the secrets 2.47x against
    4.02x; masked sentences public: 1.26x against 1.29x)."""
    poisson: bool = True
    """Must be true: the accountants' epsilon holds for Poisson sampling only."""
    accountant: Literal["prv", "rdp"] = "prv"
    grad_sample_mode: Literal["hooks", "ghost", "bk"] = "hooks"
    """How per-example gradients are clipped: Opacus' ``hooks`` (materialised per-example
    gradients) or ``ghost`` (norms, then a second backward pass), or ``bk`` (book-keeping,
    ``train.dp.bk``: one backward pass; Linear, Embedding, LayerNorm and RMSNorm layers)."""

    @model_validator(mode="after")
    def _budget(self):
        if self.target_epsilon is None and self.noise_multiplier is None:
            raise ValueError("give target_epsilon or noise_multiplier")
        if self.no_guarantee and self.target_epsilon is not None:
            raise ValueError("no_guarantee: a run without a guarantee has no target_epsilon")
        if self.unit == "individual" and self.grad_sample_mode == "ghost":
            raise ValueError("unit: individual clips each individual's summed gradient, which ghost clipping's "
                             "per-example norms cannot give: use grad_sample_mode hooks or bk")
        if not self.poisson:
            raise ValueError("poisson: false is refused: the accountant's epsilon holds only for Poisson "
                             "sampling, so a run without it would be told a guarantee it does not have")
        return self


class AuditConfig(_Strict):
    """An empirical audit of the run's DP guarantee (``train.dp.audit``, one-run auditing):
    ``canaries`` random blocks, each inserted into the DP split with probability 1/2,
    scored after training; the summary shows the audited epsilon beside the accountant's."""

    canaries: Annotated[int, Quota("train_max_audit_canaries")] = Field(1000, ge=8, le=100_000)
    confidence: float = Field(0.95, ge=0.5, lt=1)


class CRTConfig(_Strict):
    """The confidentiality report's inputs: gamma (the share of secrets policy pi misses,
    1 - recall) and delta_2 (the share policy pi_c misses), measured on gold data with an
    upper confidence bound. Left out, they are taken from the privatization manifest's
    ``quality`` figures; a run without either refuses to start."""

    gamma: Optional[float] = Field(None, ge=0, le=1)
    delta_2: Optional[float] = Field(None, ge=0, le=1)
    source: Optional[str] = Field(None, min_length=1, max_length=500)
    """Where a gamma or delta_2 typed here comes from (data, date, command): required with
    either. The report labels such figures as claimed, not measured."""

    @model_validator(mode="after")
    def _sourced(self):
        if (self.gamma is not None or self.delta_2 is not None) and self.source is None:
            raise ValueError("a gamma or delta_2 given in the config needs its source (crt.source: data, date, "
                             "command); it is reported as claimed, not measured")
        return self


class WorkersConfig(_Strict):
    num_workers: Annotated[int, Quota("train_max_workers")] = Field(1, ge=1, le=256)
    use_gpu: bool = False
    cpus_per_worker: Annotated[float, Quota(
        "train_max_cpus_per_worker", least="threads",
        least_why="one CPU for each of the worker's {need} thread(s) (workers.threads_per_worker; default: "
                  "1 below one CPU)")] = Field(1.0, gt=0, le=64)
    """The CPUs Ray reserves for each worker. The service also holds it to at least the
    worker's threads: 0.0001 CPU running 4 threads would take cores no one reserved."""
    threads_per_worker: Annotated[Optional[int], Quota("train_max_cpus_per_worker")] = Field(None, ge=1, le=64)
    precision: Literal["fp32", "bf16"] = "fp32"
    start_timeout_s: float = Field(300.0, ge=1, le=86_400)
    """How long the workers may wait for their CPUs (or GPUs) before the run fails: a
    cluster that is busy or scaling up gets this long; one that can never hold them fails
    after it (Ray Train's own default waits forever)."""

    def threads(self) -> int:
        """The threads each worker's torch runs: ``threads_per_worker``, else its whole CPUs
        (at least 1)."""
        return self.threads_per_worker or max(1, int(self.cpus_per_worker))


class TrainConfig(_Strict):
    version: Literal[1] = 1
    kind: str = Field(description="a registered training kind (train.kinds): pretrain, continue, dp, crt, mlm")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        train_kind(v)  # a ValueError naming the registered kinds
        return v
    data: DataConfig = DataConfig()
    output: Annotated[Optional[str], ServerPath(
        why="set by the service: a training writes to its own folder", runner_sets=True)] = Field(
        None, description="the run folder (local path)")
    storage: Annotated[Optional[str], ServerPath(
        why="set by the service: checkpoints stay in the training's own folder")] = Field(
        None, description="checkpoint storage (local path or s3://); default: OUTPUT/checkpoints")
    model: ModelConfig = ModelConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    optim: OptimConfig = OptimConfig()
    dp: Optional[DPConfig] = None
    crt: Optional[CRTConfig] = None
    audit: Optional[AuditConfig] = None
    workers: WorkersConfig = WorkersConfig()
    checkpoint_every: int = Field(50, ge=1, le=10_000_000)
    report_every: int = Field(10, ge=1, le=10_000_000)
    max_failures: Annotated[int, Quota("train_max_failures")] = Field(2, ge=0, le=100)
    admitted_plan: Annotated[Optional[dict], ServiceSets(
        why="set by the service: the DP plan it admitted against the data's privacy ledger")] = Field(
        None, description="the DP plan admitted before the run (train.admission): the run takes its noise, "
                          "sample rate, delta, steps and audit seed, or fails before any step")

    base_model: Annotated[Optional[dict], ServiceSets(
        why="set by the service: the catalogued model model.checkpoint's base:<name> resolved to")] = Field(
        None, description="the service's catalogued model (name, id, owner) that model.checkpoint base:<name> "
                          "names; the run gets its folder as train.job --checkpoint")

    @model_validator(mode="after")
    def _consistent(self):
        kind = train_kind(self.kind)
        if kind.dp and self.dp is None:
            raise ValueError(f"kind {self.kind} needs a 'dp' section")
        if not kind.dp and self.dp is not None:
            raise ValueError(f"kind {self.kind} trains without DP: remove 'dp' or use kind dp")
        if self.dp is not None and self.dp.no_guarantee and kind.confidentiality:
            raise ValueError("dp.no_guarantee: kind crt reports a confidentiality bound, which needs a guarantee")
        if self.audit is not None and self.dp is None:
            raise ValueError("audit: audits a DP guarantee; this run has no 'dp' section")
        if not kind.confidentiality and self.crt is not None:
            raise ValueError("'crt' is only for kind crt")
        if kind.needs_checkpoint and not self.model.checkpoint:
            raise ValueError(f"kind {self.kind} needs model.checkpoint")
        if self.model.preset is None and not self.model.checkpoint:
            raise ValueError("model: give a preset or a checkpoint")
        if self.model.lora is not None and (not self.model.checkpoint or kind.fresh_weights or kind.masked_lm):
            raise ValueError("model.lora: adapters fine-tune a causal model.checkpoint (kinds continue, dp, crt)")
        if self.model.lora is not None and self.tokenizer.mode == "separate":
            raise ValueError("model.lora: tokenizer.mode separate re-initialises the embeddings, which LoRA keeps "
                             "frozen (they would stay random); use the checkpoint's tokenizer (shared)")
        kind.check(self)
        if self.data.ignore_kinds and not self.data.ignore_spans:
            raise ValueError("data.ignore_kinds: give data.ignore_spans, the column the kinds are in")
        # by value, not by "was it given": a stored config (every field written) must parse again
        if self.data.mlm_probability != 0.15 and not kind.masked_lm:
            raise ValueError("data.mlm_probability is a setting of kind mlm")
        if self.tokenizer.also_on and not kind.trains_tokenizer:
            raise ValueError("tokenizer.also_on: only a pretrain trains the shared tokenizer")
        if self.admitted_plan is not None and self.dp is None:
            raise ValueError("admitted_plan: only a DP run has a plan to admit")
        return self

    def with_paths(self, data: str | None = None, output: str | None = None) -> "TrainConfig":
        """The config with the CLI's ``--data``/``--output`` overriding its paths."""
        upd: dict = {}
        if data is not None:
            upd["data"] = self.data.model_copy(update={"path": data})
        if output is not None:
            upd["output"] = output
        return self.model_copy(update=upd) if upd else self

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


def parse_config(data, source: str = "config") -> TrainConfig:
    """A validated config or a :class:`SpecError` naming the first bad field's path."""
    return validate(TrainConfig, data, source, "a training config")


def load_config(path: str | Path) -> TrainConfig:
    """The config at a path or URI (YAML, or JSON by its ``.json`` name)."""
    return parse_config(read_mapping(str(path)), str(path))
