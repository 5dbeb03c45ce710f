"""Built-in stages, and the registry's two readers. Importing this package registers the
built-ins (each module's ``@register_stage``, see :mod:`privatize.stage`); a runner or a spec
asks here, so the contract module never imports the stages it describes. ``redact`` imports
Presidio and spaCy lazily, on first use."""

from __future__ import annotations

from typing import Any

from privatize.stage import _REGISTRY, Stage, StageContext
from privatize.stages import (  # noqa: F401  (registration)
    canaries, dedup, encrypt_text, identifiers, mask, redact, refill, split, split_private, synthesize)


def registered_kinds() -> dict[str, tuple[type, type[Stage]]]:
    """{kind: (settings class, stage class)} of every registered stage, built-ins included."""
    return dict(_REGISTRY)


def build_stage(settings: Any, context: StageContext | None = None) -> Stage:
    """The stage of ``settings.kind``, built from its settings."""
    _, cls = _REGISTRY[settings.kind]
    return cls(settings, context=context)
