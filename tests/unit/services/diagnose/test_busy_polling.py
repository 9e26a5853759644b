"""busy_polling judged on recorded `strace -f -c` tables."""

from __future__ import annotations

import pytest

from services.diagnose import busy_polling
from services.measure.probes import strace
from tests.support import jobs


def _judge(table: str, wall_s: float, cpu_share: float, switches_per_s: float):
    rows, total = strace.parse_summary(jobs.recorded(table))
    built = jobs.job()
    config = built.configs[1]
    jobs.timing_runs(config, [wall_s] * 5, cpu_share=cpu_share, switches_per_s=switches_per_s)
    jobs.evidence(built, config, "strace", {"status": "ok", "syscalls": rows, "total": total}, wall_s=wall_s)
    return busy_polling.check(jobs.context(built))


def test_psutil_5_wait_with_a_timeout_is_a_slow_poller():
    # psutil 5.9.8 Process.wait(timeout=60) on a 3 s child: 85 clock_nanosleep + 85 wait4.
    [finding] = _judge("strace-c-psutil-wait.txt", wall_s=3.03, cpu_share=0.02, switches_per_s=30)
    assert finding.kind == "busy_polling"
    assert 40 <= finding.metrics.stored()["polling_calls_per_s"] <= 80
    assert finding.metrics.stored()["syscalls"]["wait4"] == 85
    # What polling costs is its wake-ups' system time (clock_nanosleep's and wait4's) and
    # the wait's end half a poll interval late, not the wait.
    assert finding.metrics.stored()["accounts_s"] == pytest.approx(0.001793 + 0.000285 + 3.03 / 85 / 2)
    assert "slow poller" in finding.detail


def test_a_slow_pollers_cost_is_its_lateness_where_its_sleeps_took_no_system_time():
    # subprocess.Popen.wait(timeout) of CPython 3.11 on a 3 s child, traced on one core:
    # 67 clock_nanosleep and 66 wait4, 0.000 s of system time in all. It is still the
    # cause of its lateness, not a fallback behind off_cpu_wait (services/diagnose/diagnoses.py).
    built = jobs.job()
    config = built.configs[0]
    jobs.timing_runs(config, [3.07] * 5, cpu_share=0.02, switches_per_s=23)
    rows = [
        {"name": name, "pct_time": 0.0, "seconds": 0.0, "usecs_per_call": 0, "calls": calls, "errors": 0}
        for name, calls in (("clock_nanosleep", 67), ("wait4", 66))
    ]
    jobs.evidence(built, config, "strace", {"status": "ok", "syscalls": rows, "total": None}, wall_s=3.09)
    [finding] = busy_polling.check(jobs.context(built))
    assert finding.metrics.stored()["accounts_s"] == pytest.approx(3.09 / 67 / 2)


def test_a_blocking_waitpid_is_no_finding():
    assert _judge("strace-c-waitpid.txt", wall_s=3.01, cpu_share=0.01, switches_per_s=1) == []


def test_a_healthy_event_loop_waiting_on_its_selector_is_no_finding():
    # asyncio.sleep(0.02) 150 times: 306 epoll_wait in 3 s, the loop blocking as it should.
    rows, _ = strace.parse_summary(jobs.recorded("strace-c-asyncio-heartbeat.txt"))
    assert sum(row["calls"] for row in rows if row["name"] == "epoll_wait") >= 300
    assert _judge("strace-c-asyncio-heartbeat.txt", wall_s=3.05, cpu_share=0.02, switches_per_s=100) == []


def test_a_poller_that_computes_is_not_polling():
    assert _judge("strace-c-psutil-wait.txt", wall_s=3.03, cpu_share=0.9, switches_per_s=30) == []


def test_a_peer_that_trickles_its_answer_is_not_a_poller():
    # examples/slow_peer.py: the server thread sleeps 50 ms between chunks (about 20
    # sleeps a second) while the client blocks in recv: nothing checks between sleeps.
    rows, _ = strace.parse_summary(jobs.recorded("strace-c-slow-peer.txt"))
    assert sum(row["calls"] for row in rows if row["name"] == "clock_nanosleep") >= 20
    assert _judge("strace-c-slow-peer.txt", wall_s=1.25, cpu_share=0.03, switches_per_s=60) == []
