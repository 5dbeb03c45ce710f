"""One pydantic model per evaluation, read from a YAML file (``privatize attack CONFIG``).

An evaluation attacks one or more trained models with the same inputs, so one report can
compare them::

    version: 1
    models:
      - {name: plain, path: runs/plain}          # a training run folder or a HF checkpoint
      - {name: crt, path: runs/crt}
    attacks:
      - {kind: canaries, key: keys/canary.key, digits: 4, count: 10, held_out: 10, repeats: 20}
      - {kind: mia, members: corpus/train.jsonl, non_members: corpus/heldout.jsonl, limit: 1000}
      - {kind: perplexity, data: corpus/heldout.jsonl, limit: 500}
      - {kind: reconstruction, data: corpus/train.jsonl, candidates: names/non_members.txt, trials: 1000}
      - {kind: true_prefix, data: corpus/train.jsonl, trials: 100, samples: 100}
      - {kind: cipher_outputs, key: keys/entity.key, prompts: corpus/prompts.txt, training_pii: corpus/train.jsonl}
      - {kind: identifiers, members: runs/members-ids, non_members: runs/heldout-ids, samples: 2, limit: 500}
    corpus_stats: {sources: {plain: corpus/train.jsonl, encrypted: runs/enc}, unit: word}
    output: evals/demo

``attacks`` names registered attacks (``attacks.registry``: the papers' in ``attacks.kinds``,
each module with its settings, and any plugin); the papers' attacks may also be sections of
their own, the older form (``mia: {members: ...}``), read the same way. Every part is
optional; the report shows what ran. Data sources are a privatization
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

from attacks.kinds.canaries import CanarySettings
from attacks.kinds.cipher_outputs import CipherOutputsSettings
from attacks.kinds.extraction import ExtractionSettings
from attacks.kinds.identifiers import IdentifiersSettings
from attacks.kinds.mia import MiaSettings
from attacks.kinds.perplexity import PerplexitySettings
from attacks.kinds.reconstruction import ReconstructionSettings
from attacks.kinds.true_prefix import TruePrefixSettings
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
"""The older named sections of the papers' attacks (``attacks.kinds``, ``section``
attacks): each reads as the entry ``{kind: NAME, ...}`` of ``attacks`` would."""

ATTACKS = (*SECTIONS, "corpus_stats")
"""Every section that gives an evaluation something to run."""


class AttackConfig(_Strict):
    version: Literal[1] = 1
    models: Annotated[list[ModelSpec], Quota("eval_max_models")] = Field(min_length=1, max_length=16)
    canaries: Optional[CanarySettings] = None
    mia: Optional[MiaSettings] = None
    perplexity: Optional[PerplexitySettings] = None
    extraction: Optional[ExtractionSettings] = None
    reconstruction: Optional[ReconstructionSettings] = None
    true_prefix: Optional[TruePrefixSettings] = None
    cipher_outputs: Optional[CipherOutputsSettings] = None
    corpus_stats: Optional[CorpusStatsSpec] = None
    identifiers: Optional[IdentifiersSettings] = None
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
