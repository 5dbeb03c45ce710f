"""Base of every stage's settings and the key-reference type.

Each stage module defines ``class FooSettings(StageSettings)`` with
``kind: Literal["foo"] = "foo"`` and registers its stage with
``@register_stage("foo", FooSettings)``; the pipeline spec builds its discriminated
union from the registry.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

KEY_SCHEMES = ("file:", "keystore:")


def _check_key_ref(value: str) -> str:
    if not value.startswith(KEY_SCHEMES):
        raise ValueError("a key reference is a URI: 'file:<path>' or 'keystore:<id>'")
    if value.split(":", 1)[1] == "":
        raise ValueError("key reference has an empty path or id")
    return value


KeyRef = Annotated[str, AfterValidator(_check_key_ref)]
"""A reference to key material (``file:<path>`` or ``keystore:<id>``), never the key."""


class StageSettings(BaseModel):
    """Settings common to every stage. ``extra="forbid"`` so typos are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
