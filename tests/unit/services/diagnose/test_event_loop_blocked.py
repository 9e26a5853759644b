"""event_loop_blocked judged on recorded reports of the asyncio_loop probe's hook."""

from __future__ import annotations

import json

from services.diagnose import event_loop_blocked
from services.measure.probes import asyncio_loop
from tests.support import jobs


def _job(report: str, wall_s: float):
    summary = asyncio_loop.summarize([json.loads(jobs.recorded(report))])
    built = jobs.job()
    config = built.configs[1]
    jobs.timing_runs(config, [wall_s] * 3)
    content = {"status": "ok", "threshold_s": 0.02, "wall_s": wall_s, **summary}
    jobs.evidence(built, config, "asyncio_loop", content, wall_s=wall_s)
    return built, summary


def test_a_synchronous_logging_handler_is_named_as_the_blocking_call():
    # Six coroutines logging 48 records through a handler that waits 30 ms for an ack.
    built, summary = _job("asyncio-loop-blocking-handler.json", wall_s=1.5)
    assert summary["slow_callbacks"] == 48
    assert (
        summary["blocking_calls"][0]["call"].startswith("emit (") and "app.py" in summary["blocking_calls"][0]["call"]
    )
    [finding] = event_loop_blocked.check(jobs.context(built))
    assert finding.severity == "medium"
    assert "emit" in finding.title
    assert 1.2 <= finding.metrics["blocked_s"] <= 1.6
    assert "48 times" in finding.detail and "QueueHandler" in finding.detail
    assert "warning (" in finding.detail  # the logging call on the loop thread's stack


def test_a_queue_handler_keeps_the_loop_free():
    built, summary = _job("asyncio-loop-queue-handler.json", wall_s=1.6)
    assert summary["callbacks"] > 100 and summary["slow_callbacks"] == 0
    assert event_loop_blocked.check(jobs.context(built)) == []


def test_callbacks_a_quota_stretched_are_no_blocked_loop_where_an_unquoted_drill_tells():
    # docs/reference/findings.md (event_loop_blocked): the blocking handler's report, but taken under cpus=0.5; the same loop
    # drilled without a quota kept every callback short.
    blocked = asyncio_loop.summarize([json.loads(jobs.recorded("asyncio-loop-blocking-handler.json"))])
    free = asyncio_loop.summarize([json.loads(jobs.recorded("asyncio-loop-queue-handler.json"))])
    built = jobs.job()
    unquoted, quota = built.configs[1], built.configs[2]
    quota.cpus = 0.5
    for config in (unquoted, quota):
        jobs.timing_runs(config, [1.5] * 3)
    jobs.evidence(built, quota, "asyncio_loop", {"status": "ok", "threshold_s": 0.02, "wall_s": 1.5, **blocked})
    jobs.evidence(built, unquoted, "asyncio_loop", {"status": "ok", "threshold_s": 0.02, "wall_s": 1.5, **free})
    assert event_loop_blocked.check(jobs.context(built)) == []
    # Drilled under the quota alone, it is a low note that says why.
    built.evidence = [e for e in built.evidence if e.config is quota]
    [note] = event_loop_blocked.check(jobs.context(built))
    assert note.severity == "low" and "Measured only under a 0.5-CPU quota" in note.detail
