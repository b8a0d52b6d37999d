"""Prometheus metrics for /metrics: requests and latency by route and status, diagnoses by top
cause and by verdict, diagnosis duration, log bytes processed, secrets redacted, the incident
search index lag and build info.

With several gunicorn workers, `dsdoctor serve` sets ``PROMETHEUS_MULTIPROC_DIR`` (under
``DSDOCTOR_HOME``) before any worker imports prometheus_client; each worker then writes its
samples to files there and /metrics merges them with ``MultiProcessCollector``, so every scrape
sees the whole server whichever worker answers it.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterator

from flask import Flask, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

REQUESTS = Counter("dsdoctor_http_requests", "HTTP requests answered, by route template, method and status",
                   ["route", "method", "status"])
LATENCY = Histogram("dsdoctor_http_request_duration_seconds", "Time to answer a request, by route and status",
                    ["route", "method", "status"], buckets=LATENCY_BUCKETS)
DIAGNOSES = Counter("dsdoctor_diagnoses", "Diagnoses computed (new or re-run), by top cause ('none' if no cause)",
                    ["top_cause"])
LOG_BYTES = Counter("dsdoctor_log_bytes_processed", "Bytes of log text diagnosed")
REDACTIONS = Counter("dsdoctor_secrets_redacted", "Secrets removed from submitted evidence, by kind", ["kind"])
DIAGNOSIS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
DIAGNOSIS_DURATION = Histogram("dsdoctor_diagnosis_duration_seconds",
                               "Time to compute one diagnosis (rules, inference, planning), new or re-run",
                               buckets=DIAGNOSIS_BUCKETS)
VERDICTS = Counter("dsdoctor_diagnosis_verdicts", "Diagnoses computed, by verdict (confident, uncertain, unexplained)",
                   ["verdict"])


def record_diagnosis(diagnosis: dict, seconds: float | None = None) -> None:
    """Count one computed diagnosis, its verdict, its duration and the log bytes behind it."""
    causes = diagnosis.get("causes") or []
    DIAGNOSES.labels(top_cause=causes[0]["id"] if causes else "none").inc()
    VERDICTS.labels(verdict=(diagnosis.get("summary") or {}).get("verdict") or "none").inc()
    if seconds is not None:
        DIAGNOSIS_DURATION.observe(seconds)
    LOG_BYTES.inc(int((diagnosis.get("stats") or {}).get("bytes") or 0))


def record_redactions(counts: dict[str, int]) -> None:
    for kind, n in counts.items():
        REDACTIONS.labels(kind=kind).inc(n)


class IndexLagCollector(Collector):
    """Reads the incident index lag at scrape time (no state kept between scrapes)."""

    def __init__(self, read_lag: Callable[[], float | None]):
        self.read_lag = read_lag

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = self.read_lag()
        family = GaugeMetricFamily("dsdoctor_search_index_lag",
                                   "Incident changes not yet in the full-text search index (-1: store unavailable)")
        family.add_metric([], -1.0 if lag is None else float(lag))
        yield family


class BuildInfoCollector(Collector):
    """``dsdoctor_build_info{version, python} 1``: which release answers (the same in every worker)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from dsdoctor.api.version import package_version

        family = GaugeMetricFamily("dsdoctor_build_info", "The dsdoctor version serving, always 1",
                                   labels=["version", "python"])
        family.add_metric([package_version(), platform.python_version()], 1.0)
        yield family


def render(read_lag: Callable[[], float | None]) -> tuple[bytes, str]:
    """The exposition text and its content type, merged over worker processes when multiprocess."""
    extra = CollectorRegistry(auto_describe=False)
    extra.register(IndexLagCollector(read_lag))
    extra.register(BuildInfoCollector())
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    return body + generate_latest(extra), CONTENT_TYPE_LATEST


def install(app: Flask) -> None:
    """Time and count every request by its route template (unmatched paths count as 'unmatched')."""

    @app.before_request
    def _start_timer() -> None:
        g.metrics_started = time.perf_counter()

    @app.after_request
    def _observe(response):
        started = g.pop("metrics_started", None)
        if started is not None:
            route = request.url_rule.rule if request.url_rule is not None else "unmatched"
            labels = {"route": route, "method": request.method, "status": str(response.status_code)}
            REQUESTS.labels(**labels).inc()
            LATENCY.labels(**labels).observe(time.perf_counter() - started)
        return response


def mark_process_dead(pid: int) -> None:
    """gunicorn child_exit hook: drop a dead worker's live gauges (counters stay)."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)
