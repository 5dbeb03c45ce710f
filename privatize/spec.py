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
import re
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from privatize.errors import SpecError
from privatize.settings import (SECRET_KEY_KINDS, KeyKinds, KeyRef, StageSettings, field_holds_key_ref,
                                field_holds_secret_ref, field_key_kinds)
from privatize.stages import registered_kinds


MAX_SHARDS = 4096
MAX_STAGES = 32
"""Bounds of every spec (the service holds tenants to its own, smaller quotas:
``services.limits``). A stage's own numbers are bounded on its settings class."""


class InputSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["auto", "jsonl", "text", "parquet"] = "auto"
    text_unit: Literal["file", "line"] = "file"
    """For plain text: a document per file, or a document per line."""


class OutputSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    num_shards: int = Field(8, ge=1, le=MAX_SHARDS)
    meta_keys: list[str] = Field(default_factory=list, max_length=64)
    """``meta`` keys copied to the output. None by default: metadata often holds PII."""
    pseudonym_key: Annotated[KeyRef, KeyKinds("hmac")] | None = None
    """An ``hmac`` key for the ``individual_id`` pseudonym; without one the column is emptied."""


def _stage_union():
    settings = [s for s, _ in registered_kinds().values()]
    if len(settings) == 1:
        return settings[0]
    return Annotated[Union[tuple(settings)], Field(discriminator="kind")]  # noqa: UP007


StageSpec = _stage_union()


class QualitySettings(BaseModel):
    """How well this pipeline's policies did on gold data, as the data owner measured it
    (``experiments/pi_c_curve.py --write-quality`` writes both figures): copied into the
    manifest, where a CRT training takes them for its confidentiality report unless its
    own config gives them (``crt.gamma``, ``crt.delta_2``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gamma: float = Field(ge=0.0, le=1.0)
    """The share of gold secrets redaction (policy pi) misses: 1 - recall."""
    delta_2: float = Field(ge=0.0, le=1.0)
    """The share of gold secrets the public/private split (policy pi_c) leaves public."""
    source: str | None = Field(None, max_length=500)
    """Where the figures come from (data, date, command)."""


class PipelineSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    input: InputSettings = Field(default_factory=InputSettings)
    stages: list[StageSpec] = Field(min_length=1, max_length=MAX_STAGES)  # type: ignore[valid-type]
    output: OutputSettings = Field(default_factory=OutputSettings)
    quality: QualitySettings | None = None

    @model_validator(mode="after")
    def _check_order(self) -> "PipelineSpec":
        check_stage_order(self.stages)
        return self

    def to_dict(self) -> dict:
        d = self.model_dump(mode="json")
        if d.get("quality") is None:  # a spec without it keeps the form (and hash) it always had
            d.pop("quality", None)
        for st in d.get("stages", []):  # so do specs that leave the rest scope's fields at their defaults
            if isinstance(st.get("pi_c"), dict) and st["pi_c"].get("scope") == "record":
                del st["pi_c"]["scope"]
            if st.get("clean_flags") == ["pi_hit", "pi_c_hit"]:
                del st["clean_flags"]
        return d

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()

    def key_refs(self) -> list[str]:
        """Every key reference in the spec (see :func:`key_references`)."""
        return [ref for _, ref in key_references(self)]


def check_stage_order(stages: list[StageSettings]) -> None:
    """Refuse orders that cannot work (ARCHITECTURE.md, "Order"): each stage's
    ``order_rules`` (declared on its registered settings class), in order, against the
    kinds of the stages before it; the first broken rule is the error."""
    kinds = registered_kinds()
    seen: list[str] = []
    for i, s in enumerate(stages):
        settings_cls = kinds[s.kind][0] if s.kind in kinds else type(s)
        for rule in getattr(settings_cls, "order_rules", ()):
            if rule.applies(s) and rule.broken(s, seen):
                raise ValueError(f"stages.{i}: {rule.message}")
        seen.append(s.kind)


def key_references(spec: BaseModel) -> list[tuple[str, str]]:
    """(field path, reference) for every :data:`~privatize.settings.KeyRef` in ``spec``
    (a :class:`PipelineSpec`, or any part of one), in the model's order: every field
    typed ``KeyRef`` at any depth (a stage's ``key``, a key in a stage's nested
    settings, ``output.pseudonym_key``). Paths are field names and list indexes
    (``stages.3.key``)."""
    return [(path, ref) for path, ref, _ in key_requirements(spec)]


def key_requirements(spec: BaseModel) -> list[tuple[str, str, tuple[str, ...] | None]]:
    """(field path, reference, key kinds the field takes) for every key reference in
    ``spec``, as :func:`key_references` finds them; the kinds are what the field's
    settings class declares (:class:`~privatize.settings.KeyKinds`), None where it
    declares none (any kind). A :data:`~privatize.settings.SecretRef` credential is one
    when it names the key store (``keystore:<id>``, kind ``api-key``)."""
    found: list[tuple[str, str, tuple[str, ...] | None]] = []

    def walk(value, path: list[str], is_ref: bool, kinds: tuple[str, ...] | None) -> None:
        if isinstance(value, BaseModel):
            for name, field in type(value).model_fields.items():
                v = getattr(value, name, None)
                if field_holds_secret_ref(field):  # a credential: a key reference when in the key store
                    if isinstance(v, str) and v.startswith("keystore:"):
                        found.append((".".join([*path, name]), v, SECRET_KEY_KINDS))
                    continue
                walk(v, [*path, name], field_holds_key_ref(field), field_key_kinds(field))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, [*path, str(i)], is_ref, kinds)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, [*path, str(k)], is_ref, kinds)
        elif is_ref and isinstance(value, str):
            found.append((".".join(path), value, kinds))

    walk(spec, [], False, None)
    return found


def check_file_key_kinds(spec: BaseModel, spec_dir: str | None, *, missing_ok: bool = False) -> None:
    """Every ``file:`` key of ``spec`` read and checked against the kinds its field takes,
    before any work: :class:`~privatize.errors.KeyMaterialError` naming the field path
    and the file (``stages.0.key: file:k.key: key 3f0c… is aes-siv; expected vigenere``).
    ``missing_ok``: a file not on this machine is left to the workers (a cluster's
    nodes may hold key files the driver does not)."""
    from privatize.errors import KeyMaterialError
    from privatize.keys import KeyResolver

    resolver = KeyResolver(base_dir=spec_dir)
    for path, ref, kinds in key_requirements(spec):
        if not ref.startswith("file:"):
            continue
        if missing_ok and not resolver.file_path(ref).exists():
            continue
        try:
            resolver.resolve(ref, expect=kinds)
        except KeyMaterialError as exc:
            raise KeyMaterialError(f"{path}: {exc}") from None


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(lines)


_PATH_IN_MSG = re.compile(r"^((?:stages|input|output|version)(?:\.[\w-]+)*): (.*)$", re.S)


def field_errors(exc: ValidationError) -> list[tuple[list[str], str]]:
    """(field path, message) per error of a spec that failed validation: pydantic's own
    locations, and for the stage-order check (a model-level error) the path its message
    starts with (``stages.2``)."""
    out = []
    for e in exc.errors():
        loc = [str(p) for p in e["loc"]]
        msg = e["msg"].removeprefix("Value error, ")
        if not loc:
            m = _PATH_IN_MSG.match(msg)
            if m:
                loc, msg = m.group(1).split("."), m.group(2)
        out.append((loc, msg))
    return out


def parse_spec(data: dict) -> PipelineSpec:
    """The validated spec, or a :class:`SpecError` naming the field paths; its
    ``field_errors`` attribute holds them one by one (:func:`field_errors`)."""
    if not isinstance(data, dict):
        raise SpecError("spec: the top level must be a mapping with 'stages'")
    try:
        return PipelineSpec.model_validate(data)
    except ValidationError as exc:
        err = SpecError(_format_errors(exc))
        err.field_errors = field_errors(exc)
        raise err from None


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
