"""Prometheus metrics (``GET /metrics``, text exposition format).

Two kinds:

* per-process, counted as requests pass (``privatize_http_*``, uploaded bytes);
* read from the database at scrape time (jobs by state, bytes processed, quarantined
  records), so they are right after a restart and the same on every API replica
  (aggregate them with ``max``, not ``sum``, across replicas).

Labels never carry tenant ids, tokens or paths with ids in them: ``route`` is the route
template (``/v1/jobs/{job_id}``), so the series stay few.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from services.db import session_scope
from services.models import ACTIVE_JOB_STATES, TERMINAL_JOB_STATES, Job

log = logging.getLogger(__name__)

METRIC_NAMES = (
    "privatize_http_requests_total",
    "privatize_http_request_duration_seconds",
    "privatize_jobs",
    "privatize_processed_bytes_total",
    "privatize_quarantined_records_total",
    "privatize_upload_bytes_total",
    "privatize_ray_connected",
    "privatize_ray_unavailable_total",
    "privatize_ray_head_restarts_total",
)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _DatabaseCollector(Collector):
    """Job metrics from the database, read when Prometheus scrapes."""

    def __init__(self, metrics: "Metrics"):
        self.metrics = metrics

    def collect(self):
        ctx = self.metrics.ctx
        if ctx is None:
            return
        try:
            with session_scope(ctx.sessions) as s:
                by_state = dict(s.execute(select(Job.status, func.count()).group_by(Job.status)).all())
                done = Job.status == "succeeded"
                processed = s.scalar(select(func.coalesce(func.sum(Job.input_bytes), 0)).where(done))
                quarantined = s.scalar(select(func.coalesce(func.sum(Job.quarantined_records), 0)).where(done))
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail because the database does
            log.warning("metrics: cannot read the database (%s)", type(exc).__name__)
            return
        jobs = GaugeMetricFamily("privatize_jobs", "Jobs by state", labels=["state"])
        for state in (*ACTIVE_JOB_STATES, *TERMINAL_JOB_STATES):
            jobs.add_metric([state], by_state.get(state, 0))
        yield jobs
        yield CounterMetricFamily("privatize_processed_bytes", "Corpus bytes of succeeded jobs",
                                  value=int(processed or 0))
        yield CounterMetricFamily("privatize_quarantined_records", "Records quarantined by succeeded jobs",
                                  value=int(quarantined or 0))


class _RayCollector(Collector):
    def __init__(self, metrics: "Metrics"):
        self.metrics = metrics

    def collect(self):
        g = GaugeMetricFamily("privatize_ray_connected", "1 while the service reaches the Ray Jobs API")
        g.add_metric([], 1 if self.metrics.ray_state() == "connected" else 0)
        yield g
        yield CounterMetricFamily("privatize_ray_unavailable", "Times this process found the Ray cluster "
                                  "unreachable (a real probe; counted when it turns unreachable)",
                                  value=int(self.metrics.ray_outages()))
        yield CounterMetricFamily("privatize_ray_head_restarts", "Embedded Ray heads this process started in "
                                  "place of one that was gone (by the reconciler or a request that needed "
                                  "the cluster first)", value=int(self.metrics.ray_restarts()))


class Metrics:
    """One registry per app (tests build several apps in one process)."""

    def __init__(self, ray_state=lambda: "unknown", ray_outages=lambda: 0, ray_restarts=lambda: 0):
        self.registry = CollectorRegistry(auto_describe=True)
        self.ctx = None
        self.ray_state = ray_state
        self.ray_outages = ray_outages
        self.ray_restarts = ray_restarts
        self.requests = Counter("privatize_http_requests", "HTTP requests", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("privatize_http_request_duration_seconds", "HTTP request latency",
                                 ["method", "route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.upload_bytes = Counter("privatize_upload_bytes", "Bytes of accepted corpus uploads",
                                    registry=self.registry)
        self.registry.register(_DatabaseCollector(self))
        self.registry.register(_RayCollector(self))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
