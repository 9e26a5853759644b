"""What the timing screen alone shows: the symptoms the drill traces and evidence explains."""

from __future__ import annotations

from services.diagnose import cpu_sensitivity, cpu_throttling, latency_flaky, off_cpu_wait, slow_startup, tiny_reads
from services.diagnose.context import RuleContext
from services.diagnose.findings import SEVERITY_ORDER, FindingDraft, Severity

# Rules that need only the timing screen: what they find decides what the drill traces.
TIMING_RULES = (
    cpu_sensitivity.check,
    cpu_throttling.check,
    off_cpu_wait.check,
    latency_flaky.check,
    tiny_reads.check,
    slow_startup.check,
)


def screen_findings(context: RuleContext) -> list[FindingDraft]:
    """The timing rules' findings: the drill's targets."""
    return [draft for rule in TIMING_RULES for draft in rule(context)]


def symptomatic(context: RuleContext) -> set[str | None]:
    """The subjects (test ids; None for the whole command) that have a symptom worth
    explaining: a timing finding of medium severity or more, or, for the command, a
    median of at least ``drill_slow_command_s`` in even its fastest configuration. A low
    note, or a healthy program's start-up, asks for no cause."""
    subjects: set[str | None] = {
        draft.test_id
        for draft in screen_findings(context)
        if SEVERITY_ORDER[draft.severity] <= SEVERITY_ORDER[Severity.medium]
    }
    wall = context.samples.wall_summaries()
    if wall and min(summary.median for summary in wall.values()) >= context.thresholds.drill_slow_command_s:
        subjects.add(None)
    return subjects
