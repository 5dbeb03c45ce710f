"""Pipeline specs submitted by tenants: validated by ``privatize.spec.parse_spec`` (422
with field paths), then checked for what a tenant may reference: no ``file:`` keys,
and only ``keystore:`` keys of its own that are enabled."""

from __future__ import annotations

import re

from pydantic import ValidationError
from sqlalchemy.orm import Session

from privatize.errors import SpecError
from privatize.spec import PipelineSpec, parse_spec
from services.errors import SpecInvalid
from services.models import Key

_PATH_IN_MSG = re.compile(r"^((?:stages|input|output|version)(?:\.[\w-]+)*): (.*)$", re.S)


def _structured_errors(data: dict, exc: SpecError) -> list[dict]:
    """Field paths of a failed spec: pydantic's own locations, and for the stage-order
    check (a model-level error) the path its message starts with."""
    try:
        PipelineSpec.model_validate(data)
    except ValidationError as ve:
        out = []
        for e in ve.errors():
            loc = [str(p) for p in e["loc"]]
            msg = e["msg"].removeprefix("Value error, ")
            if not loc:
                m = _PATH_IN_MSG.match(msg)
                if m:
                    loc, msg = m.group(1).split("."), m.group(2)
            out.append({"path": ".".join(loc), "loc": ["body", "spec", *loc], "message": msg})
        return out
    return [{"path": "", "loc": ["body", "spec"], "message": str(exc)}]


def validate_spec(data) -> PipelineSpec:
    if not isinstance(data, dict):
        raise SpecInvalid("spec: must be a JSON object with 'stages'",
                          errors=[{"path": "", "loc": ["body", "spec"], "message": "must be a JSON object"}])
    try:
        return parse_spec(data)
    except SpecError as exc:
        raise SpecInvalid(str(exc), errors=_structured_errors(data, exc)) from None


def key_references(spec: PipelineSpec) -> list[tuple[str, str]]:
    """(field path, reference) for every key reference in the spec: the ones
    ``PipelineSpec.key_refs`` lists and any nested ``key`` / ``*_key`` field (operator
    settings of a stage)."""
    found: dict[str, str] = {}

    def walk(node, path: list[str]):
        if isinstance(node, dict):
            for k, v in node.items():
                p = [*path, str(k)]
                if isinstance(v, str) and (k == "key" or str(k).endswith("_key")):
                    found[".".join(p)] = v
                else:
                    walk(v, p)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, [*path, str(i)])

    walk(spec.to_dict(), [])
    listed = set(found.values())
    for ref in spec.key_refs():
        if ref not in listed:
            found[f"(key_refs).{len(found)}"] = ref
    return sorted(found.items())


def check_key_references(s: Session, tenant_id: str, spec: PipelineSpec) -> list[str]:
    """Keystore ids the spec uses; SpecInvalid (with the field path) for a ``file:``
    reference or a key that is not this tenant's, disabled or destroyed."""
    errors, ids = [], []
    for path, ref in key_references(spec):
        scheme, _, rest = ref.partition(":")
        if scheme == "file":
            errors.append((path, "file: key references are not accepted by the service; create a key with "
                                 "POST /v1/keys and name it keystore:<id>"))
            continue
        if scheme != "keystore":
            errors.append((path, "a key reference is keystore:<id>"))
            continue
        row = s.get(Key, rest)
        if row is None or row.tenant_id != tenant_id:
            errors.append((path, f"no key {rest!r}"))
        elif row.status != "enabled":
            errors.append((path, f"key {rest} is {row.status}"))
        elif rest not in ids:
            ids.append(rest)
    if errors:
        raise SpecInvalid("; ".join(f"{p}: {m}" for p, m in errors),
                          errors=[{"path": p, "loc": ["body", "spec", *p.split(".")], "message": m}
                                  for p, m in errors])
    return ids


def with_input_format(spec: PipelineSpec, corpus_format: str) -> PipelineSpec:
    """The spec the job runs: ``input.format`` fixed to the corpus's format."""
    fmt = spec.input.format
    if fmt not in ("auto", corpus_format):
        raise SpecInvalid(f"input.format: the corpus is {corpus_format}, the spec says {fmt}",
                          errors=[{"path": "input.format", "loc": ["body", "spec", "input", "format"],
                                   "message": f"the corpus is {corpus_format}"}])
    d = spec.to_dict()
    d["input"] = {**d.get("input", {}), "format": corpus_format}
    return parse_spec(d)
