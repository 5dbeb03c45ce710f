"""One pydantic model per evaluation, read from a YAML file (``privatize attack CONFIG``).

An evaluation attacks one or more trained models with the same inputs, so one report can
compare them::

    version: 1
    models:
      - {name: plain, path: runs/plain}          # a training run folder or a HF checkpoint
      - {name: crt, path: runs/crt}
    canaries: {key: keys/canary.key, digits: 4, count: 10, held_out: 10, repeats: 20}
    mia: {members: corpus/train.jsonl, non_members: corpus/heldout.jsonl, limit: 1000}
    perplexity: {data: corpus/heldout.jsonl, limit: 500}
    reconstruction: {data: corpus/train.jsonl, candidates: names/non_members.txt, trials: 1000, n_candidates: 100}
    true_prefix: {data: corpus/train.jsonl, trials: 100, samples: 100}
    cipher_outputs: {key: keys/entity.key, prompts: corpus/prompts.txt, count: 200, training_pii: corpus/train.jsonl}
    corpus_stats: {sources: {plain: corpus/train.jsonl, encrypted: runs/enc}, unit: word}
    identifiers: {members: runs/members-ids, non_members: runs/heldout-ids, samples: 2, limit: 500}
    output: evals/demo

Every part is optional; the report shows what ran. Data sources are a privatization
output folder (``shards/*.parquet``), a folder of Parquet or JSONL files, one such file,
or a ``.txt`` file (one text per line). Key references are resolved like the pipeline's:
the canary secrets are derived from the canary key and never written anywhere.
``reconstruction`` and ``true_prefix`` read records with gold entity spans (``.jsonl``,
the CustomerSim format); ``cipher_outputs`` checks generated entity tokens under the
entity stage's key. ``identifiers`` measures paper 003's Privacy (the share of the
identifiers the ``identifiers`` stage found that a model predicts or regurgitates) and,
with ``non_members``, its two membership inferences per individual; its sources carry
``identifier_spans`` and ``individual_id`` (the output of a run with that stage and
``output.pseudonym_key``, or Parquet/JSONL with those columns), and ``case`` and
``digits`` must be the stage's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from privatize.io.configfile import read_mapping, validate
from privatize.policy import Quota


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\- ]+$")
    path: str = Field(min_length=1, description="a training run folder (its model/) or a Hugging Face checkpoint")
    protection: Optional[str] = Field(None, max_length=200,
                                      description="what the training data went through (default: from the run)")
    reference: bool = Field(False, description=(
        "the unprotected model the others' cost of protection (perplexity ratio) is measured against; "
        "default: the first model with no DP and a protection that starts with 'none'"))


class CanarySpec(_Strict):
    """The canary set inserted by the ``canaries`` stage: the same key and settings
    derive the same secrets."""

    key: str = Field(min_length=1, description="the canary stage's key reference")
    format: str = "My ID is: {secret}"
    digits: Annotated[int, Quota("eval_max_exact_digits", when={"method": "exact"})] = Field(6, ge=1, le=9)
    count: Annotated[int, Quota("eval_max_canaries")] = Field(10, ge=1, le=1000)
    held_out: Annotated[int, Quota("eval_max_canaries")] = Field(10, ge=0, le=1000)
    repeats: int = Field(20, ge=1, le=10000, description="times each canary was inserted (for the report)")
    seed_label: str = Field("", max_length=200, description="the stage's seed_label")
    method: Literal["exact", "extrapolated"] = "exact"
    sample: Annotated[int, Quota("eval_max_examples", when={"method": "extrapolated"})] = Field(
        10000, ge=100, le=1_000_000, description="extrapolated: candidates scored for the fit")

    @field_validator("format")
    @classmethod
    def _one_placeholder(cls, v: str) -> str:
        if v.count("{secret}") != 1:
            raise ValueError("must contain {secret} exactly once")
        return v

    @model_validator(mode="after")
    def _exact_size(self):
        if self.method == "exact" and self.digits > 7:
            raise ValueError(f"exact exposure scores all 10^{self.digits} candidates; use at most 7 digits "
                             "or method: extrapolated")
        return self


class MiaSpec(_Strict):
    members: str
    non_members: str
    text_column: str = "text"
    limit: Annotated[int, Quota("eval_max_examples")] = Field(1000, ge=10, le=1_000_000,
                                                         description="examples per side (a random sample)")
    k: float = Field(0.2, gt=0, le=1, description="min-k%: the share of lowest-probability tokens")
    group_size: int = Field(20, ge=2, le=1000)
    context: str = Field("{text}", description="how an example is scored, e.g. 'USR: My name is {text}.'")
    reference: Optional[str] = Field(None, description="a reference model for the likelihood-ratio score")
    seed: int = 0

    @field_validator("context")
    @classmethod
    def _ctx(cls, v: str) -> str:
        if v.count("{text}") != 1:
            raise ValueError("must contain {text} exactly once")
        return v


class PerplexitySpec(_Strict):
    data: str
    text_column: str = "text"
    limit: Annotated[int, Quota("eval_max_examples")] = Field(500, ge=1, le=1_000_000)
    spans_column: Optional[str] = Field(None, min_length=1, max_length=64, description=(
        "a column of character spans ({start, end}: gold or detected secrets) in the held-out records: the "
        "result adds the perplexity on the tokens outside every span (the text around the secrets, which "
        "protection should keep) and on the tokens that overlap one (the secrets, which it is meant not to "
        "learn)"))


class ExtractionSpec(_Strict):
    prompts: str = Field(description="public text the 5-token prompts are cut from (e.g. wikitext)")
    training_data: str = Field(description="the training texts generations are matched against")
    text_column: str = "text"
    count: Annotated[int, Quota("eval_max_examples")] = Field(200, ge=1, le=1_000_000)
    prompt_tokens: int = Field(5, ge=1, le=64)
    max_new_tokens: int = Field(64, ge=8, le=1024)
    min_words: int = Field(35, ge=5, le=1000)
    zlib_threshold: float = Field(0.275, ge=0, le=1)
    seed: int = 0


class _NameTrialsSpec(_Strict):
    """Where name trials come from: records with gold spans (see ``attacks.reconstruction``)."""

    data: str = Field(description="a .jsonl file (or folder of them) of records with text and gold spans")
    text_column: str = "text"
    entity_type: str = Field("NAME", min_length=1, max_length=64)
    context: Literal["turn", "dialogue"] = Field("turn", description="S0: the name's line, or all text before it")
    max_context_chars: int = Field(512, ge=1, le=100_000)
    following_turns: int = Field(0, ge=0, le=100, description="S1: the rest of the name's line plus this many lines")
    seed: int = 0


class ReconstructionSpec(_NameTrialsSpec):
    candidates: str = Field(description="names to draw the other candidates from (.txt, one per line)")
    trials: int = Field(1000, ge=1, le=1_000_000)
    n_candidates: int = Field(100, ge=2, le=100_000, description="the true name included")


class TruePrefixSpec(_NameTrialsSpec):
    trials: int = Field(100, ge=1, le=1_000_000)
    samples: int = Field(100, ge=1, le=10_000)
    max_new_tokens: int = Field(48, ge=1, le=1024)
    top_k: int = Field(64, ge=1, le=1_000_000)
    min_s1_words: int = Field(1, ge=0, le=1000, description="skip trials whose S1 has fewer words (nothing to "
                                                             "reconstruct after a bare '.')")


class CipherOutputsSpec(_Strict):
    key: str = Field(min_length=1, description="the entity stage's aes-siv (or aes-ecb) key reference")
    prompts: str = Field(description="texts to prompt with (.txt: one per line)")
    text_column: str = "text"
    count: int = Field(200, ge=1, le=1_000_000, description="prompts (a random sample)")
    prompt_tokens: Optional[int] = Field(None, ge=1, le=4096, description="cut each prompt to its first tokens")
    samples: int = Field(1, ge=1, le=1000, description="generations per prompt")
    max_new_tokens: int = Field(64, ge=1, le=1024)
    training_pii: Optional[str] = Field(None, description="plaintext PII of the training set: a .txt (one value "
                                                          "per line) or .jsonl records whose gold spans are PII")
    seed: int = 0


class CorpusStatsSpec(_Strict):
    sources: dict[str, str] = Field(min_length=1, max_length=16, description="corpus name -> data source")
    unit: Literal["word", "char", "token"] = "word"
    max_n: int = Field(4, ge=1, le=8)
    text_column: str = "text"
    limit: Optional[int] = Field(None, ge=1, le=10_000_000, description="texts per corpus (a random sample)")
    tokenizer: Optional[str] = Field(None, description="unit token: a model or tokenizer folder (default: the "
                                                       "first model's)")

    @field_validator("sources")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not name or len(name) > 64:
                raise ValueError(f"corpus name {name!r} must have 1 to 64 characters")
        return v


class IdentifiersSpec(_Strict):
    """Paper 003's identifier metrics (:mod:`attacks.identifiers`). Identifiers are read
    from the sources' ``identifier_spans``; ``max_n``, ``case`` and ``digits`` only say how
    generated text is normalised before it is matched against them, so they must be the
    ``identifiers`` stage's."""

    members: str = Field(description="records the models were trained on: a privatization output with "
                                     "identifier_spans and individual_id (or Parquet/JSONL with those columns)")
    non_members: Optional[str] = Field(None, description="records of held-out individuals, likewise: needed for "
                                                         "the low-cost and the loss membership inference")
    max_n: int = Field(3, ge=1, le=5, description="the identifiers stage's max_n")
    case: Literal["fold", "keep"] = Field("fold", description="the identifiers stage's case")
    digits: Literal["keep", "zero"] = Field("keep", description="the identifiers stage's digits")
    samples: int = Field(2, ge=0, le=1000, description="generations per member record (0: predictions only)")
    prompt_chars: int = Field(24, ge=1, le=10_000, description="generations start from each record's first "
                                                               "characters")
    max_new_tokens: int = Field(48, ge=1, le=1024)
    limit: Optional[int] = Field(None, ge=1, le=10_000_000, description="records per source (a random sample)")
    seed: int = 0

    def settings(self):
        """The stage settings generated text is normalised under (no detector: the direct
        identifiers come from the spans)."""
        from privatize.stages.identifiers import IdentifiersSettings

        return IdentifiersSettings(direct="none", max_n=self.max_n, case=self.case, digits=self.digits)


class ScoringSpec(_Strict):
    workers: Annotated[int, Quota("eval_max_workers")] = Field(0, ge=0, le=64, description="Ray workers that score MIA batches (0: in this process)")
    batch_tokens: Annotated[int, Quota("eval_max_batch_tokens")] = Field(16384, ge=256, le=1 << 22)
    device: Literal["cpu", "cuda", "auto"] = Field(
        "cpu", description="where this process scores the models: cpu, cuda (refused when there is no CUDA "
                           "device) or auto (cuda when there is one)")


class AttackEntry(BaseModel):
    """One registered attack (``attacks.registry``): its ``kind`` and its settings."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _registered(self):
        from attacks.registry import parse_entry

        parse_entry(self.model_dump())
        return self


SECTIONS = ("perplexity", "canaries", "mia", "extraction", "reconstruction", "true_prefix", "cipher_outputs",
            "identifiers")
"""The sections that configure the papers' attacks (``attacks.builtin``), in the order
they run."""

ATTACKS = (*SECTIONS, "corpus_stats")
"""Every section that gives an evaluation something to run."""


class AttackConfig(_Strict):
    version: Literal[1] = 1
    models: Annotated[list[ModelSpec], Quota("eval_max_models")] = Field(min_length=1, max_length=16)
    canaries: Optional[CanarySpec] = None
    mia: Optional[MiaSpec] = None
    perplexity: Optional[PerplexitySpec] = None
    extraction: Optional[ExtractionSpec] = None
    reconstruction: Optional[ReconstructionSpec] = None
    true_prefix: Optional[TruePrefixSpec] = None
    cipher_outputs: Optional[CipherOutputsSpec] = None
    corpus_stats: Optional[CorpusStatsSpec] = None
    identifiers: Optional[IdentifiersSpec] = None
    attacks: list[AttackEntry] = Field(default_factory=list, max_length=32, description=(
        "registered attacks (attacks.registry): [{kind: NAME, ...its settings}]"))
    scoring: ScoringSpec = ScoringSpec()
    output: str = "evaluation"

    @model_validator(mode="after")
    def _names_unique(self):
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique (got {names})")
        kinds = [a.kind for a in self.attacks] + [s for s in SECTIONS if getattr(self, s) is not None]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"attacks: each kind at most once, as a section or in attacks (got {kinds})")
        if not any(getattr(self, a) for a in ATTACKS) and not self.attacks:
            raise ValueError(f"nothing to run: give at least one of {', '.join(ATTACKS)} or attacks")
        return self

    def with_output(self, output: str | None) -> "AttackConfig":
        return self.model_copy(update={"output": output}) if output else self

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


def parse_config(data, source: str = "config") -> AttackConfig:
    """A validated config or a :class:`SpecError` naming the first bad field's path."""
    return validate(AttackConfig, data, source, "an attack config")


def load_config(path: str | Path) -> AttackConfig:
    """The config at a path or URI (YAML, or JSON by its ``.json`` name)."""
    return parse_config(read_mapping(str(path)), str(path))
