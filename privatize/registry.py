"""One registry idiom for every kind of plugin: stages, redaction styles, training kinds,
attacks and the service's job kinds are each a :class:`Registry`.

A registry holds one entry per name and applies the same rules to all of them:

* **names**: lowercase letters, digits, ``_`` or ``-``, starting with a letter, at most 32
  characters (a name is a path segment, a spec value, a CLI word); ``reserved`` names are
  refused (a style may not be called ``auto``);
* **duplicates**: a second class under a taken name is refused; the same class again (a
  module imported twice, a test's reload) replaces the entry; ``force`` replaces any;
* **unknown names**: one error, :class:`UnknownName` (a ``LookupError`` and a
  ``ValueError``, so a pydantic validator reports it at the field), naming what is
  registered;
* **discovery**: on the first lookup, every module of the registry's ``packages`` is
  imported (a built-in is one module in its package: no list to keep), then every entry
  point of its ``group`` (a plugin installed with ``[project.entry-points."<group>"]``,
  as commands are); a module registers its entries when it is imported.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


class UnknownName(LookupError, ValueError):
    """A name no entry of the registry has."""


class Registry(Generic[T]):
    """Entries of one kind by name (see the module's docstring). ``what`` names the kind in
    messages (``"stage kind"``); ``packages`` are imported module by module and ``group``'s
    entry points loaded on the first lookup; ``modules`` are single modules to import
    (where the built-ins share a module)."""

    def __init__(self, what: str, *, packages: tuple[str, ...] = (), modules: tuple[str, ...] = (),
                 group: str | None = None, reserved: tuple[str, ...] = (), skip: tuple[str, ...] = ()):
        self.what, self.packages, self.modules, self.group = what, packages, modules, group
        self.reserved, self.skip = frozenset(reserved), frozenset(skip)
        self._entries: dict[str, T] = {}
        self._owners: dict[str, str] = {}
        self._loaded = False
        self._lock = threading.RLock()

    # ---- registration ------------------------------------------------------------------

    def add(self, name: str, entry: T, owner: type | Callable | None = None, *, force: bool = False) -> None:
        """Register ``entry`` under ``name``; ``owner`` (the class or function that made it)
        decides what counts as the same registration again."""
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(f"{self.what} name {name!r}: lowercase letters, digits, '_' or '-', starting with a "
                             "letter (at most 32)")
        if name in self.reserved:
            raise ValueError(f"{self.what} name {name!r} is reserved")
        who = _qualname(owner if owner is not None else entry)
        with self._lock:
            if name in self._entries and not force and not _same(self._owners[name], who):
                raise ValueError(f"{self.what} {name!r} is registered already (by "
                                 f"{self._owners[name].replace(':', '.')})")
            self._entries[name] = entry
            self._owners[name] = who

    def decorator(self, make: Callable[[type], tuple[str, T]], *, force: bool = False) -> Callable[[type], type]:
        """A class decorator registering ``make(cls)`` = (name, entry)."""
        def deco(cls: type) -> type:
            name, entry = make(cls)
            self.add(name, entry, cls, force=force)
            return cls
        return deco

    def snapshot(self) -> Callable[[], None]:
        """A function that puts the entries back as they are now (a test's registrations
        undone after it)."""
        self.load()
        entries, owners = dict(self._entries), dict(self._owners)

        def restore() -> None:
            with self._lock:
                self._entries.clear()
                self._entries.update(entries)
                self._owners.clear()
                self._owners.update(owners)
        return restore

    # ---- lookup -------------------------------------------------------------------------

    def load(self) -> None:
        """Import the built-in modules and the installed plugins (once)."""
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            for mod in self.modules:
                importlib.import_module(mod)
            for pkg in self.packages:
                package = importlib.import_module(pkg)
                for info in pkgutil.iter_modules(package.__path__):
                    if not info.name.startswith("_") and info.name not in self.skip:
                        importlib.import_module(f"{pkg}.{info.name}")
            if self.group:
                from importlib.metadata import entry_points

                for ep in entry_points(group=self.group):
                    ep.load()

    def get(self, name: str) -> T:
        self.load()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownName(f"unknown {self.what} {name!r} (registered: {', '.join(self.names()) or 'none'})") \
                from None

    def names(self) -> list[str]:
        self.load()
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        self.load()
        return sorted(self._entries.items())

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self.load()
        return len(self._entries)


def _same(a: str, b: str) -> bool:
    """The same registration: the same module and name (a module run as ``__main__``, as
    ``python -m`` does, is any module)."""
    (ma, _, qa), (mb, _, qb) = a.partition(":"), b.partition(":")
    return qa == qb and (ma == mb or "__main__" in (ma, mb))


def _qualname(obj) -> str:
    t = obj if isinstance(obj, type) or callable(obj) and hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(t, '__module__', '?')}:{getattr(t, '__qualname__', repr(t))}"
