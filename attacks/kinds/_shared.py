"""What two of the papers' attacks share: a key resolved where the config names it, and name
trials from records with gold spans (``reconstruction`` and ``true_prefix``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from attacks.registry import AttackSettings
from privatize.errors import SpecError


def resolve_key(ref: str, base_dir: str | None, expect: tuple[str, ...], field: str):
    from privatize.keys import KeyMaterialError, KeyResolver

    try:
        return KeyResolver(base_dir=base_dir).resolve(ref, expect=expect)
    except KeyMaterialError as exc:
        raise SpecError(f"{field}: {exc}") from None


class NameTrialsSettings(AttackSettings):
    """Where name trials come from: records with gold spans (see ``attacks.reconstruction``)."""

    data: str = Field(description="a .jsonl file (or folder of them) of records with text and gold spans")
    text_column: str = "text"
    entity_type: str = Field("NAME", min_length=1, max_length=64)
    context: Literal["turn", "dialogue"] = Field("turn", description="S0: the name's line, or all text before it")
    max_context_chars: int = Field(512, ge=1, le=100_000)
    following_turns: int = Field(0, ge=0, le=100, description="S1: the rest of the name's line plus this many lines")
    seed: int = 0


def name_trials(spec: NameTrialsSettings, section: str, n: int, cache: dict, min_s1_words: int = 0) -> list:
    """Name trials from records with gold spans (records read once per evaluation)."""
    from attacks.reconstruction import name_trials as draw, read_records

    key = ("records", spec.data, spec.text_column)
    if key not in cache:
        cache[key] = read_records(spec.data, text_column=spec.text_column, what=f"{section}.data")
    trials = draw(cache[key], n, spec.seed, entity_type=spec.entity_type, context=spec.context,
                  max_context_chars=spec.max_context_chars, following_turns=spec.following_turns,
                  min_s1_words=min_s1_words)
    if not trials:
        more = f" with at least {min_s1_words} word(s) after the name in S1" if min_s1_words else ""
        raise SpecError(f"{section}.data: {spec.data} has no usable {spec.entity_type} span{more} (spans whose "
                        "name also occurs in S0 or S1 are skipped)")
    return trials
