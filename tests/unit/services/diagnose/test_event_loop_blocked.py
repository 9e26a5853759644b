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
    metrics = finding.metrics.stored()
    assert 1.2 <= metrics["blocked_s"] <= 1.6
    assert metrics["accounts_s"] == metrics["blocked_s"]  # the seconds it weighs as a cause
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


SUITE = {
    "test_cache.py::test_refresh_then_lookup": 0.24,
    "test_cache.py::test_lookup_before_refresh": 0.001,
    "test_cache.py::test_workers_run_concurrently": 0.1,
    "test_cache.py::test_timeouts_fire": 0.1,
}


def _suite_drilled_whole(tests: dict[str, float]):
    """A pytest-asyncio suite (examples/corpus/asyncio_suite) whose test_refresh_then_lookup
    waits 0.22 s on a synchronous socket read on the loop thread, drilled as one command."""
    summary = asyncio_loop.summarize([json.loads(jobs.recorded("asyncio-loop-pytest-asyncio-suite.json"))])
    built = jobs.job(["python", "-m", "pytest", "-q", "test_cache.py"])
    config = built.configs[1]
    jobs.timing_runs(config, [1.2] * 5, tests=tests)
    content = {"status": "ok", "threshold_s": 0.02, "wall_s": 1.2, **summary}
    jobs.evidence(built, config, "asyncio_loop", content, wall_s=1.2)
    return built


def test_a_blocked_loop_found_on_the_whole_suite_belongs_to_the_test_whose_task_blocked_it():
    [finding] = event_loop_blocked.check(jobs.context(_suite_drilled_whole(SUITE)))
    assert finding.test_id == "test_cache.py::test_refresh_then_lookup" and finding.severity == "medium"
    metrics = finding.metrics.stored()
    assert 0.2 <= metrics["blocked_s"] <= 0.3 and metrics["accounts_s"] == metrics["blocked_s"]
    assert metrics["attributed_from"] == "the whole command's drill"
    assert finding.title.startswith("test_cache.py::test_refresh_then_lookup's event loop was blocked")
    assert "mostly in readinto" in finding.title and "fetch_settings" in finding.detail
    # Nothing of it is left to the whole command: no second finding there.


def test_a_task_no_test_ran_stays_the_commands():
    # The same evidence in a job whose tests the frames do not name (another module).
    others = {"test_other.py::test_refresh_then_lookup": 0.24, "test_other.py::test_x": 0.1}
    [finding] = event_loop_blocked.check(jobs.context(_suite_drilled_whole(others)))
    assert finding.test_id is None and "attributed_from" not in finding.metrics.stored()


# Recorded by the probe's hook on examples of a loop blocked by short callbacks: a
# coroutine whose every step makes a synchronous 15 ms call (time.sleep), 120 times; one
# 25 ms call in a 2 s run; 400 calls of 2 ms in a 2 s run (tests/services/measure/probes/
# test_reads_and_asyncio_probes.py runs the same program).


def test_120_callbacks_of_15_ms_account_for_their_seconds_though_none_is_slow():
    built, summary = _job("asyncio-loop-120-blocks-of-15ms.json", wall_s=2.08)
    # A line drawn on one callback sees nothing: none ran over 20 ms.
    assert summary["slow_callbacks"] == 0 and summary["blocked_s"] == 0
    [finding] = event_loop_blocked.check(jobs.context(built))
    assert finding.severity == "medium"
    metrics = finding.metrics.stored()
    assert 1.7 <= metrics["accounts_s"] <= 1.95 and metrics["held_callbacks"] == 120
    assert metrics["floor_s"] == 0.005
    # The heartbeat was late behind every one of them.
    assert metrics["heartbeat_lag_s"] > 1.0 and 0.01 <= metrics["heartbeat_lag_max_s"] <= 0.02
    # No stack names the call: the finding names the callbacks that held the loop.
    assert "by 120 short callbacks, mostly Task main (short_blocks.py:11)" in finding.title
    assert "blocked by many short callbacks" in finding.detail and "none ran over 0.020 s" in finding.detail
    # Every callback's duration, by bucket: the 120 sat between 10 and 20 ms.
    assert "120 of 10 ms-20 ms" in finding.detail


def test_the_blocked_share_and_seconds_come_from_the_thresholds():
    built, _ = _job("asyncio-loop-120-blocks-of-15ms.json", wall_s=2.08)
    assert event_loop_blocked.check(jobs.context(built, event_loop_blocked_min_s=2.5)) == []
    assert event_loop_blocked.check(jobs.context(built, event_loop_blocked_share=0.95)) == []
    # Blocked 88 % of the run: a share under that still finds it.
    assert event_loop_blocked.check(jobs.context(built, event_loop_blocked_share=0.8)) != []


def test_one_25_ms_callback_in_a_2_s_run_is_no_blocked_loop():
    built, summary = _job("asyncio-loop-one-25ms-block.json", wall_s=2.09)
    assert summary["slow_callbacks"] == 1 and summary["held_callbacks"] == 1
    findings = event_loop_blocked.check(jobs.context(built))
    assert all(finding.severity == "low" for finding in findings)


def test_many_2_ms_callbacks_are_a_healthy_loop():
    built, summary = _job("asyncio-loop-400-callbacks-of-2ms.json", wall_s=2.31)
    # They ran (and held the loop a third of the run), each under the floor.
    two_ms = next(bucket for bucket in summary["durations"] if bucket["upper_s"] == 0.005)
    assert two_ms["count"] >= 390 and summary["held_s"] == 0
    assert event_loop_blocked.check(jobs.context(built)) == []


def test_evidence_stored_before_the_floor_reads_as_its_slow_callbacks():
    # The handler's report predates the floor: the slow callbacks' time is what it has.
    built, summary = _job("asyncio-loop-blocking-handler.json", wall_s=1.5)
    assert "held_s" not in summary
    [finding] = event_loop_blocked.check(jobs.context(built))
    assert "floor_s" not in finding.metrics.stored() and "mostly in emit" in finding.title


def test_short_blocks_found_on_the_whole_command_belong_to_the_test_whose_task_held_the_loop():
    # Two loops, one a test's coroutine each (the probe test's test_server.py): test_blocks
    # makes 120 synchronous calls of 15 ms, test_quick only awaits.
    summary = asyncio_loop.summarize([json.loads(jobs.recorded("asyncio-loop-two-loops-short-blocks.json"))])
    built = jobs.job(["python", "-m", "pytest", "-q", "test_server.py"])
    config = built.configs[1]
    tests = {"test_server.py::test_blocks": 2.1, "test_server.py::test_quick": 0.3}
    jobs.timing_runs(config, [2.7] * 5, tests=tests)
    content = {"status": "ok", "threshold_s": 0.02, "wall_s": 2.7, **summary}
    jobs.evidence(built, config, "asyncio_loop", content, wall_s=2.7)
    [finding] = event_loop_blocked.check(jobs.context(built))
    assert finding.test_id == "test_server.py::test_blocks"
    metrics = finding.metrics.stored()
    assert metrics["attributed_from"] == "the whole command's drill" and metrics["held_callbacks"] == 120
    assert 1.7 <= metrics["accounts_s"] <= 1.95
    # The heartbeat's lag behind this test's callbacks, not the whole run's.
    assert 0.5 <= metrics["heartbeat_lag_s"] <= metrics["accounts_s"] and "heartbeat_lag_max_s" not in metrics
    assert "of the test)" in finding.title and "by 120 short callbacks" in finding.title


# Recorded with the hook of services/measure/probes/asyncio_loop.py on a quiet machine: an
# asyncio server answering 96 requests of 8 clients, each answer hashed on the loop thread
# for about 3 ms of CPU (tests/cli/test_census_command.py's server, a smaller digest).
def test_callbacks_under_the_floor_that_compute_block_the_loop_as_the_heartbeat_sees_it():
    built, summary = _job("asyncio-loop-96-hashes-under-the-floor.json", wall_s=0.52)
    # None of them reaches the 5 ms floor, so the callbacks' own count says nothing...
    assert summary["held_s"] == 0 and summary["heavy"]["count"] == 96
    assert summary["heartbeat"]["late_beats"] == summary["heartbeat"]["beats"] == 12
    # ... but the timer due every 5 ms fired tens of milliseconds late behind each batch.
    [finding] = event_loop_blocked.check(jobs.context(built))
    assert finding.severity == "medium"
    metrics = finding.metrics.stored()
    assert 0.2 < metrics["blocked_s"] < 0.3 and metrics["blocked_s"] == metrics["heartbeat_blocked_s"]
    assert metrics["heavy_callbacks"] == 96 and 0.25 < metrics["heavy_cpu_s"] < 0.35
    assert "by 96 callbacks of 1.00 ms or more, most under 5.00 ms" in finding.title
    assert "ran 0.295 s of CPU on the loop's thread" in finding.detail and "run_in_executor" in finding.detail


def test_the_time_the_process_waited_for_a_cpu_is_not_the_loops():
    built, _ = _job("asyncio-loop-96-hashes-under-the-floor.json", wall_s=0.52)
    [evidence] = built.evidence
    evidence.run = next(run for run in evidence.config.runs if run.id == evidence.run_id)
    evidence.run.run_delay_s = 0.2  # the kernel kept it off a CPU most of that lateness
    assert event_loop_blocked.check(jobs.context(built)) == []


def test_a_loop_saturated_by_tiny_callbacks_is_late_now_and_then_but_not_blocked():
    # 64 clients, 300 echoes each: 78,000 callbacks, all under 2 ms, the timer late 0.38 s
    # in all but never 10 ms at once, and no callback computing a millisecond.
    built, summary = _job("asyncio-loop-saturated-echo.json", wall_s=1.3)
    assert summary["callbacks"] > 70_000 and summary["heartbeat"]["lag_total_s"] > 0.3
    assert event_loop_blocked.check(jobs.context(built)) == []


def test_callbacks_that_wait_for_the_gil_add_no_heartbeat_time():
    # The awaiting server beside a thread that spins: each callback waits for the GIL (a
    # switch interval, 5 ms), so the timer is late a second in all, yet the callbacks of a
    # millisecond or more computed 0.03 s: the heartbeat's count stays at that.
    built, summary = _job("asyncio-loop-gil-crunch-thread.json", wall_s=2.3)
    assert summary["heartbeat"]["lag_total_s"] > 1.0 and summary["heavy"]["cpu_s"] < 0.06
    [evidence] = built.evidence
    assert event_loop_blocked._late_blocked(evidence, evidence.parsed) < 0.06
