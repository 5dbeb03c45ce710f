"""A run's progress as figures, one shape for both runners: what the CLI's bar and lines say
and what a service job's ``progress`` shows while it runs (``RunOptions.on_progress``).

Figures (a JSON object)::

    {"elapsed_s": 12.3, "records_read": 512, "records_total": 1000, "percent": 51.2,
     "records_per_s": 41.6, "eta_s": 11.7,
     "stages": [{"index": 0, "kind": "split", "records_in": 512, "records_out": 2048}, ...]}

``records_read`` counts input records whose work is done through every stage so far (the
in-process runner reads everything first and runs the stages one after another: there the
fraction is the stages' share of the work); ``records_total`` is the input's size when the
runner knows it (the in-process runner does; the Ray runner streams, and the service fills
it in from the corpus's record count). ``percent``, ``records_per_s`` and ``eta_s`` are
``None`` until they can be told.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from privatize.errors import PrivatizeError


class RunProgress:
    """Counts a run's progress and hands its figures to ``report`` (a callable taking the
    figures), at most once every ``every`` seconds and always at :meth:`close`. Thread-safe:
    the runners update it from their loop, a ticker may call :meth:`maybe_report`."""

    def __init__(self, kinds: list[str], report: Callable[[dict], None] | None, total: int | None = None,
                 every: float = 1.0):
        self.kinds = list(kinds)
        self.report, self.total, self.every = report, total, every
        self.t0 = time.monotonic()
        self.records_read = 0
        self.stage_in = [0] * len(self.kinds)
        self.stage_out = [0] * len(self.kinds)
        self.share: float | None = None  # the in-process runner's share of the work done, if it says
        self._last = 0.0
        self._lock = threading.Lock()

    # -- updates ---------------------------------------------------------------------------

    def add_block(self, records_read: int, stage_in: dict[int, int], stage_out: dict[int, int]) -> None:
        """One block through every stage (the Ray runner's final pass)."""
        with self._lock:
            self.records_read += records_read
            for i, n in stage_in.items():
                self.stage_in[i] += n
            for i, n in stage_out.items():
                self.stage_out[i] += n
        self.maybe_report()

    def set_stage(self, index: int, records_in: int, records_out: int, share: float) -> None:
        """The in-process runner: stage ``index`` has taken ``records_in`` and given
        ``records_out`` so far, and ``share`` (0..1) of the whole run's work is done."""
        with self._lock:
            self.stage_in[index], self.stage_out[index] = records_in, records_out
            self.share = share
            if self.total is not None:
                self.records_read = round(share * self.total)
        self.maybe_report()

    # -- figures ---------------------------------------------------------------------------

    def figures(self) -> dict:
        with self._lock:
            elapsed = time.monotonic() - self.t0
            share = self.share
            if share is None and self.total:
                share = min(1.0, self.records_read / self.total)
            rate = self.records_read / elapsed if self.records_read and elapsed > 0 else None
            eta = elapsed * (1 - share) / share if share else None
            return {"elapsed_s": round(elapsed, 1), "records_read": self.records_read,
                    "records_total": self.total,
                    "percent": None if share is None else round(100 * share, 1),
                    "records_per_s": None if rate is None else round(rate, 1),
                    "eta_s": None if eta is None else round(eta, 1),
                    "stages": [{"index": i, "kind": k, "records_in": a, "records_out": b}
                               for i, (k, a, b) in enumerate(zip(self.kinds, self.stage_in, self.stage_out))]}

    def maybe_report(self, force: bool = False) -> None:
        if self.report is None:
            return
        now = time.monotonic()
        with self._lock:
            if not force and now - self._last < self.every:
                return
            self._last = now
        self.report(self.figures())

    def close(self) -> None:
        self.maybe_report(force=True)


def progress_writer(location: str) -> Callable[[dict], None]:
    """A ``report`` callable that keeps the latest figures as JSON at ``location`` (a local
    path, replaced atomically, or a URI ``pyarrow.fs`` opens), for a reader elsewhere (the
    service). Writing is best effort: progress is never a reason for a run to fail."""
    import logging

    from privatize.io.locations import is_remote, local_path, open_location

    log = logging.getLogger(__name__)

    def write(figures: dict) -> None:
        data = (json.dumps(figures) + "\n").encode()
        try:
            if is_remote(location):
                fs, path = open_location(location)
                with fs.open_output_stream(path) as fh:
                    fh.write(data)
                return
            target = Path(local_path(location))
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except (OSError, PrivatizeError) as exc:
            log.warning("progress: could not write %s: %s", location, exc)

    return write
