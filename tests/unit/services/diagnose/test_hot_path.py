"""hot_path judged on a recorded py-spy speedscope profile."""

from __future__ import annotations

import json

from services.diagnose import hot_path
from services.measure.probes import pyspy
from tests.support import jobs


def _profile() -> dict:
    # py-spy 0.4.3 record --idle --threads --subprocesses of requests 2.31 iter_content(chunk_size=1).
    return json.loads(jobs.recorded("pyspy-requests-iter-content-1.speedscope.json"))


def test_functions_have_own_and_cumulative_shares_per_thread():
    tables = pyspy.summarize_functions(_profile())
    main = tables[0]
    assert main["samples"] == max(t["samples"] for t in tables)
    by_name = {f["function"]: f for f in main["functions"]}
    read = by_name["HTTPResponse.read"]
    assert read["file"].endswith("urllib3/response.py") and read["line"]
    assert read["own_pct"] <= read["cumulative_pct"] <= 100
    # py-spy's "process N" / "thread (N)" root frames are labels, not functions.
    assert not any(f["function"].startswith(("process ", "thread (")) for t in tables for f in t["functions"])
    # The server thread waits in its selector the whole time.
    server = next(t for t in tables if "serve_forever" in t["thread"])
    assert server["functions"][0]["function"].endswith("select") and server["functions"][0]["own_pct"] == 100


def _job(cpu_share: float):
    built = jobs.job()
    config = built.configs[0]
    jobs.timing_runs(config, [1.6, 1.7, 1.65], cpu_share=cpu_share)
    content = {"status": "ok", "functions": pyspy.summarize_functions(_profile())}
    jobs.evidence(built, config, "pyspy", content, wall_s=1.7)
    return built


def test_a_cpu_bound_command_gets_its_hot_functions_named():
    [finding] = hot_path.check(jobs.context(_job(cpu_share=0.95)))
    assert finding.kind == "hot_path" and finding.severity == "low"
    assert "HTTPResponse.read" in finding.title and "response.py:" in finding.title
    assert "iter_content" in finding.detail  # on the path: cumulative share, not own
    assert "ran on a CPU 95%" in finding.detail


def test_a_command_that_mostly_waits_is_left_to_the_waiting_rules():
    assert hot_path.check(jobs.context(_job(cpu_share=0.1))) == []


def test_blocking_waits_are_not_hot_functions():
    tables = pyspy.summarize_functions(_profile())
    server = next(t for t in tables if "serve_forever" in t["thread"])
    assert server["waiting_pct"] == 100 and server["functions"][0]["waiting"]
    [finding] = hot_path.check(jobs.context(_job(cpu_share=0.95)))
    assert finding.metrics["thread"] == tables[0]["thread"]  # not the server blocked in select()
    assert all("select" not in f["function"] for f in finding.metrics["functions"])


def test_a_quota_halving_the_cpu_share_does_not_hide_the_hot_path():
    built = _job(cpu_share=0.95)
    # The same command under cpus=0.5: on a CPU under half its wall time, by the quota.
    jobs.timing_runs(built.configs[2], [3.4, 3.5, 3.3], cpu_share=0.47)
    content = {"status": "ok", "functions": pyspy.summarize_functions(_profile())}
    jobs.evidence(built, built.configs[2], "pyspy", content, wall_s=3.5)
    [finding] = hot_path.check(jobs.context(built))
    assert abs(finding.metrics["cpu_share"] - 0.95) < 1e-9
