"""Attacks that register themselves: one module each, in the manner of ``privatize.stages``.

An attack is a class with a ``name`` (its ``kind`` in the evaluation config's ``attacks``
list), a pydantic ``Settings`` model (its config, strict), and three steps:

* ``prepare(settings, ctx) -> inputs``: every check that can fail and every input it
  reads, once per evaluation and before anything is written (``ctx`` is a
  :class:`Context`: where relative paths start; texts are read with
  ``attacks.data.read_texts``);
* ``run(settings, model, inputs) -> result``: one model (a :class:`Target`: its
  ``adapter``, an ``attacks.model.ModelAdapter``, is the only place torch is), a JSON-able
  result (a dict, or a dataclass);
* ``render(results) -> html``: its section of the report, from ``{model name: result}``
  as ``evaluation.json`` holds them (escape what you show: ``attacks.report_format.esc``).

A config runs it with ``attacks: [{kind: NAME, ...its settings}]``; the results are each
model's ``attacks[NAME]`` in ``evaluation.json`` and a section of the report::

    @register_attack
    class Echo(Attack):
        name, title = "echo", "Echo"
        class Settings(AttackSettings):
            prompt: str
        def run(self, settings, model, inputs):
            return {"text": model.adapter.generate([settings.prompt], samples=1, max_new_tokens=8)[0][0]}
        def render(self, results):
            return "".join(f"<p>{esc(m)}: {esc(r['text'])}</p>" for m, r in results.items())

The papers' attacks (``attacks.builtin``: perplexity, canaries, mia, extraction,
reconstruction, true_prefix, cipher_outputs, identifiers) are registered the same way; a
config names them as sections of their own (``mia: {...}``) as well as in ``attacks``, and
their typed results (``result_fields``) are what the report's cards and plots show.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from privatize.errors import SpecError
from privatize.registry import Registry


class AttackSettings(BaseModel):
    """Base of an attack's settings: strict (an unknown field is an error) and frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Context:
    """What ``prepare`` may use: where relative paths start (the config's folder), and a
    cache the attacks of one evaluation share (records two attacks read)."""

    base_dir: str | None = None
    cache: dict = field(default_factory=dict)


@dataclass
class Target:
    """The model ``run`` attacks: its name, its folder, the loaded ``adapter`` (an
    ``attacks.model.ModelAdapter``), and the evaluation's scoring settings; ``pids`` collects
    the processes that scored for it (the report's note on Ray scoring)."""

    name: str
    path: str
    adapter: Any
    scoring: Any
    progress: bool = False
    pids: set = field(default_factory=set)


class Attack:
    name: ClassVar[str]
    title: ClassVar[str]
    Settings: ClassVar[type[BaseModel]] = AttackSettings
    result_fields: ClassVar[tuple[str, ...]] = ()
    """The papers' attacks: ``run`` returns these ``ModelResult`` fields (typed results the
    report's cards, comparison and plots show; their ``render`` adds nothing). Empty: the
    result is the model's ``attacks[name]`` and ``render`` is the report's section."""

    def prepare(self, settings, ctx: Context) -> Any:
        return None

    def run(self, settings, model: Target, inputs: Any) -> Any:
        raise NotImplementedError

    def render(self, results: dict[str, Any]) -> str:
        return ""


ATTACKS: Registry[Attack] = Registry("attack", modules=("attacks.builtin",), group="privatize.attacks")
"""Every attack: the papers' (:mod:`attacks.builtin`, imported by name on the first lookup:
it imports this module to register, so this module does not import it) and a plugin's
from the module its entry point names."""


def register_attack(cls: type[Attack]) -> type[Attack]:
    name = getattr(cls, "name", None)
    if isinstance(name, str) and not name.isidentifier():
        raise ValueError(f"attack name {name!r}: an identifier (it names a section of the configuration)")
    ATTACKS.add(name, cls(), cls)
    return cls


def attack(name: str) -> Attack:
    """The attack ``name`` (:class:`privatize.registry.UnknownName`, a LookupError, for none)."""
    return ATTACKS.get(name)


def attack_names() -> list[str]:
    return ATTACKS.names()


def parse_entry(entry: dict) -> tuple[Attack, BaseModel]:
    """One entry of a config's ``attacks``: ``{kind: NAME, ...settings}`` -> (the attack,
    its validated settings); ValueError naming the field."""
    try:
        a = attack(entry.get("kind"))
    except LookupError as exc:
        raise ValueError(f"kind: {exc}") from None
    try:
        return a, a.Settings.model_validate({k: v for k, v in entry.items() if k != "kind"})
    except ValidationError as exc:
        e = exc.errors()[0]
        raise ValueError(f"{'.'.join(map(str, e['loc'])) or '(settings)'}: {e['msg']}") from None


def jsonable(result: Any) -> Any:
    """An attack's result as ``evaluation.json`` holds it."""
    return dataclasses.asdict(result) if dataclasses.is_dataclass(result) else result


def prepare_all(entries: list[tuple[str, Attack, BaseModel]], base_dir: str | None
                ) -> list[tuple[Attack, BaseModel, Any]]:
    """Every configured attack prepared, in order: ``entries`` are (where it is in the
    config, the attack, its settings); a SpecError from the papers' attacks names its own
    field, any other is prefixed with where the attack is (``attacks.<i>``)."""
    out = []
    ctx = Context(base_dir)
    for where, a, settings in entries:
        try:
            out.append((a, settings, a.prepare(settings, ctx)))
        except SpecError as exc:
            if a.result_fields:
                raise
            raise SpecError(f"{where}: {exc}") from None
    return out
