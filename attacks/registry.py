"""Attacks that register themselves: one module each, in the manner of ``privatize.stages``.

An attack is a class with a ``name`` (its ``kind`` in the evaluation config's ``attacks``
list), a pydantic ``Settings`` model (its config, strict), and three steps:

* ``prepare(settings, ctx) -> inputs``: every check that can fail and every input it
  reads, once per evaluation and before anything is written (``ctx`` is a
  :class:`Context`: where relative paths start, how texts are read);
* ``run(settings, adapter, inputs) -> result``: one model (``attacks.model.ModelAdapter``:
  the only place torch is), a JSON-able result (a dict, or a dataclass);
* ``render(results) -> html``: its section of the report, from ``{model name: result}``
  as ``evaluation.json`` holds them (escape what you show: ``attacks.report_format.esc``).

A config runs it with ``attacks: [{kind: NAME, ...its settings}]``; the results are each
model's ``attacks[NAME]`` in ``evaluation.json`` and a section of the report::

    @register_attack
    class Echo(Attack):
        name, title = "echo", "Echo"
        class Settings(AttackSettings):
            prompt: str
        def run(self, settings, adapter, inputs):
            return {"text": adapter.generate([settings.prompt], samples=1, max_new_tokens=8)[0][0]}
        def render(self, results):
            return "".join(f"<p>{esc(m)}: {esc(r['text'])}</p>" for m, r in results.items())

The attacks of the papers (canaries, mia, perplexity, extraction, reconstruction,
true_prefix, cipher_outputs, corpus_stats, identifiers) are the config's named sections,
run by ``attacks.run``; new attacks are added here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from privatize.errors import SpecError


class AttackSettings(BaseModel):
    """Base of an attack's settings: strict (an unknown field is an error) and frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Context:
    """What ``prepare`` may use: where relative paths start (the config's folder)."""

    base_dir: str | None = None

    def read_texts(self, source: str, *, column: str = "text", limit: int | None = None, seed: int = 0,
                   what: str = "data") -> list[str]:
        from attacks.data import read_texts

        return read_texts(source, column=column, limit=limit, seed=seed, what=what)


class Attack:
    name: ClassVar[str]
    title: ClassVar[str]
    Settings: ClassVar[type[AttackSettings]] = AttackSettings

    def prepare(self, settings: AttackSettings, ctx: Context) -> Any:
        return None

    def run(self, settings: AttackSettings, adapter, inputs: Any) -> Any:
        raise NotImplementedError

    def render(self, results: dict[str, Any]) -> str:
        raise NotImplementedError


_ATTACKS: dict[str, Attack] = {}


def register_attack(cls: type[Attack]) -> type[Attack]:
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or not name.islower():
        raise ValueError(f"attack name {name!r}: a lowercase identifier")
    if name in _ATTACKS and type(_ATTACKS[name]).__qualname__ != cls.__qualname__:
        raise ValueError(f"attack {name!r} is registered already")
    _ATTACKS[name] = cls()
    return cls


def attack(name: str) -> Attack:
    try:
        return _ATTACKS[name]
    except KeyError:
        raise LookupError(f"unknown attack {name!r} (registered: {', '.join(sorted(_ATTACKS)) or 'none'})") from None


def attack_names() -> list[str]:
    return sorted(_ATTACKS)


def parse_entry(entry: dict) -> tuple[Attack, AttackSettings]:
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


def prepare_all(entries, base_dir: str | None) -> list[tuple[Attack, AttackSettings, Any]]:
    """Every configured attack prepared (SpecError naming ``attacks.<i>``)."""
    out = []
    ctx = Context(base_dir)
    for i, entry in enumerate(entries):
        a, settings = parse_entry(entry)
        try:
            out.append((a, settings, a.prepare(settings, ctx)))
        except SpecError as exc:
            raise SpecError(f"attacks.{i}: {exc}") from None
    return out
