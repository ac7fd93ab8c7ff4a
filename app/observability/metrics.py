"""Prometheus metrics: ``GET /metrics``.

Two sources:

* **The registry, read at scrape time** (:class:`RegistryCollector`): jobs by kind and state,
  finished jobs' run time as a histogram, device seconds and tokens, campaigns by outcome,
  registry object counts, and queue depth from the broker. Jobs are changed by worker
  processes on other machines; counting the rows when Prometheus asks is right whichever
  process changed them, survives restarts, and needs no shared metric state.
* **This API process** (:class:`HttpMetrics`): request count and latency histogram by method,
  route template (``/v1/jobs/{job_id}``, never the raw path) and status. With several API
  processes set ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multi-process mode): their
  samples are then merged from that directory at scrape time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from app.admin.broker import BrokerStats
from app.admin.repository import AdminRepository
from app.db import CampaignStatus, JobKind, JobStatus
from app.db.session import SessionFactory, transaction

logger = logging.getLogger(__name__)

JOB_DURATION_BUCKETS = (
    1.0,
    5.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    21600.0,
    86400.0,
)
"""Seconds; training runs last from seconds (tiny models) to hours."""
HTTP_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


class RegistryCollector(Collector):
    """Job, campaign and queue metrics computed from the registry and the broker per scrape."""

    def __init__(self, session_factory: SessionFactory, broker: BrokerStats) -> None:
        self.session_factory = session_factory
        self.broker = broker
        self.session: Session | None = None
        """The scraping request's session, when it lends one (see ServiceMetrics.render)."""

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Session]:
        if self.session is not None:
            yield self.session
        else:
            with transaction(self.session_factory) as session:
                yield session

    def describe(self) -> list[Metric]:
        return []  # computed at collect time; nothing to check against other collectors

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "recycle_registry_up", "1 when the registry database answered this scrape"
        )
        try:
            yield from self._registry_metrics()
            up.add_metric([], 1.0)
        except Exception as error:  # noqa: BLE001  (a scrape answers with what it has)
            logger.warning("metrics: registry unavailable: %s", error)
            up.add_metric([], 0.0)
        yield up
        yield from self._broker_metrics()

    def _registry_metrics(self) -> Iterator[Metric]:
        with self._reading() as session:
            repository = AdminRepository(session)
            by_kind_status = repository.jobs_by_kind_and_status()
            durations = repository.job_durations(JOB_DURATION_BUCKETS)
            costs = repository.cost_totals_by_kind()
            campaigns = repository.campaigns_by_status()
            counts = repository.resource_counts()
            adapters = repository.adapters_by_status()

        jobs = GaugeMetricFamily(
            "recycle_jobs", "Jobs in each state, by kind", labels=["kind", "status"]
        )
        seen = {(kind, status): count for kind, status, count in by_kind_status}
        for kind in JobKind:
            for status in JobStatus:
                jobs.add_metric([kind.value, status.value], seen.get((kind.value, status.value), 0))
        yield jobs

        finished = CounterMetricFamily(
            "recycle_jobs_finished",
            "Jobs that reached SUCCEEDED, FAILED or CANCELLED, by kind and final state",
            labels=["kind", "status"],
        )
        for kind in JobKind:
            for status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
                finished.add_metric(
                    [kind.value, status.value], seen.get((kind.value, status.value), 0)
                )
        yield finished

        histogram = HistogramMetricFamily(
            "recycle_job_duration_seconds",
            "Run time of finished jobs (their last attempt), by kind and final state",
            labels=["kind", "status"],
        )
        for row in durations:
            buckets = [
                (_bound(bound), float(count))
                for bound, count in zip(JOB_DURATION_BUCKETS, row.cumulative)
            ]
            buckets.append(("+Inf", float(row.count)))
            histogram.add_metric([row.kind, row.status], buckets, row.total_seconds)
        yield histogram

        device = CounterMetricFamily(
            "recycle_job_device_seconds",
            "GPU seconds used by finished jobs, by kind (0 for runs on CPU)",
            labels=["kind"],
        )
        wall = CounterMetricFamily(
            "recycle_job_wall_seconds",
            "Wall seconds of finished jobs' runs, by kind",
            labels=["kind"],
        )
        tokens = CounterMetricFamily(
            "recycle_job_tokens", "Tokens processed by finished jobs, by kind", labels=["kind"]
        )
        for kind in JobKind:
            totals = costs.get(kind.value, {})
            device.add_metric([kind.value], totals.get("device_seconds", 0.0))
            wall.add_metric([kind.value], totals.get("wall_seconds", 0.0))
            tokens.add_metric([kind.value], totals.get("tokens", 0.0))
        yield device
        yield wall
        yield tokens

        campaign_gauge = GaugeMetricFamily(
            "recycle_campaigns", "Campaigns in each state", labels=["status"]
        )
        outcomes = CounterMetricFamily(
            "recycle_campaigns_finished",
            "Finished campaigns by outcome (SUCCEEDED, PARTIAL, FAILED, CANCELLED)",
            labels=["outcome"],
        )
        for campaign_status in CampaignStatus:
            count = campaigns.get(campaign_status.value, 0)
            campaign_gauge.add_metric([campaign_status.value], count)
            if campaign_status.is_terminal:
                outcomes.add_metric([campaign_status.value], count)
        yield campaign_gauge
        yield outcomes

        objects = GaugeMetricFamily(
            "recycle_registry_objects",
            "Live registry objects (models, versions, tasks, adapters), campaigns and reports",
            labels=["kind"],
        )
        for object_kind, object_count in sorted(counts.items()):
            objects.add_metric([object_kind], object_count)
        yield objects

        adapter_gauge = GaugeMetricFamily(
            "recycle_adapters", "Live adapters by status", labels=["status"]
        )
        for adapter_status, adapter_count in sorted(adapters.items()):
            adapter_gauge.add_metric([adapter_status], adapter_count)
        yield adapter_gauge

    def _broker_metrics(self) -> Iterator[Metric]:
        depths = self.broker.queue_depths()
        depth = GaugeMetricFamily(
            "recycle_queue_depth", "Messages waiting in the broker, by queue", labels=["queue"]
        )
        for queue, value in sorted(depths.depths.items()):
            if value is not None:
                depth.add_metric([queue], value)
        yield depth
        up = GaugeMetricFamily("recycle_broker_up", "1 when the broker answered this scrape")
        up.add_metric([], 0.0 if depths.error else 1.0)
        yield up


class HttpMetrics:
    """Request count and latency of this process, by method, route template and status."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "recycle_http_requests",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "recycle_http_request_duration_seconds",
            "Time to answer an HTTP request (streams: until the stream ends)",
            ["method", "route", "status"],
            buckets=HTTP_LATENCY_BUCKETS,
            registry=registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        labels = (method, route, str(status))
        self.requests.labels(*labels).inc()
        self.latency.labels(*labels).observe(seconds)


class ServiceMetrics:
    """The scrape registry of one app and the HTTP metrics its middleware feeds."""

    def __init__(self, session_factory: SessionFactory, broker: BrokerStats) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        multiproc_dir = os.environ.get(MULTIPROC_ENV)
        if multiproc_dir:
            from prometheus_client import multiprocess

            # Every process writes its samples to the directory; the scrape merges them.
            self.http = HttpMetrics(CollectorRegistry(auto_describe=False))
            multiprocess.MultiProcessCollector(self.registry, path=multiproc_dir)
        else:
            self.http = HttpMetrics(self.registry)
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
        self.collector = RegistryCollector(session_factory, broker)
        self.registry.register(self.collector)
        self._lock = threading.Lock()

    def render(self, session: Session | None = None) -> bytes:
        """The exposition; registry counts are read in ``session`` when given (the request's)."""
        with self._lock:
            self.collector.session = session
            try:
                return generate_latest(self.registry)
            finally:
                self.collector.session = None


def parse_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of an exposition (tests and tools)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return samples


def sample(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: Any
) -> float:
    """One sample's value (0 when absent)."""
    key = (name, tuple(sorted((k, str(v)) for k, v in labels.items())))
    return samples.get(key, 0.0)
