"""Base of every stage's settings and the key-reference type.

Each stage module defines ``class FooSettings(StageSettings)`` with
``kind: Literal["foo"] = "foo"`` and registers its stage with
``@register_stage("foo", FooSettings)``; the pipeline spec builds its discriminated
union from the registry.

A stage that constrains where it may stand declares it on its settings class, and the
spec checks every stage's rules through the registry (``privatize.spec.check_stage_order``)::

    class FooSettings(StageSettings):
        kind: Literal["foo"] = "foo"
        order_rules = (Once("foo appears twice"),
                       AfterOneOf("split", "foo needs a split stage before it"))

A key reference field names the key kinds it takes in its type (``KeyRef`` alone takes
any kind); the service checks a tenant's key against it when a job is created,
``privatize.run`` checks ``file:`` keys before any work, and the stage resolves the key
with the same kinds (``declared_key_kinds``)::

    class FooSettings(StageSettings):
        kind: Literal["foo"] = "foo"
        key: Annotated[KeyRef, KeyKinds("aes-siv")]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.fields import FieldInfo

KEY_SCHEMES = ("file:", "keystore:")


def _check_key_ref(value: str) -> str:
    if not value.startswith(KEY_SCHEMES):
        raise ValueError("a key reference is a URI: 'file:<path>' or 'keystore:<id>'")
    if value.split(":", 1)[1] == "":
        raise ValueError("key reference has an empty path or id")
    return value


KeyRef = Annotated[str, AfterValidator(_check_key_ref)]
"""A reference to key material (``file:<path>`` or ``keystore:<id>``), never the key."""

SECRET_SCHEMES = ("env:", "file:", "keystore:")
SECRET_KEY_KINDS = ("api-key",)
"""The key kind a ``keystore:`` credential reference takes."""


def _check_secret_ref(value: str) -> str:
    if not value.startswith(SECRET_SCHEMES) or value.split(":", 1)[1] == "":
        raise ValueError("a credential reference is 'env:<NAME>', 'file:<path>' or 'keystore:<id>', never the "
                         "credential")
    return value


SecretRef = Annotated[str, AfterValidator(_check_secret_ref)]
"""A reference to a credential that is not key material (an LLM API key): ``env:<NAME>``,
``file:<path>`` (the file holds the credential alone), or ``keystore:<id>`` (an
``api-key`` key of the key store: what the service takes); never the credential;
resolved where it is used. A ``keystore:`` one is a key reference of kind ``api-key``
to ``privatize.spec.key_requirements``, so the service checks it as any key."""


def field_holds_secret_ref(field: FieldInfo) -> bool:
    """Whether a pydantic field is typed with :data:`SecretRef` (or ``SecretRef | None``)."""
    return _field_holds(field, _check_secret_ref)


class KeyKinds:
    """Metadata of a :data:`KeyRef` field: the key kinds (``privatize.keys.KINDS``) it
    takes, ``Annotated[KeyRef, KeyKinds("vigenere")]`` (also inside ``| None`` or ``list``)."""

    __slots__ = ("kinds",)

    def __init__(self, *kinds: str):
        from privatize.keys import KINDS

        unknown = [k for k in kinds if k not in KINDS]
        if not kinds or unknown:
            raise ValueError(f"KeyKinds: name one or more of {', '.join(KINDS)} (got {kinds!r})")
        self.kinds = tuple(kinds)

    def __repr__(self) -> str:
        return f"KeyKinds{self.kinds!r}"


def _kinds_in(meta: Iterable[object]) -> tuple[str, ...] | None:
    for m in meta:
        if isinstance(m, KeyKinds):
            return m.kinds
    return None


def key_kinds_of(tp: object) -> tuple[str, ...] | None:
    """The kinds a type annotated with :class:`KeyKinds` takes (through ``| None`` and
    ``list``); None when it declares none."""
    if get_origin(tp) is Annotated:
        base, *meta = get_args(tp)
        found = _kinds_in(meta)
        return found if found is not None else key_kinds_of(base)
    for a in get_args(tp):
        found = key_kinds_of(a)
        if found is not None:
            return found
    return None


def field_key_kinds(field: FieldInfo) -> tuple[str, ...] | None:
    """The key kinds a pydantic field declares (:class:`KeyKinds`), or None."""
    found = _kinds_in(field.metadata)
    return found if found is not None else key_kinds_of(field.annotation)


def declared_key_kinds(model: type[BaseModel] | BaseModel, field: str) -> tuple[str, ...] | None:
    """The key kinds the field ``field`` of a settings model takes, for
    ``KeyResolver.resolve(ref, expect=...)``."""
    cls = model if isinstance(model, type) else type(model)
    return field_key_kinds(cls.model_fields[field])


def _holds(tp: object, check) -> bool:
    """Whether the type ``tp`` is or holds a string type validated by ``check`` (through
    ``| None`` and ``list``)."""
    if get_origin(tp) is Annotated:
        base, *meta = get_args(tp)
        return any(isinstance(m, AfterValidator) and m.func is check for m in meta) or _holds(base, check)
    return any(_holds(a, check) for a in get_args(tp))


def _field_holds(field: FieldInfo, check) -> bool:
    # pydantic moves the Annotated metadata of a plain field into field.metadata
    return any(isinstance(m, AfterValidator) and m.func is check for m in field.metadata) or \
        _holds(field.annotation, check)


def holds_key_ref(tp: object) -> bool:
    """Whether the type ``tp`` is or holds a :data:`KeyRef` (``KeyRef | None``, ``list[KeyRef]``)."""
    return _holds(tp, _check_key_ref)


def field_holds_key_ref(field: FieldInfo) -> bool:
    """Whether a pydantic field is typed with :data:`KeyRef`."""
    return _field_holds(field, _check_key_ref)


class OrderRule:
    """One constraint on a stage's position, checked at that stage against the kinds of
    the stages before it. ``when`` limits the rule to settings with these values
    (``when={"unit": "segment"}``). The spec reports ``stages.<i>: <message>``."""

    def __init__(self, message: str, *, when: Mapping[str, Any] | None = None):
        self.message = message
        self.when = dict(when or {})

    def applies(self, settings: BaseModel) -> bool:
        return all(getattr(settings, name, None) == value for name, value in self.when.items())

    def broken(self, settings: BaseModel, earlier: Sequence[str]) -> bool:
        """Whether a stage with ``settings`` after stages of kinds ``earlier`` breaks the rule."""
        raise NotImplementedError

    def __repr__(self) -> str:
        when = f", when={self.when!r}" if self.when else ""
        return f"{type(self).__name__}({self._what()}{self.message!r}{when})"

    def _what(self) -> str:
        return ""


class _KindsRule(OrderRule):
    def __init__(self, kinds: str | Iterable[str], message: str, *, when: Mapping[str, Any] | None = None):
        super().__init__(message, when=when)
        self.kinds = frozenset([kinds] if isinstance(kinds, str) else kinds)

    def _what(self) -> str:
        return f"{sorted(self.kinds)!r}, "


class Before(_KindsRule):
    """The stage must come before every stage of these kinds: broken when one is earlier."""

    def broken(self, settings: BaseModel, earlier: Sequence[str]) -> bool:
        return not self.kinds.isdisjoint(earlier)


class AfterOneOf(_KindsRule):
    """The stage needs a stage of one of these kinds before it."""

    def broken(self, settings: BaseModel, earlier: Sequence[str]) -> bool:
        return self.kinds.isdisjoint(earlier)


class Once(OrderRule):
    """At most one stage of this kind in a pipeline."""

    def broken(self, settings: BaseModel, earlier: Sequence[str]) -> bool:
        return settings.kind in earlier


class StageSettings(BaseModel):
    """Settings common to every stage. ``extra="forbid"`` so typos are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    order_rules: ClassVar[tuple[OrderRule, ...]] = ()
    """Where a stage of this kind may stand, checked in order at its position in the
    pipeline (the first broken rule is the error). Subclasses assign the tuple."""
