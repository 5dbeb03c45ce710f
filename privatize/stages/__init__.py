"""Built-in stages (each module of this package registers its own with ``@register_stage``,
see :mod:`privatize.stage`; the registry imports them on its first lookup), and the
registry's two readers: a runner or a spec asks here, so the contract module never
imports the stages it describes. ``redact`` imports Presidio and spaCy lazily, on first
use."""

from __future__ import annotations

from typing import Any

from privatize.stage import STAGES, Stage, StageContext


def registered_kinds() -> dict[str, tuple[type, type[Stage]]]:
    """{kind: (settings class, stage class)} of every registered stage, built-ins included."""
    return dict(STAGES.items())


def build_stage(settings: Any, context: StageContext | None = None) -> Stage:
    """The stage of ``settings.kind``, built from its settings."""
    _, cls = STAGES.get(settings.kind)
    return cls(settings, context=context)
