"""Is the Ray cluster reachable right now? A real, cheap probe, cached for a moment.

``/readyz``, ``/healthz``, ``privatize_ray_connected`` and the reconciler all ask
:meth:`RayHealth.check` instead of trusting what the reconciler last managed to do (issue
53: a killed embedded head left ``"ray": "connected"`` and ``/readyz`` 200 for minutes).

The probe (at most one every ``cache_s`` seconds; concurrent callers share it):

* **embedded head**: the recorded ``ray start --block`` process is still ours and alive
  (a read of ``/proc``; when it is gone the head is *lost*: every Ray process of it died
  with it, and so did the jobs it ran), then the dashboard's ``/api/gcs_healthz`` (the GCS
  answers) within ``timeout_s``;
* **external cluster** (``PRIVATIZE_RAY_ADDRESS``): that cluster's ``/api/gcs_healthz``
  within ``timeout_s`` (``/api/version`` on a dashboard without it). An unreachable
  external cluster is never *lost*: it may still be running the jobs.

Each time the answer turns from reachable to unreachable, ``outages`` grows by one (the
``privatize_ray_unavailable_total`` counter).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from services import raycluster
from services.settings import Settings


@dataclass(frozen=True)
class Probe:
    up: bool
    detail: str
    """``connected``, or why not (one line)."""
    lost: bool = False
    """The embedded head's process is gone: whatever ran on it is gone too."""


def probe_cluster(settings: Settings, timeout_s: float = 1.0) -> Probe:
    """One real probe of the cluster (see the module's docstring)."""
    if settings.ray_address:
        url = settings.ray_address.rstrip("/")
        try:
            headers = raycluster.auth_headers(settings)
        except Exception as exc:  # noqa: BLE001 - an unreadable token is a reason, not a crash
            return Probe(False, f"unavailable: {getattr(exc, 'message', type(exc).__name__)}")
        code = _status(f"{url}/api/gcs_healthz", headers, timeout_s)
        if code == 404:  # a dashboard older than /api/gcs_healthz
            code = _status(f"{url}/api/version", headers, timeout_s)
        if code == 200:
            return Probe(True, "connected")
        return Probe(False, "unavailable: the Ray cluster (PRIVATIZE_RAY_ADDRESS) does not answer")
    st = raycluster.read_state(settings.data_path)
    if st is None:
        return Probe(False, "unavailable: no embedded Ray head is running")
    if not raycluster._is_our_head(st):
        return Probe(False, f"unavailable: the embedded Ray head (pid {st.pid}) is gone", lost=True)
    if _status(f"{st.dashboard_url}/api/gcs_healthz", {}, timeout_s) == 200:
        return Probe(True, "connected")
    return Probe(False, f"unavailable: the embedded Ray head (pid {st.pid}) does not answer")


def _status(url: str, headers: dict[str, str], timeout_s: float) -> int | None:
    """The HTTP status of a GET, or None when nothing answered in time."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout_s) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, ValueError):
        return None


class RayHealth:
    """The cached answer of a probe (``probe`` is :func:`probe_cluster` unless a test
    passes a double of that boundary)."""

    def __init__(self, settings: Settings, probe: Callable[[], Probe] | None = None, *, cache_s: float = 1.5,
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self._probe = probe or (lambda: probe_cluster(settings))
        self.cache_s = cache_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: Probe | None = None
        self._at = float("-inf")
        self.outages = 0
        """How many times the cluster turned unreachable after being reachable (or at first sight)."""
        self.probes = 0

    def check(self, *, fresh: bool = False) -> Probe:
        with self._lock:
            now = self._clock()
            if not fresh and self._last is not None and now - self._at < self.cache_s:
                return self._last
            try:
                p = self._probe()
            except Exception as exc:  # noqa: BLE001 - a probe that breaks says "not reachable"
                p = Probe(False, f"unavailable: probe failed ({type(exc).__name__})")
            self.probes += 1
            if not p.up and (self._last is None or self._last.up):
                self.outages += 1
            self._last, self._at = p, self._clock()
            return p

    def invalidate(self) -> None:
        with self._lock:
            self._at = float("-inf")

    @property
    def last(self) -> Probe | None:
        return self._last
