"""How a spec is run (never what it computes: that is the spec): :class:`RunOptions`, shared by
the façade (:mod:`privatize.api`) and both runners, so the runners need not import the façade."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

from privatize.errors import SpecError

DEFAULT_RANGE_BYTES = 64 << 20


@dataclass(frozen=True)
class RunOptions:
    """How to run (never what to compute: that is the spec). Fields after ``on_progress``
    concern the Ray runner only; the local runner ignores them."""

    batch_size: int = 1024
    strict: bool = False
    """Record-level problems are errors (exit 2) instead of quarantined records."""
    overwrite: bool = False
    progress_every: float = 10.0
    """Seconds between two progress lines (``progress="lines"``)."""
    progress: bool | str = False
    """``False``: nothing; ``True`` or ``"bar"``: a progress bar per stage on stderr (records,
    records/s, ETA; the Ray runner shows Ray Data's own); ``"lines"``: for a stderr that is
    no terminal, a line per stage every ``progress_every`` seconds and when it ends (the
    in-process runner; the Ray runner shows nothing of its own then)."""
    on_progress: Callable[[dict], None] | None = None
    """Called with the run's progress figures (:mod:`privatize.progress`: records read, per
    stage records in and out, percent and ETA when known) at most once a second and at the
    end of the stages, by either runner: how a service job's ``progress`` is fed."""
    read_range_bytes: int = DEFAULT_RANGE_BYTES
    """JSONL and line-per-record text files larger than this are read in byte ranges (the
    Ray runner also cuts smaller files so that every CPU gets a piece)."""
    num_cpus: float | None = None
    """CPUs of an embedded local Ray cluster (default: all)."""
    object_store_memory: int | None = None
    """Object store of an embedded local Ray cluster, in bytes (Ray's minimum is 75 MiB)."""
    reads_on_driver_node: bool = True
    """Input paths are the driver's: read them on its node (turn off for shared storage)."""
    stall_timeout_s: float = 600.0
    """A Ray run in which nothing finishes for this long fails with an error naming what it
    waited for (a plan that cannot be scheduled would otherwise wait forever)."""

    def __post_init__(self):
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise SpecError(f"options.batch_size: must be a positive integer, not {self.batch_size!r}")
        if not isinstance(self.read_range_bytes, int) or self.read_range_bytes < 1:
            raise SpecError(f"options.read_range_bytes: must be a positive integer, not {self.read_range_bytes!r}")
        if self.progress not in (False, True, "bar", "lines"):
            raise SpecError(f"options.progress: must be true, false, 'bar' or 'lines', not {self.progress!r}")
        if not self.progress_every > 0:
            raise SpecError(f"options.progress_every: must be positive, not {self.progress_every!r}")
        if self.num_cpus is not None and not self.num_cpus > 0:
            raise SpecError(f"options.num_cpus: must be positive, not {self.num_cpus!r}")
        if self.stall_timeout_s is not None and not self.stall_timeout_s > 0:
            raise SpecError(f"options.stall_timeout_s: must be positive, not {self.stall_timeout_s!r}")

    @classmethod
    def from_kwargs(cls, **kw) -> "RunOptions":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kw) - known)
        if unknown:
            raise TypeError(f"unknown run option(s): {', '.join(unknown)}")
        return cls(**kw)
