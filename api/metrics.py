"""Prometheus metrics: request counts and latencies, and job/task states read at scrape time."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.context import ctx
from services.models import Job, JobTask


class StateCollector:
    """Jobs by status and tasks by step and state, counted in the database (the record)."""

    def __init__(self, session_factory: sessionmaker[Session]):
        self.session_factory = session_factory

    def describe(self):
        return []  # no query at registration time

    def collect(self):
        jobs = GaugeMetricFamily("lagtrace_jobs", "Jobs by status", labels=["status"])
        tasks = GaugeMetricFamily("lagtrace_tasks", "Job steps by step and state", labels=["step", "state"])
        with self.session_factory() as session:
            for status, count in session.execute(select(Job.status, func.count()).group_by(Job.status)):
                jobs.add_metric([status.value], count)
            for step, state, count in session.execute(
                select(JobTask.step, JobTask.state, func.count()).group_by(JobTask.step, JobTask.state)
            ):
                tasks.add_metric([step, state.value], count)
        yield jobs
        yield tasks


@dataclass
class ApiMetrics:
    registry: CollectorRegistry
    requests: Counter
    latency: Histogram
    jobs_submitted: Counter
    webhooks: Counter


def make_metrics(session_factory: sessionmaker[Session]) -> ApiMetrics:
    # A registry per app, not the global one: two apps in one process (tests) stay apart.
    registry = CollectorRegistry()
    registry.register(StateCollector(session_factory))
    return ApiMetrics(
        registry=registry,
        requests=Counter(
            "lagtrace_http_requests", "HTTP requests", ["method", "endpoint", "status"], registry=registry
        ),
        latency=Histogram("lagtrace_http_request_seconds", "HTTP request latency", ["endpoint"], registry=registry),
        jobs_submitted=Counter("lagtrace_jobs_submitted", "Jobs submitted", ["source"], registry=registry),
        webhooks=Counter("lagtrace_webhook_deliveries", "GitHub deliveries by outcome", ["outcome"], registry=registry),
    )


def metrics() -> ApiMetrics:
    """This app's metrics (registered by api.register on the shared context)."""
    found = ctx().extensions["metrics"]
    assert isinstance(found, ApiMetrics)
    return found
