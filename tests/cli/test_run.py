"""`lagtrace run` end to end, as a user runs it: a process, real programs, real databases."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import time

import jsonschema
import pytest
from sqlalchemy import create_engine, func, select

from services.jobs.ledger import cpu_model
from services.jobs.report_schema import SCHEMA_FILE
from services.measure.configs import format_cpulist
from services.models import Job
from services.thresholds import Thresholds
from tests.conftest import EXAMPLES, PYTHON, REPO, run_cli
from tests.support.hidden_waits import BLOCKS_LOOP, POLLS, READS_BYTES, hidden_suite
from tests.web.conftest import build_dashboard

HANDOFF = [PYTHON, str(EXAMPLES / "handoff.py")]
STEADY = [PYTHON, str(EXAMPLES / "steady.py")]
CORES = ["--config", "cpuset=0", "--config", "cpuset=0-1"]


def jobs_stored(database_url: str) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return connection.scalar(select(func.count()).select_from(Job))
    except Exception:
        return 0  # no schema yet: nothing stored either
    finally:
        engine.dispose()


@pytest.mark.latency
def test_core_count_sensitive_program_is_flagged_and_stored(database_url, tmp_path):
    if database_url.startswith("postgresql"):
        assert run_cli(["migrate"], database_url).returncode == 0
    out = tmp_path / "out.json"
    result = run_cli(
        ["run", "--executor", "local", *CORES, "--repeat", "5", "--json", str(out), "--", *HANDOFF], database_url
    )
    assert result.returncode == 0, result.stderr
    report = result.report(out)

    assert report["schema"] == "lagtrace.report/v1"
    # The published JSON Schema is the contract a client reads: the report must satisfy it.
    jsonschema.validate(report, json.loads(SCHEMA_FILE.read_text()))
    assert report["command"] == HANDOFF and report["executor"] == "local"
    assert [c["label"] for c in report["configs"]] == ["cpuset=0", "cpuset=0-1"]
    for config in report["configs"]:
        assert 3 <= len(config["runs"]) <= 5
        assert set(config["wall_s"]) >= {"median", "ci_low", "ci_high"}
        for run in config["runs"]:
            assert set(run) >= {
                "wall_s",
                "user_s",
                "sys_s",
                "voluntary_ctx_switches",
                "involuntary_ctx_switches",
                "exit_code",
                "nr_periods",
                "nr_throttled",
                "throttled_s",
            }
            assert run["exit_code"] == 0
    one, two = (c["wall_s"] for c in report["configs"])
    # Each median beyond the other's interval: one run of the hand-off that happens to
    # finish fast on two cores (the rehearsal of 27 Nov: 0.060 s against one core's
    # slowest, 0.083 s) is noise the verdict's rank test absorbs, not a failure.
    assert two["median"] > one["ci_high"] and two["ci_low"] > one["median"]
    assert two["median"] / one["median"] >= 2

    [finding] = [f for f in report["findings"] if f["kind"] == "cpu_sensitivity"]
    assert finding["config"] == "cpuset=0-1" and finding["test"] is None
    assert finding["metrics"]["fast"]["config"] == "cpuset=0"
    assert finding["metrics"]["ratio"] == pytest.approx(two["median"] / one["median"])
    assert len(finding["fingerprint"]) == 64
    # The human report leads with the finding and cites the numbers.
    assert result.stdout.index("cpu_sensitivity") < result.stdout.index("Configurations")
    assert f"{finding['metrics']['ratio']:.1f}x" in result.stdout
    assert "cpuset=0-1: run 1/5" in result.stderr  # progress goes to stderr
    assert jobs_stored(database_url) == 1


@pytest.mark.latency
def test_program_that_only_waits_is_not_flagged(sqlite_url, tmp_path):
    out = tmp_path / "out.json"
    result = run_cli(
        # local: STEADY runs on this host's interpreter, which no container has (under the
        # docker executor every run failed, and the report used to call that healthy)
        [
            "run",
            "--executor",
            "local",
            *CORES,
            "--config",
            "cpus=0.5",
            "--repeat",
            "5",
            "--json",
            str(out),
            "--",
            *STEADY,
        ],
        sqlite_url,
    )
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    assert report["findings"] == []
    medians = [c["wall_s"]["median"] for c in report["configs"]]
    assert max(medians) / min(medians) < 1.5
    assert "Findings: none" in result.stdout


@pytest.mark.latency
def test_pytest_command_gets_one_entry_per_test_and_only_the_sensitive_test_is_flagged(sqlite_url, tmp_path):
    out = tmp_path / "out.json"
    suite = EXAMPLES / "pytest_suite"
    result = run_cli(
        # local: the command is this test's own interpreter, which no container has
        [
            "run",
            "--executor",
            "local",
            *CORES,
            "--repeat",
            "5",
            # Per-test verdicts are the timing screen's; the drill has tests of its own.
            "--evidence",
            "none",
            "--workdir",
            str(suite),
            "--json",
            str(out),
            "--",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_latency.py",
        ],
        sqlite_url,
    )
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    tests = {t["id"]: t for t in report["tests"]}
    assert set(tests) == {
        "test_latency.py::test_handoff_round_trips",
        "test_latency.py::test_waits_for_a_timer",
        "test_latency.py::test_small_computation",
    }
    for test in tests.values():
        assert [c["label"] for c in test["configs"]] == ["cpuset=0", "cpuset=0-1"]
        assert all(c["median"] is not None and len(c["runs"]) >= 3 for c in test["configs"])
    flagged = {f["test"] for f in report["findings"] if f["kind"] == "cpu_sensitivity"}
    assert "test_latency.py::test_handoff_round_trips" in flagged
    assert not flagged & {"test_latency.py::test_waits_for_a_timer", "test_latency.py::test_small_computation"}
    assert "test_latency.py::test_handoff_round_trips" in result.stdout


def test_failing_command_is_recorded_not_an_error(sqlite_url, tmp_path):
    out = tmp_path / "out.json"
    result = run_cli(
        [
            "run",
            "--config",
            "cpuset=0",
            "--repeat",
            "2",
            "--json",
            str(out),
            "--",
            "python3",
            "-c",
            "print('boom'); raise SystemExit(4)",
        ],
        sqlite_url,
    )
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    assert [r["exit_code"] for r in report["configs"][0]["runs"]] == [4, 4]
    assert "did not exit 0" in result.stdout and "boom" in result.stdout
    # Failure is never shown as health (docs/reference/findings.md, command_failed): a finding, with the exit code and output.
    [failed] = [f for f in report["findings"] if f["kind"] == "command_failed"]
    assert failed["severity"] == "high" and failed["metrics"]["exit_code"] == 4
    assert "boom" in failed["metrics"]["output_tail"]
    assert "Findings: none" not in result.stdout
    assert report["configs"][0]["wall_s"] is None  # failed runs are out of the medians


def test_a_job_stores_the_node_class_it_ran_on_and_the_thresholds_it_was_judged_with(sqlite_url, tmp_path):
    # Runs of one test compare only within one node class (services/jobs/node_class.py),
    # and a worker's thresholds come from its environment: the report names both.
    out = tmp_path / "out.json"
    env = {"LAGTRACE_THRESHOLDS__CPU_SENSITIVITY_RATIO": "3.5"}
    args = ["run", "--executor", "local", "--config", "cpuset=0", "--repeat", "2", "--json", str(out)]
    result = run_cli([*args, "--", "python3", "-c", "pass"], sqlite_url, env=env)
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    assert report["job"]["node_class"] == {
        "cpu_model": cpu_model(),
        "engine_cpus": format_cpulist(tuple(os.sched_getaffinity(0))),
        "runner_image": None,
    }
    assert set(report["thresholds"]) == set(Thresholds.model_fields)
    assert report["thresholds"]["cpu_sensitivity_ratio"] == 3.5
    assert report["thresholds"]["survey_ratio"] == Thresholds().survey_ratio


def test_a_pytest_that_is_not_installed_is_command_failed_not_health(sqlite_url, tmp_path):
    out = tmp_path / "out.json"
    result = run_cli(
        # an interpreter without pytest: every run exits 1, no test runs
        [
            "run",
            "--executor",
            "local",
            "--config",
            "cpuset=0",
            "--repeat",
            "3",
            "--json",
            str(out),
            "--",
            "/usr/bin/python3",
            "-I",
            "-m",
            "pytest",
            "-q",
        ],
        sqlite_url,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    [failed] = [f for f in report["findings"] if f["kind"] == "command_failed"]
    assert failed["metrics"]["exit_code"] == 1 and "No module named pytest" in failed["detail"]
    assert "Findings: none" not in result.stdout
    [story] = report["diagnoses"]
    assert story["cause"]["kind"] == "command_failed"


@pytest.mark.latency
def test_a_healthy_suite_of_forty_fast_tests_gets_a_report(sqlite_url, tmp_path):
    # Most of these tests take under 1 ms (JUnit says 0.000 or 0.001): lagtrace crashed on
    # them with a ZeroDivisionError in latency_flaky (docs/measurements/accuracy.md), and ratios to 0.000 s
    # came out as "infx slower".
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_fast.py").write_text(
        "import time\n\n"
        + "\n".join(f"def test_fast_{i:02d}():\n    time.sleep({i * 0.00003:.5f})\n" for i in range(40))
    )
    out = tmp_path / "out.json"
    result = run_cli(
        [
            "run",
            "--executor",
            "local",
            "--evidence",
            "none",
            "--workdir",
            str(suite),
            "--json",
            str(out),
            "--",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_fast.py",
        ],
        sqlite_url,
    )
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    assert len(report["tests"]) == 40
    # Forty tests is a suite of real size: its survey clears them all (no configuration is
    # 10 ms from another in any test), so one whole-suite run per configuration is all.
    assert report["survey"] == {"tests": 40, "cleared": 40, "focused": [], "left_out": []}
    assert all(len(c["runs"]) == 1 and not c["focus_runs"] for c in report["configs"])
    assert not [f for f in report["findings"] if f["severity"] in ("medium", "high")], result.stdout
    assert "inf" not in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config", "cpuset=7", "--", "true"], "does not exist on this machine"),
        (["--config", "cpus=0", "--", "true"], "positive number"),
        (["--config", "cpus=-2", "--", "true"], "positive number"),
        (["--config", "cpus=lots", "--", "true"], "not a number"),
        (["--config", "gpus=1", "--", "true"], "unknown key"),
        (["--repeat", "0", "--", "true"], "--repeat must be at least 1"),
        (["--timeout", "0", "--", "true"], "--timeout must be a positive"),
        (["--budget", "0", "--", "true"], "--budget must be a positive number of seconds"),
        (["--budget", "-60", "--", "true"], "--budget must be a positive number of seconds"),
        (["--budget", "nan", "--", "true"], "--budget must be a positive number of seconds"),
        (["--budget", "an-hour", "--", "true"], "Invalid value for '--budget'"),
        ([], "no command given"),
        (["--workdir", "/does/not/exist", "--", "true"], "does not exist"),
        (["--", "no-such-program-anywhere"], "not found on PATH"),
        (["--executor", "teleport", "--", "true"], "Invalid value for '--executor'"),
        (["--kind", "nightly", "--", "true"], "Invalid value for '--kind'"),
    ],
)
def test_bad_input_exits_2_with_a_message_and_stores_nothing(sqlite_url, args, message):
    result = run_cli(["run", *args], sqlite_url)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr
    assert jobs_stored(sqlite_url) == 0


def test_run_waits_for_the_node_lock_and_says_so(sqlite_url, tmp_path):
    """`lagtrace run` holds the same node lock as a service worker: while another
    measurement holds it, nothing is run."""
    work_dir, locks = tmp_path / "work", tmp_path / "node-locks"
    locks.mkdir()
    out = tmp_path / "out.json"
    # The node's lock is the directory LAGTRACE_NODE_LOCK_PATH itself (flock needs no write there).
    held = os.open(locks, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        options = ["--executor", "local", "--config", "cpuset=0", "--repeat", "1", "--evidence", "none"]
        process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "run", *options, "--json", str(out), "--", *STEADY],
            cwd=REPO,
            env={
                **os.environ,
                "LAGTRACE_DATABASE_URL": sqlite_url,
                "LAGTRACE_WORK_DIR": str(work_dir),
                "LAGTRACE_NODE_LOCK_PATH": str(locks),
            },
            stderr=subprocess.PIPE,
            text=True,
        )
        said = ""
        while "waiting for another measurement" not in said:
            line = process.stderr.readline()
            assert line, f"lagtrace run ended without waiting: {said}"
            said += line
        time.sleep(0.5)
        assert process.poll() is None and not out.exists()
        assert "run 1/1" not in said
    finally:
        os.close(held)
    _, rest = process.communicate(timeout=120)
    assert process.returncode == 0, said + rest
    assert "cpuset=0: run 1/1" in rest


SUITE_OF_REAL_SIZE = """
import sys
import time

import pytest

sys.path.insert(0, {examples!r})

from handoff import round_trips


@pytest.mark.parametrize("n", range(28))
def test_quick(n):
    assert sum(range(n * 100)) >= 0


def test_waits_for_a_timer():
    time.sleep(0.05)


def test_handoff_round_trips():
    # Slow on two cores, fast on one: the one test the survey must keep. A 20 ms switch
    # interval keeps it so beside a neighbour on CPU 0: at the default 5 ms, that neighbour
    # moved every thread onto CPU 1 and the two-core median fell to the one core's (0.011
    # against 0.012 s over 10 runs), at 20 ms it stayed 0.40-0.54 s against 0.026-0.033 s.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.02)
    try:
        assert round_trips(50) > 0
    finally:
        sys.setswitchinterval(interval)
"""


@pytest.mark.latency
def test_a_suite_of_real_size_is_surveyed_and_only_what_it_keeps_is_rerun(sqlite_url, tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_many.py").write_text(SUITE_OF_REAL_SIZE.format(examples=str(EXAMPLES)))
    out = tmp_path / "out.json"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_many.py"]
    result = run_cli(
        [
            "run",
            "--executor",
            "local",
            *CORES,
            "--repeat",
            "5",
            "--evidence",
            "none",
            "--workdir",
            str(suite),
            "--json",
            str(out),
            "--",
            *command,
        ],
        sqlite_url,
    )
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    survey = report["survey"]
    sensitive = "test_many.py::test_handoff_round_trips"
    assert survey["tests"] == 30 and sensitive in survey["focused"]
    assert survey["cleared"] == 30 - len(survey["focused"]) >= 20, survey
    # The survey is the command's record: one whole-suite run per configuration, no more.
    for config in report["configs"]:
        assert len(config["runs"]) == 1 and config["warmup_runs"] == []
        assert 1 <= len(config["focus_runs"]) <= 5
    tests = {test["id"]: test for test in report["tests"]}
    assert len(tests) == 30  # the JSON keeps every test, cleared ones with their one run each
    cleared = [test for test in tests.values() if test["cleared"]]
    assert len(cleared) == survey["cleared"] and all(len(c["runs"]) == 1 for t in cleared for c in t["configs"])
    assert all(len(c["runs"]) >= 5 for c in tests[sensitive]["configs"])  # the same statistics as a whole screen
    flagged = {f["test"] for f in report["findings"] if f["kind"] == "cpu_sensitivity"}
    assert flagged == {sensitive}
    assert "the survey ran it whole once per configuration" in result.stdout
    # The text report lists the flagged test and the 5 slowest others, then counts the rest.
    with_findings = {f["test"] for f in report["findings"] if f["test"]}
    assert f"{30 - len(with_findings)} tests cleared ({survey['cleared']} by the survey alone" in result.stdout
    assert "not listed here: `--all` lists every test" in result.stdout


SUITE_WITH_HIDDEN_WAITS = hidden_suite(20, POLLS, READS_BYTES, BLOCKS_LOOP)


@pytest.mark.latency
def test_a_census_of_a_surveyed_suite_names_the_test_that_polls_the_one_that_reads_bytes_and_the_one_that_blocks_its_loop(
    sqlite_url, tmp_path
):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_hidden.py").write_text(SUITE_WITH_HIDDEN_WAITS)
    out = tmp_path / "out.json"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_hidden.py"]
    result = run_cli(
        [
            "run",
            "--executor",
            "local",
            *CORES,
            "--repeat",
            "5",
            "--workdir",
            str(suite),
            "--json",
            str(out),
            "--",
            *command,
        ],
        sqlite_url,
    )
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    assert report["survey"]["tests"] == 24
    [census] = [e for e in report["evidence"] if e["kind"] == "census"]
    # The census rode on the survey's run (its tracer the only cost), not a run of its own.
    assert not [run for run in report["evidence_runs"] if run["probe"] == "census"]
    counted = census["content"]["tests"]
    assert counted["test_hidden.py::test_polls"]["sleeps"] >= 300
    assert counted["test_hidden.py::test_reads_a_byte_at_a_time"]["reads"]["socket"]["reads"] == 30000
    assert all(row["sleeps"] < 5 for test, row in counted.items() if "filler" in test)  # each test its own calls
    # Each test's own work and waiting, and the time callbacks held its event loop.
    blocks, awaits = counted["test_hidden.py::test_blocks_its_loop"], counted["test_hidden.py::test_awaits_its_wait"]
    assert blocks["loop_blocked_s"] >= 0.19 and blocks["cpu_s"] < blocks["wall_s"] / 2, blocks
    assert awaits.get("loop_blocked_s") is None and awaits["wall_s"] >= 0.2, awaits
    assert census["content"]["suspects"] == [
        "test_hidden.py::test_polls",
        "test_hidden.py::test_reads_a_byte_at_a_time",
        "test_hidden.py::test_blocks_its_loop",
    ], census["content"]["suspects"]
    polling = [f for f in report["findings"] if f["kind"] == "busy_polling"]
    assert [f["test"] for f in polling] == ["test_hidden.py::test_polls"], report["findings"]
    tiny = [f for f in report["findings"] if f["kind"] == "tiny_reads" and f["severity"] == "medium"]
    assert [f["test"] for f in tiny] == ["test_hidden.py::test_reads_a_byte_at_a_time"], report["findings"]
    # Flat across configurations, no CPU: only the census saw it, and the drill named it.
    blocked = [f for f in report["findings"] if f["kind"] == "event_loop_blocked"]
    assert [f["test"] for f in blocked] == ["test_hidden.py::test_blocks_its_loop"], report["findings"]
    assert blocked[0]["severity"] in ("medium", "high") and "mostly in main" in blocked[0]["title"], blocked
    # The census's page says so too.
    dashboard = build_dashboard(sqlite_url, tmp_path / "web", run_jobs=False, migrated=True)
    try:
        dashboard.add_user("ada", [report["job"]["project"]])
        dashboard.sign_in("ada")
        html = dashboard.page(f"/evidence/{census['id']}")
    finally:
        dashboard.engine.dispose()
    blocked_line = r"<code>test_hidden.py::test_blocks_its_loop</code>: its event loop blocked 2\d\d\.\d ms of "
    assert re.search(blocked_line, html), html


# Hangs (sleeps far past the timeout) only where it is given a single CPU.
HANGS_ON_ONE_CPU = "import os, time; time.sleep(600 if len(os.sched_getaffinity(0)) == 1 else 0.05)"


def hang_options(timeout_s: float, out) -> list[str]:
    """`lagtrace run` in two configurations, five repetitions, no evidence; the command follows."""
    options = ["--repeat", "5", "--timeout", f"{timeout_s:g}", "--evidence", "none", "--json", str(out)]
    return ["run", "--executor", "local", *CORES, *options, "--"]


def test_a_configuration_that_hangs_costs_one_timeout_and_the_report_names_it(sqlite_url, tmp_path):
    """docs/guides/reliability.md, every run ends: a hung configuration used to be rerun (warm-up, then every repetition up to
    min_repetitions), each run waiting out the whole timeout."""
    out, timeout_s = tmp_path / "out.json", 2.0
    started = time.monotonic()
    result = run_cli(
        [*hang_options(timeout_s, out), PYTHON, "-c", HANGS_ON_ONE_CPU],
        sqlite_url,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    runs = {config["label"]: config["runs"] for config in report["configs"]}
    print(f"\none configuration hangs ({timeout_s:g} s timeout, repeat 5): lagtrace run took {elapsed:.1f} s")
    # One run, the hung one, kept as its measurement; the healthy configuration is screened in full.
    [hung] = runs["cpuset=0"]
    assert hung["timed_out"] and hung["wall_s"] >= timeout_s
    assert len(runs["cpuset=0-1"]) >= 3 and not any(run["timed_out"] for run in runs["cpuset=0-1"])
    assert any(note.startswith("cpuset=0 hung:") for note in report["notes"]), report["notes"]
    [failed] = [f for f in report["findings"] if f["kind"] == "command_failed"]
    assert failed["config"] == "cpuset=0" and failed["metrics"]["timed_out"] == 1


def test_a_suite_that_hangs_everywhere_ends_after_one_timeout_per_configuration(sqlite_url, tmp_path):
    out, timeout_s = tmp_path / "out.json", 2.0
    started = time.monotonic()
    result = run_cli(
        [*hang_options(timeout_s, out), "sleep", "600"],
        sqlite_url,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    print(f"\nsleep 600 in 2 configurations ({timeout_s:g} s timeout, repeat 5): lagtrace run took {elapsed:.1f} s")
    assert {config["label"]: len(config["runs"]) for config in report["configs"]} == {"cpuset=0": 1, "cpuset=0-1": 1}
    assert all(config["runs"][0]["timed_out"] for config in report["configs"])
    assert sorted(note.split(" hung:")[0] for note in report["notes"] if " hung:" in note) == ["cpuset=0", "cpuset=0-1"]
    [failed] = [f for f in report["findings"] if f["kind"] == "command_failed"]
    assert "timed out in all 2 runs in every configuration" in failed["title"]


# A suite with two tests slower on one core than on two: one cheap and 50x apart, one
# costly and 1.5x apart (the least suspicious), among fillers the survey clears.
SUITE_FOR_A_BUDGET = """
import os
import time

import pytest

ONE_CORE = len(os.sched_getaffinity(0)) == 1


@pytest.mark.parametrize("n", range(22))
def test_filler(n):
    time.sleep(0.002)


def test_cheap_and_far_apart():
    time.sleep(0.2 if ONE_CORE else 0.004)


def test_costly_and_close():
    time.sleep({costly_s} * (1.5 if ONE_CORE else 1.0))
"""


@pytest.mark.latency
def test_a_tiny_budget_screens_the_most_suspicious_test_and_names_what_it_left_out(sqlite_url, tmp_path):
    """docs/explanations/cost-model.md: the budget is spent on the most suspicious tests first. The survey costs
    about 6 s; the cheap test's five focused rounds about 5 s more; the costly one's
    another 30 s, which a 20 s budget cannot hold."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_budget.py"]

    def screen(*budget: str, costly_s: float = 2.0) -> dict:
        suite = tmp_path / f"suite{len(budget)}"
        suite.mkdir()
        (suite / "test_budget.py").write_text(SUITE_FOR_A_BUDGET.replace("{costly_s}", repr(costly_s)))
        out = tmp_path / f"out{len(budget)}.json"
        options = ["--repeat", "5", "--evidence", "none", "--workdir", str(suite), "--json", str(out)]
        result = run_cli(["run", "--executor", "local", *CORES, *options, *budget, "--", *command], sqlite_url)
        assert result.returncode == 0, result.stderr
        return {**result.report(out), "text": result.stdout}

    report = screen("--budget", "20")
    jsonschema.validate({k: v for k, v in report.items() if k != "text"}, json.loads(SCHEMA_FILE.read_text()))
    cheap, costly = "test_budget.py::test_cheap_and_far_apart", "test_budget.py::test_costly_and_close"
    assert report["survey"]["focused"] == [cheap]
    assert report["survey"]["left_out"] == [costly]
    assert report["budget"]["given"] and report["budget"]["limit_s"] == 20
    assert report["budget"]["left_out"]["tests"] == [costly]
    [left] = [test for test in report["tests"] if test["id"] == costly]
    assert left["left_out"] and not left["cleared"]
    assert [f["test"] for f in report["findings"] if f["kind"] == "cpu_sensitivity"] == [cheap]
    assert "left out of the focused screen" in report["text"] and costly in report["text"]

    # Without a budget (the default: at least 300 s) both are screened. The costly test is
    # still 1.5x apart, only shorter: unbounded, its cost plays no part, and 25 s of
    # focused rounds would only lengthen the serial tier.
    unbounded = screen(costly_s=0.4)
    assert unbounded["survey"]["focused"] == [cheap, costly] and unbounded["survey"]["left_out"] == []
    assert not unbounded["budget"]["given"] and unbounded["budget"]["limit_s"] >= 300


def test_a_budget_below_the_first_round_stops_a_command_after_it(sqlite_url, tmp_path):
    """A command screened whole: its warm-ups always run (they measure it), then nothing
    that would pass the budget; the report says which runs it left out."""
    out = tmp_path / "out.json"
    options = ["--repeat", "5", "--evidence", "none", "--budget", "0.5", "--json", str(out)]
    result = run_cli(
        ["run", "--executor", "local", *CORES, *options, "--", PYTHON, "-c", "import time; time.sleep(0.3)"],
        sqlite_url,
    )
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    assert all(config["runs"] == [] for config in report["configs"])
    assert [len(config["warmup_runs"]) for config in report["configs"]] == [1, 1]
    assert report["budget"]["left_out"]["rounds"] == ["runs 1-5 of cpuset=0, cpuset=0-1"]
    assert "Budget: the runs took" in result.stdout and "runs 1-5 of cpuset=0, cpuset=0-1" in result.stdout


# Busy all the time on CPU 0: a run pinned there gets half the core, the neighbour the
# other half (about 0.5 CPUs of foreign work per run).
BUSY_ON_CPU_0 = """
import os
os.sched_setaffinity(0, {0})
while True:
    pass
"""


@pytest.mark.latency
def test_a_run_beside_a_busy_neighbour_is_kept_apart_and_taken_again(sqlite_url, tmp_path):
    out = tmp_path / "out.json"
    neighbour = subprocess.Popen([sys.executable, "-c", BUSY_ON_CPU_0])
    try:
        command = [sys.executable, "-c", "sum(range(10_000_000))"]
        run_args = ["run", "--executor", "local", "--config", "cpuset=0", "--repeat", "5", "--evidence", "none"]
        result = run_cli([*run_args, "--json", str(out), "--", *command], sqlite_url)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert result.returncode == 0, result.stderr
    report = result.report(out)
    [config] = report["configs"]
    disturbed = config["disturbed_runs"]
    # A run beside the neighbour is disturbed and taken again, twice in a row; still
    # disturbed, the neighbour stayed, and no further run is taken again. The statistics
    # keep their 5 timed runs.
    assert disturbed, [run["foreign_cpus"] for run in config["runs"]]
    assert all(run["foreign_cpus"] > 0.3 for run in disturbed)
    assert 2 <= len(disturbed) <= 12
    assert len(config["runs"]) == 5
    [note] = [note for note in report["notes"] if "taken again" in note]
    assert note.startswith(f"{len(disturbed)} timed run(s) taken again") and "the neighbour stayed" in note, note
    assert "taken again" in result.stderr
