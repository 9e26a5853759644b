"""The confirm step's pieces on recorded numbers: two arms judged in pairs
(services/measure/sequential.py compare_arms), the knobs of each cause
(services/measure/confirm.py), and a diagnosis that keeps or drops its cause by the
experiment (services/diagnose/diagnoses.py)."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from services.diagnose.diagnoses import build_diagnoses
from services.diagnose.report_parts import ReportFinding
from services.evidence import ConfirmContent
from services.measure import confirm
from services.measure.sequential import DIFFERENT, SAME, UNDECIDED, SequentialRule, compare_arms
from services.models import JobConfig

RULE = SequentialRule(looks=8, change_ratio=1.2)


def test_a_knob_that_halves_the_time_is_decided_at_the_first_look_that_can_decide():
    rng = random.Random(7)
    treated = [0.30 * rng.uniform(0.9, 1.1) for _ in range(8)]
    control = [0.60 * rng.uniform(0.85, 1.15) for _ in range(8)]
    verdicts = [compare_arms(treated[:j], control[:j], RULE) for j in range(1, 9)]
    # 1 / C(2j, j) reaches half the 1 % level at j = 5 (1/252): no look before can decide.
    assert [v.verdict for v in verdicts[:4]] == [UNDECIDED] * 4
    fifth = verdicts[4]
    assert fifth.verdict == DIFFERENT and not fifth.slower, fifth
    assert 0.4 < fifth.ratio < 0.6 and fifth.ratio_low is not None and fifth.ratio_high < 1 / 1.2, fifth


def test_a_knob_that_changes_nothing_is_never_called_faster_beyond_the_level():
    """Under "the knob does nothing" the runs of both arms are exchangeable: over 2,000
    experiments of 8 pairs, stopped at the first look that decides, "faster with the
    knob" (a confirmation) at most at the rule's 1 % level, its one side."""
    rng = random.Random(11)
    confirmed = 0
    for _ in range(2000):
        treated = [rng.lognormvariate(0, 0.3) for _ in range(8)]
        control = [rng.lognormvariate(0, 0.3) for _ in range(8)]
        for pairs in range(1, 9):
            judgement = compare_arms(treated[:pairs], control[:pairs], RULE)
            if judgement.verdict != UNDECIDED:
                confirmed += judgement.verdict == DIFFERENT and not judgement.slower
                break
    assert confirmed / 2000 <= 0.01, confirmed


def test_arms_within_the_change_ratio_end_same_once_their_interval_says_so():
    rng = random.Random(3)
    treated = [1.0 * rng.uniform(0.98, 1.02) for _ in range(8)]
    control = [1.0 * rng.uniform(0.98, 1.02) for _ in range(8)]
    assert compare_arms(treated, control, RULE).verdict == SAME
    with pytest.raises(ValueError):
        compare_arms(treated[:3], control[:2], RULE)


def test_each_cause_s_knobs_and_those_with_none():
    quota, cores = JobConfig(label="cpus=0.5", cpus=0.5), JobConfig(label="cpuset=0-1", cpus=None)
    [gil] = confirm.knobs_for("gil_contention", cores)
    assert gil.name == "sys.setswitchinterval(0.0005)" and gil.shim and "setswitchinterval" in gil.shim
    pools, count = confirm.knobs_for("cpu_throttling", quota)
    # A half-core quota pays for one thread.
    assert pools.env["OPENBLAS_NUM_THREADS"] == "1" and pools.env["OMP_NUM_THREADS"] == "1", pools
    assert count.env["PYTHON_CPU_COUNT"] == "1" and count.shim and "os.cpu_count" in count.shim
    assert confirm.knobs_for("cpu_throttling", JobConfig(label="cpus=2.5", cpus=2.5))[0].env["MKL_NUM_THREADS"] == "2"
    # Throttling without a quota is no knob's, and a blocked loop is the code's own.
    assert confirm.knobs_for("cpu_throttling", cores) == []
    assert confirm.knobs_for("event_loop_blocked", cores) == []


def _finding(id_: int, kind: str, config: str) -> ReportFinding:
    return ReportFinding(
        id=id_,
        kind=kind,
        severity="high",
        title=f"{kind} title",
        detail="",
        config=config,
        test=None,
        metrics={},
        evidence=[10 + id_],
        fingerprint=str(id_),
        status="new",
        regression=False,
    )


def _tried(verdict: str, with_s: list[float], without_s: list[float]) -> ConfirmContent:
    return ConfirmContent(
        cause="gil_contention",
        test=None,
        knob="sys.setswitchinterval(0.0005)",
        says="the GIL's switch interval 0.5 ms instead of 5 ms",
        config="cpuset=0-1",
        verdict=verdict,
        with_s=with_s,
        without_s=without_s,
        ratio=sum(with_s) / sum(without_s),
        ratio_low=0.2,
        ratio_high=0.4,
    )


FINDINGS = [_finding(1, "cpu_sensitivity", "cpuset=0-1"), _finding(2, "gil_contention", "cpuset=0-1")]


def test_a_confirmed_cause_stays_and_says_what_its_knob_did():
    tried = _tried(confirm.CONFIRMED, [0.3] * 5, [1.2] * 5)
    [story] = build_diagnoses(FINDINGS, {11: "strace", 12: "gdb", 99: "confirm"}, [(99, tried)])
    assert story.cause is not None and story.cause.kind == "gil_contention"
    assert story.knob_confirmed is True and story.knob_evidence == 99 and 99 in [e.id for e in story.evidence]
    assert story.knob is not None and story.knob.startswith(
        "confirmed: with sys.setswitchinterval(0.0005) at cpuset=0-1, 0.300 s instead of 1.200 s"
    ), story.knob


def test_an_experiment_says_what_it_cost_against_the_tests_own_time():
    tried = _tried(confirm.CONFIRMED, [0.3] * 5, [1.2] * 5).model_copy(update={"runs": 10, "runs_s": 9.0})
    # 10 runs, 9.0 s of wall time in all, against the 1.2 s the test takes without the knob.
    assert confirm.describe(tried).endswith(", 5 pairs (10 runs, 9.000 s, 8x the test's time)"), confirm.describe(tried)
    assert "runs" not in confirm.describe(_tried(confirm.CONFIRMED, [0.3] * 5, [1.2] * 5)).split("pairs")[1]


def test_a_cause_its_knob_did_not_bear_out_is_not_established_never_a_guess():
    tried = _tried(confirm.NOT_CONFIRMED, [1.2] * 5, [1.2] * 5)
    [story] = build_diagnoses(FINDINGS, {11: "strace", 12: "gdb", 99: "confirm"}, [(99, tried)])
    assert story.cause is None and story.knob_confirmed is False
    assert story.not_established == "gil_contention's knob, turned, did not make it faster"
    assert story.knob is not None and story.knob.startswith("not confirmed: with sys.setswitchinterval(0.0005)")
    # No other cause is named in its place: the advice is the symptom's.
    assert "rerun with --evidence" in story.advice


def test_an_experiment_on_another_test_or_configuration_changes_nothing():
    for other in ({"test": "t.py::test_other"}, {"config": "cpus=0.5"}):
        tried = _tried(confirm.NOT_CONFIRMED, [1.2] * 5, [1.2] * 5).model_copy(update=other)
        [story] = build_diagnoses(FINDINGS, {}, [(99, tried)])
        assert story.cause is not None and story.knob is None and story.knob_confirmed is None


def test_a_slow_start_up_s_knobs_are_its_plugins_by_their_entry_point_names():
    metrics = {
        "slowest": [
            {"module": "hypothesis.internal.observability", "cumulative_s": 0.081, "self_s": 0.01},
            {"module": "faker.factory", "cumulative_s": 0.074, "self_s": 0.01},
            {"module": "coverage", "cumulative_s": 0.041, "self_s": 0.01},
            {"module": "hypothesis.strategies", "cumulative_s": 0.02, "self_s": 0.01},
        ]
    }
    modules = confirm.startup_modules(metrics)
    assert modules == ["hypothesis", "faker", "coverage"]
    # What PLUGINS_SCRIPT printed in the job's environment, among the job's own output,
    # which is not trusted: only well-formed lines for modules asked about count.
    output = (
        "lagtrace-plugin hypothesis hypothesispytest\n"
        "some warning the interpreter printed\n"
        "lagtrace-plugin faker faker\n"
        "lagtrace-plugin faker faker\n"
        "lagtrace-plugin os evil\n"
        "lagtrace-plugin faker no:x;rm -rf /\n"
    )
    plugins = confirm.read_plugins(output, modules)
    assert plugins == {"hypothesis": ["hypothesispytest"], "faker": ["faker"], "coverage": []}
    # Without the times, each plugin alone, then both together. coverage is no plugin's
    # module (pytest-cov imports it): no knob for it.
    knobs = confirm.plugin_knobs(plugins)
    together = ("-p", "no:hypothesispytest", "-p", "no:faker")
    assert [k.args for k in knobs] == [("-p", "no:hypothesispytest"), ("-p", "no:faker"), together]
    assert knobs[0].name == "-p no:hypothesispytest" and "hypothesis" in knobs[0].says
    assert knobs[2].says == "the 2 pytest plugins that import hypothesis, faker taken out"


def test_a_plugin_is_tried_alone_only_where_its_imports_alone_could_confirm():
    # The corpus's slow plugin start-up (examples/corpus/pytest_plugins): no plugin's
    # imports are a sixth of the 0.67 s run (what a 1.2x change needs), together they are.
    seconds = confirm.startup_seconds(
        {
            "slowest": [
                {"module": "hypothesis.internal.observability", "cumulative_s": 0.097},
                {"module": "faker.factory", "cumulative_s": 0.082},
                {"module": "coverage", "cumulative_s": 0.056},
                {"module": "pytest_httpserver.blocking_httpserver", "cumulative_s": 0.028},
            ]
        }
    )
    assert seconds == {"hypothesis": 0.097, "faker": 0.082, "coverage": 0.056, "pytest_httpserver": 0.028}
    plugins = {
        "hypothesis": ["hypothesispytest"],
        "faker": ["faker"],
        "coverage": [],
        "pytest_httpserver": ["httpserver"],
    }
    [knob] = confirm.plugin_knobs(plugins, seconds, run_s=0.67, change_ratio=1.2)
    assert knob.args == ("-p", "no:hypothesispytest", "-p", "no:faker", "-p", "no:httpserver")
    # A plugin holding 1.2 s of a 1.5 s run is tried alone first.
    slow = confirm.plugin_knobs({"slow": ["slow"], "faker": ["faker"]}, {"slow": 1.2, "faker": 0.08}, 1.5)
    assert [k.args for k in slow] == [("-p", "no:slow"), ("-p", "no:slow", "-p", "no:faker")]
    # Too little in all to change the run 1.2x: nothing to try.
    assert confirm.plugin_knobs(plugins, {m: 0.01 for m in plugins}, run_s=0.67) == []


def test_the_plugins_script_reads_the_entry_points_of_this_environment():
    # This interpreter's environment has pytest-xdist and pytest-timeout (make install-test).
    found = subprocess.run(
        [sys.executable, "-c", confirm.PLUGINS_SCRIPT, "xdist", "pytest_timeout", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    plugins = confirm.read_plugins(found, ["xdist", "pytest_timeout", "json"])
    assert "xdist" in plugins["xdist"] and plugins["pytest_timeout"] == ["timeout"] and plugins["json"] == []
