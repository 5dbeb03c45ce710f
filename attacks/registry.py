"""Attacks that register themselves: one module each, in the manner of ``privatize.stages``.

An attack is a class with a ``name`` (its ``kind`` in the evaluation config's ``attacks``
list, and its key in each model's results), a pydantic ``Settings`` model (its config,
strict), and three steps:

* ``prepare(settings, ctx) -> inputs``: every check that can fail and every input it
  reads, once per evaluation and before anything is written (``ctx`` is a
  :class:`Context`: where relative paths start; texts are read with
  ``attacks.data.read_texts``);
* ``run(settings, model, inputs) -> result``: one model (a :class:`Target`: its
  ``adapter``, an ``attacks.model.ModelAdapter``, is the only place torch is), a JSON-able
  result (a dict, or a dataclass named as ``Result``, which ``attacks.results.from_dict``
  rebuilds from ``evaluation.json``);
* ``render(results) -> html``: its section of the report, from ``{model name: result}``
  (escape what you show: ``attacks.report_format.esc``); ``card(result, model, reference)``
  adds rows to each model's privacy card (``None``: the model has no result).

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

Every module of :mod:`attacks.kinds` is an attack, imported on the first lookup (the
papers': perplexity, canaries, mia, extraction, reconstruction, true_prefix,
cipher_outputs, identifiers, each with its settings, its typed ``Result`` and its card
rows); a plugin's module is named by an entry point of the group ``privatize.attacks``.
The papers' attacks are ``section`` attacks: a config may also name them as sections of
their own (``mia: {...}``, the older form), and their errors name that section's fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

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
    Result: ClassVar[type | None] = None
    """The dataclass ``run`` returns, rebuilt from ``evaluation.json`` (None: the
    result is stored and read back as the JSON it is)."""
    order: ClassVar[int] = 100
    """Where it runs, and its rows and section stand in the report, among the configured
    attacks (the papers' 10 to 80; then by name)."""
    section: ClassVar[bool] = False
    """The config may also name it as a section of its own (``mia: {...}``, the papers'
    attacks, for older configs); its errors then name the section's fields themselves."""
    local_only: ClassVar[str | None] = None
    """Why the service does not offer it (what it reads that a tenant cannot name by
    reference), or None: the service runs it, its settings' ``privatize.policy`` markers
    saying how (a ``DataSource`` field takes a corpus or job reference, a ``ServerPath``
    field is refused, a ``Quota`` bounds)."""

    def prepare(self, settings, ctx: Context) -> Any:
        return None

    def run(self, settings, model: Target, inputs: Any) -> Any:
        raise NotImplementedError

    def render(self, results: dict[str, Any]) -> str:
        return ""

    def card(self, result: Any, model: Any, reference: Any) -> list[tuple[str, str]]:
        """Rows (label, html) of a model's privacy card; ``result`` is None when the attack
        did not run on that model; ``model`` and ``reference`` are ``ModelResult``s (the
        reference is the unprotected model the cost of protection is measured against)."""
        return []


ATTACKS: Registry[Attack] = Registry("attack", packages=("attacks.kinds",), group="privatize.attacks")
"""Every attack: the papers' (each module of :mod:`attacks.kinds`, imported by name on the
first lookup: they import this module to register, so this module does not import them)
and a plugin's from the module its entry point names."""


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


def in_order(names) -> list[str]:
    """Attack names in the order they run and show: by ``order``, then by name (a name not
    registered here last)."""
    def key(n):
        return (ATTACKS.get(n).order if n in ATTACKS else 1 << 30, n)
    return sorted(names, key=key)


def jsonable(result: Any) -> Any:
    """An attack's result as ``evaluation.json`` holds it."""
    return dataclasses.asdict(result) if dataclasses.is_dataclass(result) else result


def prepare_all(entries: list[tuple[str, Attack, BaseModel]], base_dir: str | None
                ) -> list[tuple[Attack, BaseModel, Any]]:
    """Every configured attack prepared, in order: ``entries`` are (where it is in the
    config, the attack, its settings); a SpecError from the papers' attacks names its own
    field (``section`` attacks), any other is prefixed with where the attack is (``attacks.<i>``)."""
    out = []
    ctx = Context(base_dir)
    for where, a, settings in entries:
        try:
            out.append((a, settings, a.prepare(settings, ctx)))
        except SpecError as exc:
            if a.section:
                raise
            raise SpecError(f"{where}: {exc}") from None
    return out
