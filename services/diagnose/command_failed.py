"""command_failed: the command failed or timed out in every run of a configuration.

Such a configuration measured nothing; its runs are left out of every statistic, so
without this finding the report would show "no findings" over runs that all exited 1
(failure shown as health). One finding per job, naming every such configuration.
"""

from __future__ import annotations

import statistics
from collections import Counter

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity
from services.models import Run

TAIL_LINES = 20
TESTS_NAMED = 5


def check(context: RuleContext) -> list[FindingDraft]:
    failing: dict[str, list[Run]] = {}
    for config in context.job.configs:
        runs = context.all_timing_runs(config)
        if runs and not context.timing_runs(config):
            failing[config.label] = runs
    if not failing:
        return []
    runs = [run for per_config in failing.values() for run in per_config]
    timed_out = sum(run.timed_out for run in runs)
    codes = Counter(run.exit_code for run in runs if not run.timed_out)
    ended = ([f"timed out {timed_out}x"] if timed_out else []) + [
        f"exit {code} ({count}x)" for code, count in codes.most_common()
    ]
    last = next((run for run in reversed(runs) if run.output_tail), runs[-1])
    tail = "\n".join((last.output_tail or "").rstrip().splitlines()[-TAIL_LINES:])
    failed_tests = sorted({r.test_id for run in runs for r in run.test_results if r.outcome in ("failed", "error")})
    passed_tests = {r.test_id for run in runs for r in run.test_results if r.outcome == "passed"}
    everywhere = len(failing) == len(context.job.configs)
    where = "in every configuration" if everywhere else "with " + ", ".join(failing)
    verb = "timed out" if timed_out == len(runs) else "failed"
    detail = [
        f"No run succeeded {where} ({', '.join(ended)}), so the command's latency there was not "
        f"measured and nothing else is judged from those runs."
    ]
    if failed_tests:
        named = ", ".join(failed_tests[:TESTS_NAMED]) + (
            f" and {len(failed_tests) - TESTS_NAMED} more" if len(failed_tests) > TESTS_NAMED else ""
        )
        detail.append(f"Failing tests: {named}; the passing tests' durations are still judged.")
    detail.append(f"Last output:\n{tail}" if tail else "The command printed nothing.")
    return [
        FindingDraft(
            kind="command_failed",
            # Nothing at all was measured: the report must not look like a clean bill.
            severity=Severity.medium if passed_tests else Severity.high,
            title=f"The command {verb} in all {len(runs)} runs {where}",
            detail=" ".join(detail),
            config_label=None if everywhere else next(iter(failing)),
            metrics={
                # No run measured anything but the failure: each run's whole time is its.
                "accounts_s": statistics.median(run.wall_s for run in runs),
                "configs": {label: len(per_config) for label, per_config in failing.items()},
                "runs": len(runs),
                "timed_out": timed_out,
                "exit_codes": {str(code): count for code, count in codes.items()},
                "exit_code": codes.most_common(1)[0][0] if codes else None,
                "failed_tests": failed_tests,
                "output_tail": tail,
            },
        )
    ]
