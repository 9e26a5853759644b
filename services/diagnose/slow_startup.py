"""slow_startup: interpreter start-up, imports or test collection take much of the run.

Two sources: for pytest commands, each timing run's wall time minus the time its tests
took (start-up, plugin loading, collection); for any Python command that was drilled,
the `-X importtime` evidence, which also names the slowest imports.
"""

from __future__ import annotations

import statistics

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity
from services.measure import pytest_command as junit


def check(context: RuleContext) -> list[FindingDraft]:
    return _from_imports(context) or _from_pytest(context)


def _from_imports(context: RuleContext) -> list[FindingDraft]:
    limits = context.thresholds
    for evidence in context.evidence("imports"):
        if evidence.test_id is not None or evidence.config is None:
            continue
        median = context.timing_median(evidence.config.label, None)
        total = evidence.content.get("total_import_s", 0.0)
        if not median or total < limits.slow_startup_min_s or total < limits.slow_startup_share * median:
            continue
        slowest = evidence.content.get("slowest", [])[:3]
        return [
            FindingDraft(
                kind="slow_startup",
                severity=Severity.medium if total >= 0.75 * median else Severity.low,
                title=f"Imports take {total:.2f} s of a {median:.2f} s run",
                detail=(
                    f"-X importtime ({evidence.config.label}): top-level imports took {total:.3f} s in all, against a "
                    f"timing median of {median:.3f} s ({total / median:.0%}); slowest: "
                    + ", ".join(f"{entry['module']} {entry['cumulative_s']:.3f} s" for entry in slowest)
                    + ". Defer the heavy import or the work it does at import time"
                ),
                config_label=evidence.config.label,
                metrics={
                    "import_s": total,
                    "timing_median_s": median,
                    "share": total / median,
                    "slowest": evidence.content.get("slowest", []),
                },
                evidence_ids=[evidence.id],
            )
        ]
    return []


def _from_pytest(context: RuleContext) -> list[FindingDraft]:
    if not junit.is_pytest(context.job.command):
        return []
    limits = context.thresholds
    worst = None
    for config in context.job.configs:
        overheads, shares = [], []
        for run in context.timing_runs(config):
            if not run.test_results or run.wall_s <= 0:
                continue
            overhead = run.wall_s - sum(result.duration_s for result in run.test_results)
            overheads.append(overhead)
            shares.append(overhead / run.wall_s)
        if not overheads:
            continue
        overhead, share = statistics.median(overheads), statistics.median(shares)
        large = overhead >= limits.slow_startup_min_s and share >= limits.slow_startup_share
        if large and (worst is None or overhead > worst[1]):
            worst = (config.label, overhead, share)
    if worst is None:
        return []
    label, overhead, share = worst
    return [
        FindingDraft(
            kind="slow_startup",
            severity=Severity.medium if share >= 0.75 else Severity.low,
            title=f"pytest start-up and collection take {overhead:.2f} s, {share:.0%} of the run",
            detail=(
                f"with {label}, the median run spent {overhead:.3f} s outside its tests (wall time minus the JUnit "
                f"durations): interpreter start-up, plugin loading (try PYTEST_DISABLE_PLUGIN_AUTOLOAD=1), "
                f"conftest imports and collection"
            ),
            config_label=label,
            metrics={"startup_s": overhead, "share": share},
        )
    ]
