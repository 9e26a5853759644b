"""One diagnosis per test, from report findings."""

from __future__ import annotations

from services.diagnose.diagnoses import build_diagnoses, render
from services.diagnose.report_parts import DiagnosisEvidence, ReportFinding
from tests.metrics_support import cpu_sensitivity


def finding(id, kind, severity, test=None, config=None, evidence=(), **metrics):
    return ReportFinding(
        id=id,
        kind=kind,
        severity=severity,
        title=f"{kind} title",
        detail="",
        config=config,
        test=test,
        metrics=metrics,
        evidence=list(evidence),
        fingerprint="f" * 64,
        status="new",
        regression=False,
    )


# cpu_sensitivity's metrics whole: a partial shape is kept as stored, and its story falls
# back to the finding's title.
SENSITIVE = cpu_sensitivity(("cpuset=0-1", 5.4), ("cpuset=0", 0.45)).stored()


def test_a_tests_findings_become_one_story_with_the_evidence_backed_cause():
    findings = [
        finding(1, "cpu_sensitivity", "high", test="t::handoff", config="cpuset=0-1", **SENSITIVE),
        finding(2, "futex_storm", "medium", test="t::handoff", config="cpuset=0-1", evidence=[10]),
        finding(3, "gil_contention", "high", test="t::handoff", config="cpuset=0-1", evidence=[11, 10]),
        finding(4, "latency_flaky", "low", test="t::other", config="cpuset=0"),
    ]
    evidence = {10: "strace", 11: "gdb"}
    first, second = build_diagnoses(findings, evidence)
    assert first.test == "t::handoff" and first.severity == "high"
    assert first.symptom.text == "12.0x slower with cpuset=0-1 than with cpuset=0 (5.400 s vs 0.450 s median)"
    assert first.cause.kind == "gil_contention" and first.cause.evidence_backed
    assert first.evidence == [DiagnosisEvidence(id=10, kind="strace"), DiagnosisEvidence(id=11, kind="gdb")]
    assert "process pool" in first.advice
    assert first.findings == [1, 2, 3]
    assert second.test == "t::other" and second.cause is None
    assert "hidden state" not in second.advice and "Rerun with --evidence core" in second.advice


def test_a_test_slow_where_the_whole_command_is_throttled_borrows_that_cause():
    findings = [
        finding(1, "cpu_throttling", "medium", config="cpus=0.5"),
        finding(2, "cpu_sensitivity", "low", test="t::pool", config="cpus=0.5", **SENSITIVE),
    ]
    by_test = {d.test: d for d in build_diagnoses(findings, {})}
    assert by_test["t::pool"].cause.kind == "cpu_throttling" and by_test["t::pool"].cause.from_command
    assert by_test[None].cause.kind == "cpu_throttling"


def test_command_failed_is_the_story_of_the_command():
    [story] = build_diagnoses([finding(1, "command_failed", "high")], {})
    assert story.cause.kind == "command_failed" and "output tail" in story.advice
    text = "\n".join(render([story]))
    assert "HIGH   the whole command" in text and "found:    command_failed" in text
    assert "symptom:" not in text  # one finding is both: said once


def test_the_cause_is_what_differs_between_the_slow_and_the_fast_configuration():
    compared = "in cpuset=0-1 a thread waited for the GIL in 19 of 20 samples; in cpuset=0, 0 of 20"
    findings = [
        finding(1, "cpu_sensitivity", "high", test="t::handoff", config="cpuset=0-1", **SENSITIVE),
        # 82 % of the samples sit in the computing thread in both configurations: no difference.
        finding(2, "hot_path", "medium", test="t::handoff", evidence=[10], accounts_s=0.0),
        finding(3, "gil_contention", "high", test="t::handoff", evidence=[11], accounts_s=4.6, slow_vs_fast=compared),
        finding(4, "off_cpu_wait", "low", test="t::handoff", evidence=[12]),
    ]
    [story] = build_diagnoses(findings, {})
    assert story.cause.kind == "gil_contention"
    assert story.cause.accounts_s == 4.6 and story.cause.slow_vs_fast == compared
    text = "\n".join(render([story]))
    assert f"compared: {compared} (accounts for 4.600 s)" in text


def test_a_cause_that_accounts_for_more_time_wins_over_the_catalogues_order():
    findings = [
        finding(1, "cpu_sensitivity", "high", test="t", config="cpus=0.5", **SENSITIVE),
        finding(2, "tiny_reads", "medium", test="t", evidence=[10], accounts_s=0.2),
        finding(3, "cpu_throttling", "high", test="t", config="cpus=0.5", accounts_s=3.1),
    ]
    [story] = build_diagnoses(findings, {})
    assert story.cause.kind == "cpu_throttling"


def test_the_gil_explains_a_futex_storm_whatever_each_accounts_for():
    findings = [
        finding(1, "cpu_sensitivity", "high", test="t", config="cpuset=0-1", **SENSITIVE),
        finding(2, "futex_storm", "medium", test="t", evidence=[10], accounts_s=4.0),
        finding(3, "gil_contention", "high", test="t", evidence=[11], accounts_s=2.5),
    ]
    [story] = build_diagnoses(findings, {})
    assert story.cause.kind == "gil_contention"


def test_evidence_that_does_not_differ_names_no_cause():
    findings = [
        finding(1, "cpu_sensitivity", "high", test="t", config="cpuset=0-1", **SENSITIVE),
        finding(2, "hot_path", "medium", test="t", evidence=[10], accounts_s=0.0),
        finding(3, "futex_storm", "medium", test="t", evidence=[11], accounts_s=-0.3),
    ]
    [story] = build_diagnoses(findings, {})
    assert story.cause is None
    assert story.not_established == (
        "the slow and the fast configuration's evidence do not differ (futex_storm, hot_path)"
    )
    assert "cause:    not established: the slow and the fast" in "\n".join(render([story]))


def test_no_findings_no_diagnoses():
    assert build_diagnoses([], {}) == [] and render([]) == []


def test_the_configuration_slowdown_is_the_symptom_whatever_the_severity_order():
    findings = [
        finding(1, "latency_flaky", "medium", config="cpuset=0-1"),
        finding(2, "cpu_sensitivity", "low", config="cpuset=0-1", **SENSITIVE),
    ]
    [story] = build_diagnoses(findings, {})
    assert story.symptom.kind == "cpu_sensitivity" and story.severity == "medium"


def test_where_the_cpu_time_grew_is_the_cause_only_where_no_mechanism_is_found():
    grew = finding(2, "hot_path", "low", test="t", evidence=[10], accounts_s=0.9)
    symptom = finding(1, "cpu_sensitivity", "high", test="t", config="cpuset=0-1", **SENSITIVE)
    # A computing thread runs as long as the others queue: its growth is a consequence.
    reads = finding(3, "tiny_reads", "medium", test="t", evidence=[11])
    [story] = build_diagnoses([symptom, grew, reads], {})
    assert story.cause.kind == "tiny_reads"
    # Alone, it is the answer, ahead of a stall or an off-CPU share.
    stall = finding(4, "stall", "medium", test="t", evidence=[12])
    [story] = build_diagnoses([symptom, grew, stall], {})
    assert story.cause.kind == "hot_path" and story.cause.accounts_s == 0.9


def test_a_failing_test_of_the_suite_is_never_another_tests_cause():
    # A real suite run with `pytest -n 2`, one unrelated test failing: the diagnoses of its
    # slow tests named `command_failed (found on the whole command)` as their cause.
    findings = [
        finding(1, "command_failed", "high"),
        finding(2, "cpu_sensitivity", "medium", test="t::slow", config="cpus=0.5", **SENSITIVE),
        finding(3, "hot_path", "low", evidence=[10], accounts_s=1.0),
        finding(4, "cpu_throttling", "medium", config="cpuset=0"),
    ]
    by_test = {d.test: d for d in build_diagnoses(findings, {})}
    assert by_test["t::slow"].cause is None
    assert "found on the whole command" not in "\n".join(render(list(by_test.values())))
    assert by_test[None].cause.kind == "command_failed"


def test_three_seconds_of_a_blocked_loop_outweigh_a_measured_sixtieth_of_throttling():
    findings = [
        finding(1, "cpu_sensitivity", "medium", test="t", config="cpus=0.5", **SENSITIVE),
        finding(2, "cpu_throttling", "medium", test="t", config="cpus=0.5", accounts_s=0.06),
        finding(3, "event_loop_blocked", "medium", test="t", evidence=[10], accounts_s=3.0, blocked_s=3.0),
    ]
    [story] = build_diagnoses(findings, {})
    assert story.cause.kind == "event_loop_blocked" and story.cause.accounts_s == 3.0
    # The catalogue's order breaks a tie only: equal seconds, the more specific kind.
    findings[2].metrics["accounts_s"] = 0.06
    [story] = build_diagnoses(findings, {})
    assert story.cause.kind == "event_loop_blocked"
    findings[2].metrics["accounts_s"] = 0.05
    [story] = build_diagnoses(findings, {})
    assert story.cause.kind == "cpu_throttling"
