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
each module with its settings, and any plugin): a pydantic union discriminated by ``kind``,
built from the registry (each attack's settings with its ``kind``), so the config's JSON
schema lists every attack's fields and an error names its path through the kind
(``attacks.0.canaries.digits``). The papers' attacks may also be sections of their own, the
older form (``mia: {members: ...}``), read the same way: the sections are the registry's
built-in ``section`` attacks (:data:`SECTIONS`), nothing lists them here. Every part is
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

import functools
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from typing_extensions import TypeAliasType

from attacks.registry import ATTACKS, in_order
from privatize.io.configfile import read_mapping, validate
from privatize.policy import Quota, ServerPath


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


class _Kind(BaseModel):
    kind: str


def _title(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.replace("-", "_").split("_")) + "Entry"


@functools.lru_cache(maxsize=256)
def entry_model(name: str, settings: type[BaseModel]) -> type[BaseModel]:
    """The attack ``name``'s entry of ``attacks``: its settings (``settings``, strict as they
    are: their validators and ``privatize.policy`` markers hold) with ``kind: Literal[name]``
    first. A validated entry *is* the attack's settings (a subclass of ``settings``)."""
    return create_model(_title(name), __base__=(settings, _Kind), __module__=__name__,
                        __doc__=settings.__doc__,
                        kind=(Literal[name], Field(description=f"the registered attack {name!r}")))


def registered() -> tuple[tuple[str, type[BaseModel]], ...]:
    """(name, settings model) of every attack registered now, by name (the registry's
    discovery runs on the first call: ``attacks.kinds`` and the ``privatize.attacks`` entry
    points)."""
    return tuple((name, a.Settings) for name, a in ATTACKS.items())


@functools.lru_cache(maxsize=32)
def entry_type(attacks: tuple[tuple[str, type[BaseModel]], ...]) -> Any:
    """One entry of ``attacks``: the union of :func:`entry_model` of ``attacks`` ((name,
    settings) pairs: :func:`registered`), discriminated by ``kind`` (an unknown kind is one
    error naming every registered one). A named alias, ``AttackEntry`` in the JSON schema."""
    members = tuple(entry_model(name, settings) for name, settings in attacks)
    one = (Annotated[Union[members], Field(discriminator="kind")] if len(members) > 1 else members[0])
    return TypeAliasType("AttackEntry", one)


def _attacks_field(attacks) -> tuple:
    return (list[entry_type(attacks)], Field(default_factory=list, max_length=32, description=(
        "registered attacks (attacks.registry): [{kind: NAME, ...its settings}], each kind at most once")))


def _built_in(a) -> bool:
    return type(a).__module__.rpartition(".")[0] in ATTACKS.packages


SECTIONS: tuple[str, ...] = tuple(in_order(name for name, a in ATTACKS.items() if a.section and _built_in(a)))
"""The older named sections of the papers' attacks: the registry's built-in ``section``
attacks (``attacks.kinds``), each read as the entry ``{kind: NAME, ...}`` of ``attacks``
would (the same settings model)."""

ATTACKS_AND_STATS = (*SECTIONS, "corpus_stats")
"""Every section that gives an evaluation something to run."""


class _AttackConfig(_Strict):
    """An evaluation config (see :mod:`attacks.config`): the fields and checks that do not
    depend on the registry; :data:`AttackConfig` adds the papers' sections and the
    ``attacks`` union."""

    version: Literal[1] = 1
    models: Annotated[list[ModelSpec], Quota("eval_max_models")] = Field(min_length=1, max_length=16)

    @model_validator(mode="after")
    def _names_unique(self):
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique (got {names})")
        kinds = [a.kind for a in self.attacks] + [s for s in SECTIONS if getattr(self, s) is not None]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"attacks: each kind at most once, as a section or in attacks (got {kinds})")
        if not any(getattr(self, a) for a in ATTACKS_AND_STATS) and not self.attacks:
            raise ValueError(f"nothing to run: give at least one of {', '.join(ATTACKS_AND_STATS)} or attacks")
        return self

    def with_output(self, output: str | None) -> "AttackConfig":
        return self.model_copy(update={"output": output}) if output else self

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


_BUILT = tuple((name, a.Settings) for name, a in ATTACKS.items() if _built_in(a))
for _name, _settings in _BUILT:  # importable by name, as pickle finds a class (CanariesEntry, ...)
    _entry = entry_model(_name, _settings)
    globals().setdefault(_entry.__name__, _entry)

AttackConfig = create_model(
    "AttackConfig", __base__=_AttackConfig, __module__=__name__, __doc__=_AttackConfig.__doc__,
    **{name: (Optional[ATTACKS.get(name).Settings], None) for name in SECTIONS},
    corpus_stats=(Annotated[Optional[CorpusStatsSpec], ServerPath(why=(
        "not offered by the service yet (it reads corpora and a tokenizer by path): run it with `privatize "
        "attack` on your own copy"))], None),
    attacks=_attacks_field(_BUILT),
    scoring=(ScoringSpec, ScoringSpec()),
    output=(str, "evaluation"))
"""The evaluation config with the papers' attacks (``attacks.kinds``), whenever this module
is imported; :func:`config_model` is the one for the attacks registered now (plugins too:
the entry points' and any registered since), a subclass of this one."""


@functools.lru_cache(maxsize=32)
def _rebuilt(attacks) -> type:
    return create_model("AttackConfig", __base__=AttackConfig, __module__=__name__, __doc__=AttackConfig.__doc__,
                        attacks=_attacks_field(attacks))


def config_model() -> type:
    """The evaluation config's model for the attacks registered now: :data:`AttackConfig`
    when they are the papers' only, else a subclass whose ``attacks`` union has the plugins
    too (the entry points', or one a test registered). :func:`parse_config` validates with it."""
    now = registered()
    return AttackConfig if now == _BUILT else _rebuilt(now)


def marked_in(data: dict, kinds: tuple[type, ...]) -> Iterator[tuple[str, Any, Any]]:
    """(field path, value, marker) of every field of a config (a raw mapping) that an attack's
    settings mark with one of ``kinds`` (``privatize.policy``), in the named sections
    (``mia.members``) and in the ``attacks`` entries (``attacks.0.members``) alike."""
    from privatize.policy import marked

    if not isinstance(data, dict):
        return
    for name in SECTIONS:
        for path, value, m in marked(data.get(name), ATTACKS.get(name).Settings, kinds):
            yield ".".join((name, *path)), value, m
    entries = data.get("attacks")
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, dict) and isinstance(entry.get("kind"), str) and entry["kind"] in ATTACKS:
            for path, value, m in marked(entry, ATTACKS.get(entry["kind"]).Settings, kinds):
                yield ".".join(("attacks", str(i), *path)), value, m


def set_at(data: dict, path: str, value) -> None:
    """Set the field at a dotted path of a config (a raw mapping; list items by index:
    ``attacks.0.members``), as :func:`marked_in` names them."""
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def data_sources(data: dict) -> list[tuple[str, Any]]:
    """(field path, value) of every field that names texts to read (``DataSource``)."""
    from privatize.policy import DataSource

    return [(path, value) for path, value, _ in marked_in(data, (DataSource,))]


def model_references(data: dict) -> list[tuple[str, Any]]:
    """(field path, value) of every field that names a model besides ``models`` (a
    ``ServerPath`` with ``model_ref``: ``mia``'s reference model)."""
    from privatize.policy import ServerPath

    return [(path, value) for path, value, m in marked_in(data, (ServerPath,)) if m.model_ref]


def config_schema() -> dict:
    """The JSON schema of an evaluation config (every registered attack's fields under
    ``$defs``, ``attacks`` items one of them by ``kind``)."""
    return config_model().model_json_schema()


def parse_config(data, source: str = "config") -> AttackConfig:
    """A validated config or a :class:`SpecError` naming the first bad field's path."""
    return validate(config_model(), data, source, "an attack config")


def load_config(path: str | Path) -> AttackConfig:
    """The config at a path or URI (YAML, or JSON by its ``.json`` name)."""
    return parse_config(read_mapping(str(path)), str(path))
