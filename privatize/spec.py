"""The pipeline spec: one pydantic model, read from YAML or JSON, validated before any
work starts. Every error names its field path (``stages.1.method: ...``).

Example (the CRT recipe)::

    version: 1
    stages:
      - kind: split
      - kind: dedup
      - kind: redact
      - kind: split_private
    output:
      num_shards: 8
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from privatize.errors import SpecError
from privatize.settings import KeyRef, StageSettings
from privatize.stage import registered_kinds


class InputSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["auto", "jsonl", "text", "parquet"] = "auto"
    text_unit: Literal["file", "line"] = "file"
    """For plain text: a document per file, or a document per line."""


class OutputSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    num_shards: int = Field(8, ge=1, le=4096)
    meta_keys: list[str] = Field(default_factory=list)
    """``meta`` keys copied to the output. None by default: metadata often holds PII."""
    pseudonym_key: KeyRef | None = None
    """An ``hmac`` key for the ``individual_id`` pseudonym; without one the column is emptied."""


def _stage_union():
    settings = [s for s, _ in registered_kinds().values()]
    if len(settings) == 1:
        return settings[0]
    return Annotated[Union[tuple(settings)], Field(discriminator="kind")]  # noqa: UP007


StageSpec = _stage_union()


class PipelineSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    input: InputSettings = Field(default_factory=InputSettings)
    stages: list[StageSpec] = Field(min_length=1)  # type: ignore[valid-type]
    output: OutputSettings = Field(default_factory=OutputSettings)

    @model_validator(mode="after")
    def _check_order(self) -> "PipelineSpec":
        check_stage_order(self.stages)
        return self

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()

    def key_refs(self) -> list[str]:
        refs = [getattr(s, "key", None) for s in self.stages]
        refs.append(self.output.pseudonym_key)
        return [r for r in refs if r]


def _order_error(i: int, msg: str) -> ValueError:
    return ValueError(f"stages.{i}: {msg}")


def check_stage_order(stages: list[StageSettings]) -> None:
    """Refuse orders that cannot work (ARCHITECTURE.md, "Order")."""
    seen: list[str] = []
    for i, s in enumerate(stages):
        k = s.kind
        if k == "dedup":
            if "encrypt_text" in seen:
                raise _order_error(i, "dedup after encrypt_text finds nothing (ciphertext depends on position); "
                                      "put dedup before the cipher")
            if "redact" in seen:
                raise _order_error(i, "dedup after redact creates false duplicates (\"My name is <MASK>\"); "
                                      "put dedup before redact")
            unit = getattr(s, "unit", "segment")
            if unit == "segment" and "split" not in seen:
                raise _order_error(i, "dedup with unit 'segment' needs a split stage before it")
            if unit == "document" and "split" in seen:
                raise _order_error(i, "dedup with unit 'document' must come before split")
        elif k == "split":
            if "split" in seen:
                raise _order_error(i, "split appears twice")
            if "encrypt_text" in seen or "redact" in seen:
                raise _order_error(i, "split must come before redact and encrypt_text")
        elif k == "redact":
            if "encrypt_text" in seen:
                raise _order_error(i, "redact after encrypt_text sees only ciphertext; put it before the cipher")
        elif k == "split_private":
            if not ({"dedup", "redact"} & set(seen)):
                raise _order_error(i, "split_private needs a dedup or redact stage before it (it routes by their flags)")
        if k == "encrypt_text" and "encrypt_text" in seen:
            raise _order_error(i, "encrypt_text appears twice")
        seen.append(k)


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(lines)


def parse_spec(data: dict) -> PipelineSpec:
    if not isinstance(data, dict):
        raise SpecError("spec: the top level must be a mapping with 'stages'")
    try:
        return PipelineSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_errors(exc)) from None


def load_spec(path: str | Path) -> PipelineSpec:
    p = Path(path)
    data = read_spec_file(p)
    try:
        return parse_spec(data)
    except SpecError as exc:
        raise SpecError(f"{p}: {exc}") from None


def read_spec_file(path: str | Path) -> dict:
    """The mapping in a YAML or JSON spec file, unvalidated (errors name the file, and the
    line where the parser knows it)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{p}: cannot read spec ({exc})") from None
    try:
        data = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        where = getattr(exc, "problem_mark", None)
        line = f":{where.line + 1}" if where is not None else ""
        raise SpecError(f"{p}{line}: not valid {'JSON' if p.suffix.lower() == '.json' else 'YAML'}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{p}: the top level must be a mapping with 'stages'")
    return data
