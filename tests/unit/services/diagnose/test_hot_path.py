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
    read = next(
        f
        for f in main["functions"]
        if f["function"] == "HTTPResponse.read" and f["file"].endswith("urllib3/response.py")
    )
    assert read["line"]
    assert read["own_pct"] <= read["cumulative_pct"] <= 100
    # py-spy's "process N" / "thread (N)" root frames are labels, not functions.
    assert not any(f["function"].startswith(("process ", "thread (")) for t in tables for f in t["functions"])
    # The server thread waits in its selector the whole time.
    server = next(t for t in tables if "serve_forever" in t["thread"])
    assert server["functions"][0]["function"].endswith("select") and server["functions"][0]["own_pct"] == 100


def test_a_functions_samples_under_a_blocking_wait_are_counted_apart():
    # The server thread sits in its selector: every sample of serve_forever is under a
    # wait, no CPU of its own (the differential subtracts them). The client reading the
    # response runs in HTTPResponse.read far more than it waits there.
    tables = pyspy.summarize_functions(_profile())
    server = next(t for t in tables if "serve_forever" in t["thread"])
    serve = next(f for f in server["functions"] if f["function"].endswith("serve_forever"))
    assert serve["waiting_samples"] == serve["cumulative_samples"] > 0
    read = next(
        f
        for f in tables[0]["functions"]
        if f["function"] == "HTTPResponse.read" and f["file"].endswith("urllib3/response.py")
    )
    assert read["waiting_samples"] < read["cumulative_samples"] / 2


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
    assert finding.metrics.stored()["thread"] == tables[0]["thread"]  # not the server blocked in select()
    assert all("select" not in f["function"] for f in finding.metrics.stored()["functions"])


def test_a_quota_halving_the_cpu_share_does_not_hide_the_hot_path():
    built = _job(cpu_share=0.95)
    # The same command under cpus=0.5: on a CPU under half its wall time, by the quota.
    jobs.timing_runs(built.configs[2], [3.4, 3.5, 3.3], cpu_share=0.47)
    content = {"status": "ok", "functions": pyspy.summarize_functions(_profile())}
    jobs.evidence(built, built.configs[2], "pyspy", content, wall_s=3.5)
    [finding] = hot_path.check(jobs.context(built))
    assert abs(finding.metrics.stored()["cpu_share"] - 0.95) < 1e-9


def _startup_job(imports_told_apart: bool = True, timing: tuple[float, ...] = (1.2, 1.25, 1.22)):
    # py-spy 0.4.3 record of pytest 8.2 running ten fast tests in a container (the
    # pytest_plugins corpus twin, 22 Nov): 23 of its 42 samples were taken inside imports,
    # the hottest function the import system's own _path_stat. Timed (by default) as if
    # slow, so that a symptom asks for a cause.
    built = jobs.job(["python", "-m", "pytest", "-q", "test_fast.py"])
    config = built.configs[0]
    jobs.timing_runs(config, list(timing), cpu_share=0.95)
    profile = json.loads(jobs.recorded("pyspy-pytest-startup.speedscope.json"))
    tables = pyspy.summarize_functions(profile)
    if not imports_told_apart:
        for table in tables:
            for function in table["functions"]:
                function["importing_samples"] = 0
    jobs.evidence(built, config, "pyspy", {"status": "ok", "functions": tables}, wall_s=0.6)
    return built, profile


def test_samples_taken_inside_imports_are_counted_per_function():
    _, profile = _startup_job()
    [main] = pyspy.summarize_functions(profile)[:1]
    by_name = {f["function"]: f for f in main["functions"]}
    assert by_name["_find_and_load"]["importing_samples"] == by_name["_find_and_load"]["cumulative_samples"] == 23
    assert by_name["_path_stat"]["importing_samples"] == by_name["_path_stat"]["cumulative_samples"]
    assert (
        by_name["_run_module_as_main"]["importing_samples"] == 23 < by_name["_run_module_as_main"]["cumulative_samples"]
    )


def test_start_up_inside_imports_is_no_hot_path():
    built, _ = _startup_job()
    assert hot_path.check(jobs.context(built)) == []
    # The same samples with imports not told apart: the import system's _path_stat held
    # the most, but it is the interpreter's machinery, as pytest's own frames are (docs/reference/findings.md).
    built, _ = _startup_job(imports_told_apart=False)
    assert hot_path.check(jobs.context(built)) == []


def test_a_fast_healthy_command_asks_for_no_hot_path():
    # The same profile, imports not told apart, of a command that takes 0.6 s and has no
    # timing finding: nothing to explain (faker's twin, 22 Nov: "92% of its samples under
    # _run_module_as_main", a low finding on a healthy program).
    built, _ = _startup_job(imports_told_apart=False, timing=(0.6, 0.62, 0.61))
    assert hot_path.check(jobs.context(built)) == []


def _spread_job():
    # A loop whose time is spread over many small callees: no function holds 10 % of the
    # samples itself, the caller holds 60 % of them on the stack.
    built = jobs.job()
    config = built.configs[0]
    jobs.timing_runs(config, [1.6, 1.7, 1.65], cpu_share=0.95)
    functions = [
        {
            "function": "render",
            "file": "/app/report.py",
            "line": 12,
            "own_samples": 2,
            "cumulative_samples": 60,
            "own_pct": 2.0,
            "cumulative_pct": 60.0,
        },
        *(
            {
                "function": f"cell_{i}",
                "file": "/app/cells.py",
                "line": i,
                "own_samples": 6,
                "cumulative_samples": 6,
                "own_pct": 6.0,
                "cumulative_pct": 6.0,
            }
            for i in range(10)
        ),
    ]
    content = {"status": "ok", "functions": [{"thread": "MainThread", "samples": 100, "functions": functions}]}
    jobs.evidence(built, config, "pyspy", content, wall_s=1.7)
    return built


def test_a_caller_on_the_hot_path_is_titled_with_its_cumulative_share():
    # It used to say "spends 2% of its samples in render": the own share of a function
    # chosen for its cumulative one.
    [finding] = hot_path.check(jobs.context(_spread_job()))
    assert "spends 60% of its samples under render (report.py:12)" in finding.title


def test_pytest_s_and_the_interpreter_s_frames_are_never_the_hot_path():
    # docs/reference/findings.md (hot_path): a 15 ms test's drill is mostly pytest (fixtures, hooks, runpy); the test's
    # own code or its library's is named, however few samples it holds.
    def frame(function: str, file: str, own: int, cumulative: int) -> dict:
        return {
            "function": function,
            "file": file,
            "line": 1,
            "own_samples": own,
            "cumulative_samples": cumulative,
            "own_pct": float(own),
            "cumulative_pct": float(cumulative),
        }

    functions = [
        frame("_run_code", "<frozen runpy>", 0, 94),
        frame("getfixturemarker", "/venv/lib/python3.11/site-packages/_pytest/fixtures.py", 30, 30),
        frame("_multicall", "/venv/lib/python3.11/site-packages/pluggy/_callers.py", 2, 90),
        frame("pytest_pyfunc_call", "/venv/lib/python3.11/site-packages/_pytest/python.py", 1, 40),
        frame("feed_data", "/venv/lib/python3.11/site-packages/wsproto/connection.py", 14, 20),
    ]
    built = jobs.job()
    jobs.timing_runs(built.configs[0], [1.6, 1.7, 1.65], cpu_share=0.95)
    content = {"status": "ok", "functions": [{"thread": "MainThread", "samples": 100, "functions": functions}]}
    jobs.evidence(built, built.configs[0], "pyspy", content, wall_s=1.7)
    [finding] = hot_path.check(jobs.context(built))
    assert "feed_data (connection.py:1)" in finding.title
    assert not any(name in finding.detail for name in ("getfixturemarker", "_multicall", "_run_code", "pyfunc"))


WEBSOCKET_TEST = "test_app.py::test_websocket_echo"


def _websocket_job(fast_profile: str = "cpuset=0-1", recording: str = "pyspy-starlette-websocket-functions.json"):
    """A 15 ms starlette 0.37.2 websocket test, 3.7x slower pinned to one core (measured
    here), profiled by the drill in both configurations (recorded; the fast side's
    profile can be swapped for the slow one's to take the difference away)."""
    recorded = json.loads(jobs.recorded(recording))["configs"]
    built = jobs.job(["python", "-m", "pytest", "-q"])
    medians = {"cpuset=0": 0.052, "cpuset=0-1": 0.014, "cpus=0.5": 0.014}
    for config in built.configs:
        for step in (0.0, 0.001, -0.001, 0.002, -0.002):
            jobs.timing_runs(config, [0.9], cpu_share=0.95, tests={WEBSOCKET_TEST: medians[config.label] + step})
    for label, profile in (("cpuset=0", "cpuset=0"), ("cpuset=0-1", fast_profile)):
        config = next(c for c in built.configs if c.label == label)
        jobs.evidence(built, config, "pyspy", recorded[profile], wall_s=2.2, test_id=WEBSOCKET_TEST)
    return built


def test_a_short_tests_hot_path_is_what_grew_from_the_fast_to_the_slow_configuration():
    [finding] = hot_path.check(jobs.context(_websocket_job()))
    # starlette's TestClient polling loop (anyio.sleep(0)) on the portal threads, not
    # pytest's fixture machinery nor asyncio's own loop, which every program runs.
    assert "_asgi_receive (testclient.py:163)" in finding.title
    assert finding.test_id == WEBSOCKET_TEST and finding.config_label == "cpuset=0"
    assert not any("_pytest" in f["file"] or "pluggy" in f["file"] for f in finding.metrics.stored()["functions"])
    # Per run of the test: 20 amplified repetitions slow, 50 fast.
    assert 0.010 <= finding.metrics.stored()["accounts_s"] <= 0.038
    assert finding.metrics.stored()["slow_vs_fast"].startswith("in cpuset=0 WebSocketTestSession._asgi_receive")


def test_a_threads_root_in_either_profile_is_never_what_grew():
    # A later run of the same test: a portal thread's run_blocking_portal held 93 % of the
    # thread's samples on one core (under the 95 % of a root) and 99-100 % on two, where
    # it was left out as the root; its whole thread read as growth (0.037 s against 0).
    [finding] = hot_path.check(jobs.context(_websocket_job(recording="pyspy-starlette-websocket-roots.json")))
    assert "run_blocking_portal" not in finding.title and "AsyncIOBackend.run" not in finding.title
    assert "testclient.py" in finding.title, finding.title


def test_of_the_frames_on_one_path_the_innermost_holding_half_the_growth_is_named():
    # Profiles listing 40 functions a thread: the route frames above the loop grew 14-18 ms
    # per run, the _asgi_receive loop 12 ms, the anyio sleep it polls 6 ms. Among the frames
    # within 70 % of the largest growth, the one with the most own samples was the route's
    # websocket_session.<locals>.app (1 run in 3 of the corpus's case).
    [finding] = hot_path.check(jobs.context(_websocket_job(recording="pyspy-starlette-websocket-nested.json")))
    assert "WebSocketTestSession._asgi_receive (testclient.py:16" in finding.title, finding.title


def test_a_profile_that_did_not_grow_names_no_function():
    # The same profile on both sides: nothing grew, and a low symptom asks no other answer.
    assert hot_path.check(jobs.context(_websocket_job(fast_profile="cpuset=0"))) == []


def test_the_seconds_a_hot_path_claims_never_exceed_the_slowdown_it_explains():
    # An echo server's handler thread and its client thread both sit in _echo: py-spy samples
    # every thread at the same instants, so the two threads' samples of the same 1.5 s
    # summed to 2.9 s "more per run" for a test 1.82 s slower.
    test = "test_echo.py::test_round_trips"

    def frame(samples: int, total: int) -> dict:
        pct = 100.0 * samples / total
        return {
            "function": "_echo",
            "file": "/app/echo.py",
            "line": 7,
            "own_samples": samples,
            "cumulative_samples": samples,
            "own_pct": pct,
            "cumulative_pct": pct,
        }

    def profile(per_thread: int, observed_s: float) -> dict:
        total = int(observed_s * 100) + 20
        return {
            "status": "ok",
            "rate_hz": 100,
            "samples": 2 * total,
            "run": {
                "run_id": 1,
                "wall_s": observed_s + 0.5,
                "observed_s": observed_s,
                "exit_code": 0,
                "timed_out": False,
            },
            "functions": [
                {"thread": "echo-server", "samples": total, "functions": [frame(per_thread, total)]},
                {"thread": "MainThread", "samples": total, "functions": [frame(per_thread - 5, total)]},
            ],
        }

    built = jobs.job(["python", "-m", "pytest", "-q"], labels=("cpuset=0", "cpuset=0-1"))
    medians = {"cpuset=0": 2.0, "cpuset=0-1": 0.18}
    for config in built.configs:
        for step in (0.0, 0.01, -0.01, 0.02, -0.02):
            jobs.timing_runs(
                config, [medians[config.label] + 0.5], cpu_share=0.95, tests={test: medians[config.label] + step}
            )
    slow, fast = built.configs
    jobs.evidence(built, slow, "pyspy", profile(150, 2.1), wall_s=2.6, test_id=test)
    jobs.evidence(built, fast, "pyspy", profile(8, 0.2), wall_s=0.7, test_id=test)
    [finding] = hot_path.check(jobs.context(built))
    slowdown = 2.0 - 0.18
    assert "_echo (echo.py:7)" in finding.title
    assert finding.metrics.stored()["accounts_s"] <= slowdown + 1e-9
    claimed = float(finding.title.split(" spends ")[1].split(" s more")[0])
    assert claimed <= round(slowdown, 3), finding.title
    # What the profile shows per thread is still there, not inflated: at most the test's duration.
    assert all(max(per.values()) <= 2.1 for per in finding.metrics.stored()["per_run_s"].values())
