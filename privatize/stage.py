"""Stage shapes: the one contract every privatization step implements.

A :class:`Stage` transforms Arrow batches, one at a time::

    class Upper(Stage):
        kind = "upper"
        def process_batch(self, batch: pa.Table) -> pa.Table:
            return set_column(batch, "text", pc.utf8_upper(batch["text"]))

A :class:`GlobalStage` needs to see the whole corpus (deduplication). It is called in
three steps that any runner can distribute:

1. ``keys(batch)`` returns one key per row (``None`` = the row takes no part);
2. ``decide(partition)`` sees every keyed row whose key hashes to one of
   :data:`NUM_PARTITIONS` partitions, in the global order, and returns decisions, each
   with the position of its row in the partition (:data:`DECISION_ROW`);
3. ``apply(batch, decisions)`` applies them: ``decisions`` is aligned to ``batch`` (row
   ``i`` is the decision for row ``i``, nulls where ``decide`` made none).

``keys`` may also return a table: its column ``key`` holds the keys, every other column
travels with each keyed row to ``decide`` (a value ``decide`` needs that is not the key,
such as an individual).

A stage with ``broadcast = True`` decides *sets*, not rows (the identifiers stage: the
terms enough individuals use): ``keys`` returns keyed rows of its own, any number per
batch and aligned to no row (so it may pre-aggregate them per batch: a pair seen twice
in a batch travels once), with no order columns; ``decide`` sees each hash partition's
rows in no particular order (its answer must not depend on it) and returns a table of
decisions and a dict of statistics; ``apply`` gets every partition's decisions, in
partition order, as one table (the same for every batch), and the statistics are added
to the stage's in the manifest once. No decision is routed to a row, so nothing of a
row's identity travels through the shuffle.

The partition count is fixed, so results never depend on batch size or worker count.

Reserved columns (stages may set them; the runner interprets them):

* ``_quarantine`` (string): a reason; the runner moves the row to the quarantine.
* ``_drop`` (string): a reason; the runner counts the row as dropped and writes it nowhere.
* ``_stat.<name>`` (numeric): per-row statistic; the runner sums it into the manifest
  under the stage's name. Stats travel with rows, so a retried task never counts twice.
* ``_src``, ``_line``, ``_seg`` (int): the global order (input file index, line, segment).

Stages never see rows that an earlier stage quarantined or dropped, and the batches they
get carry no ``_quarantine`` / ``_drop`` columns: append your own (``set_column``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa

from privatize.registry import Registry

QUARANTINE = "_quarantine"
DROP = "_drop"
STAT_PREFIX = "_stat."
ORDER_COLUMNS = ("_src", "_line", "_seg")
NUM_PARTITIONS = 64
DECISION_ROW = "row"
"""The column of ``GlobalStage.decide``'s result holding each decision's row: its position
in the partition ``decide`` was given."""


class Stage:
    """A transformation of Arrow batches. Subclasses set ``kind`` and implement
    :meth:`process_batch`; ``setup`` loads heavy state (models, key material) once per
    process, and is where key references are resolved."""

    kind: ClassVar[str] = ""
    heavy_setup: ClassVar[bool] = False
    """Whether ``setup`` is costly (loading a model). A distributed runner keeps set-up
    copies of such a stage in long-lived processes (an actor pool on Ray); a cheap setup
    (resolving a key reference) runs in whichever worker takes a batch, once per process
    and run, so the stage's work joins the tasks before and after it."""

    def __init__(self, settings: Any = None, *, context: "StageContext | None" = None):
        self.settings = settings
        self.context = context or StageContext()

    def setup(self) -> None:  # noqa: B027 - optional hook
        """Load heavy state. Called once per process before the first batch."""

    @property
    def needs_setup(self) -> bool:
        return type(self).setup is not Stage.setup

    def process_batch(self, batch: pa.Table) -> pa.Table:
        raise NotImplementedError

    def key_ids(self) -> dict[str, str]:
        """Key ids (never key bytes) this stage used, for the manifest. Valid after setup."""
        return {}

    def budget(self) -> tuple[str, int | None, int | None] | None:
        """A spending limit every process of the run draws on: (ledger name, max requests,
        max tokens), which the Ray runner's driver starts as one actor before any setup
        (:func:`privatize.synthesis.client.start_run_ledger`); None: none."""
        return None


class GlobalStage(Stage):
    """A stage that decides over the whole corpus; see the module docstring."""

    broadcast: ClassVar[bool] = False
    """``decide`` returns (decisions, statistics) per partition and ``apply`` gets all of
    them as one table; ``keys`` returns keyed rows aligned to no row (module docstring)."""

    def keys(self, batch: pa.Table) -> pa.Array:
        raise NotImplementedError

    def decide(self, partition: pa.Table) -> pa.Table:
        """``partition`` has columns ``doc_id``, ``key`` and the order columns, sorted by
        the global order. Return a table with :data:`DECISION_ROW` (the position in
        ``partition`` of the row each decision is for; each row at most once) and the
        decision columns.

        Decisions should be sparse: return rows only where the outcome differs from the
        default (a duplicate, not every first occurrence); ``apply`` sees nulls for the
        rest. Rows are told apart by their order columns: a stage that expands a row into
        several numbers the pieces in ``_seg``, as ``split`` does."""
        raise NotImplementedError

    def apply(self, batch: pa.Table, decisions: pa.Table) -> pa.Table:
        """``decisions``: ``decide``'s decision columns aligned to ``batch``'s rows (row
        ``i`` for row ``i``; nulls where there is no decision)."""
        raise NotImplementedError

    def process_batch(self, batch: pa.Table) -> pa.Table:  # pragma: no cover - guard
        raise TypeError(f"{self.kind} is a GlobalStage: call keys/decide/apply")


def add_stats(into: dict, more: dict) -> None:
    """Add the counts of ``more`` to ``into``, name by name (a stage's statistics)."""
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def set_column(batch: pa.Table, name: str, values) -> pa.Table:
    """Replace column ``name`` or append it: the one helper stages need most."""
    i = batch.schema.get_field_index(name)
    if i >= 0:
        return batch.set_column(i, name, values)
    return batch.append_column(name, values)


class StageContext:
    """What a stage may know about its run: where relative key paths resolve from, and
    the :class:`~privatize.keys.KeyResolver` its ``setup()`` resolves key references
    with (``self.context.key_resolver.resolve(ref)``; by default one for ``base_dir``,
    made on first use, so it sees the ``keystore:`` backend of the process it runs in)."""

    def __init__(self, base_dir: str | None = None, key_resolver: Any = None, run: str | None = None):
        self.base_dir = base_dir
        self._key_resolver = key_resolver
        self.run = run
        """The run's random id (every process of one run sees the same), or None outside a run."""

    @property
    def key_resolver(self):
        if self._key_resolver is None:
            from privatize.keys import KeyResolver

            self._key_resolver = KeyResolver(base_dir=self.base_dir)
        return self._key_resolver


STAGES: Registry[tuple[type, type[Stage]]] = Registry("stage kind", packages=("privatize.stages",),
                                                       group="privatize.stages")
"""Every stage kind: (its settings class, its stage class). A built-in is a module of
:mod:`privatize.stages`; a plugin registers from a module its entry point names."""


def register_stage(kind: str, settings_cls: type, *, force: bool = False):
    """Class decorator: register a stage class and its pydantic settings under ``kind``."""

    def deco(cls: type[Stage]) -> type[Stage]:
        STAGES.add(kind, (settings_cls, cls), cls, force=force)
        cls.kind = kind
        return cls

    return deco
