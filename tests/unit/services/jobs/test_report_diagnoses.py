"""The v1 report of an in-memory job: diagnoses, warm-up runs, the seed, notes on evidence."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from services.jobs.report import build_report
from services.jobs.report_text import render_text
from services.measure.probes.strace import parse_summary
from services.models import Finding, JobStatus, Project, RunKind, TriageStatus
from tests.unit.jobs import evidence, job, run

DATA = Path(__file__).resolve().parents[2] / "data"


def test_report_groups_a_jobs_findings_and_keeps_its_failures_visible():
    traced = run(8.0, kind=RunKind.evidence, probe="strace")
    built = job(
        {
            "cpuset=0": [run(9.0, kind=RunKind.warmup, repetition=0)] + [run(1.0)] * 5 + [traced],
            "cpuset=0-1": [run(0.05, exit_code=1, output_tail="boom")] * 5,
        },
        seed=1234,
    )
    built.project = Project(name="p")
    built.status = JobStatus.done
    built.created_at = dt.datetime(2026, 11, 22, tzinfo=dt.UTC)
    strace = evidence(traced, "strace")
    rows, total = parse_summary((DATA / "strace-handoff.txt").read_text())
    strace.content = {"syscalls": rows, "total": total, "top": "futex", "top_pct_time": 98.1}
    built.evidence = [strace]
    built.findings = [
        Finding(
            id=1,
            kind="command_failed",
            severity="high",
            title="The command failed in all 5 runs with cpuset=0-1",
            detail="boom",
            config_label="cpuset=0-1",
            metrics={},
            evidence_ids=[],
            fingerprint="f" * 64,
            status=TriageStatus.new,
            regression=False,
        )
    ]
    report = build_report(built)  # validated against the published v1 schema as it is built
    assert report.job.screen_seed == 1234
    first = report.configs[0]
    assert len(first.warmup_runs) == 1 and len(first.runs) == 5
    assert first.wall_s.median == 1.0  # the 9 s warm-up is not in it
    assert report.configs[1].wall_s is None  # nor are failed runs
    [note] = report.evidence[0].notes
    assert note.kind == "observer_effect" and note.ratio == 8.0
    [story] = report.diagnoses
    assert story.cause.kind == "command_failed" and story.severity == "high"
    text = render_text(report)
    assert "Findings: none" not in text and "Diagnoses (1" in text
    assert "note: The command ran 8.0x slower under strace" in text
