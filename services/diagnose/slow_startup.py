"""slow_startup: interpreter start-up, imports, plugin loading or test collection take
most of a run.

Two sources: for pytest commands, each timing run's wall time minus the time its tests
took (start-up, plugin autoload, conftest imports, collection); for any Python command
that was drilled, the `-X importtime` evidence, which names the slowest imports (for
pytest: the plugins it autoloaded). Judged in the configuration where start-up is
shortest: a quota slows start-up by its factor, which is no finding of its own.

For pytest the finding names a cause the evidence carries: where -X importtime shows that
plugins and conftest imports hold less than ``slow_startup_plugin_share`` of the start-up, the rest is
pytest's own start-up and the collection of the suite's tests. jsonschema 4.22's own
suite (397 tests) spends 0.60 s of a 0.83 s run there, with 0.056 s of it in imports of
its own; telling it to unload plugins it does not have is wrong advice. Only a start-up
of a second or more is then worth a finding, and it names collection.
"""

from __future__ import annotations

import statistics
import sys

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.metrics import SlowStartupImportsMetrics, SlowStartupPytestMetrics
from services.evidence import ImportsContent, ImportTiming
from services.measure import pytest_command as junit
from services.models import Evidence

SLOWEST = 5
# pytest's own modules: what remains among the slow top-level imports of a pytest run
# are its plugins (autoloaded through entry points) and the suite's conftest imports.
_PYTEST_OWN = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging")


def check(context: RuleContext) -> list[FindingDraft]:
    imports = _imports_evidence(context)
    if junit.is_pytest(context.job.command):
        return _from_pytest(context, imports)
    return _from_imports(context, imports)


def _named_plugins(command: list[str]) -> set[str]:
    """The top-level modules the pytest command loads with -p NAME (or -pNAME)."""
    named = set()
    for flag, value in zip(command, [*command[1:], ""], strict=True):
        if flag == "-p":
            named.add(value)
        elif flag.startswith("-p") and len(flag) > 2 and not flag.startswith("--"):
            named.add(flag[2:])
    return {name.split(".")[0] for name in named if not name.startswith("no:")}


def _imports_evidence(context: RuleContext) -> tuple[Evidence, ImportsContent] | None:
    whole = [(e, c) for e, c in context.evidence_of(ImportsContent) if e.test_id is None and e.config is not None]
    return min(whole, key=lambda pair: pair[1].total_import_s or 0.0) if whole else None


def _slowest(found: tuple[Evidence, ImportsContent] | None, pytest: bool) -> tuple[list[ImportTiming], str]:
    if found is None:
        return [], ""
    evidence, content = found
    entries = content.slowest or []
    if pytest:
        entries = [
            entry
            for entry in entries
            if entry.module.split(".")[0] not in _PYTEST_OWN
            and entry.module.split(".")[0] not in sys.stdlib_module_names
        ]
    entries = entries[:SLOWEST]
    if not entries:
        return [], ""
    label = "slowest plugins and conftest imports" if pytest else "slowest imports"
    listed = ", ".join(f"{entry.module} {entry.cumulative_s:.3f} s" for entry in entries)
    config = evidence.config.label if evidence.config else "?"
    return entries, f"; -X importtime ({config}): {label}: {listed}"


def _from_imports(context: RuleContext, found: tuple[Evidence, ImportsContent] | None) -> list[FindingDraft]:
    limits = context.thresholds
    if found is None:
        return []
    evidence, content = found
    medians = [m for m in (context.timing_median(c.label, None) for c in context.job.configs) if m]
    if not medians:
        return []
    median = min(medians)
    total = content.total_import_s or 0.0
    if total < limits.slow_startup_min_s or total < limits.slow_startup_share * median:
        return []
    slowest, listed = _slowest(found, pytest=False)
    share = min(total / median, 1.0)
    return [
        FindingDraft(
            kind="slow_startup",
            severity=Severity.medium if share >= limits.slow_startup_medium_share else Severity.low,
            title=f"Imports take {total:.2f} s of a {median:.2f} s run ({share:.0%})",
            detail=(
                f"top-level imports took {total:.3f} s in all, against a fastest timing median of {median:.3f} s "
                f"({share:.0%} of the run){listed}. Defer the heavy import, or the work it does at import time"
            ),
            config_label=evidence.config.label if evidence.config else None,
            metrics=SlowStartupImportsMetrics(
                accounts_s=min(total, median),
                import_s=total,
                timing_median_s=median,
                share=share,
                slowest=slowest,
            ),
            evidence_ids=[evidence.id],
        )
    ]


def _from_pytest(context: RuleContext, found: tuple[Evidence, ImportsContent] | None) -> list[FindingDraft]:
    limits = context.thresholds
    best = None
    for config in context.job.configs:
        overheads, shares = [], []
        for run in context.timing_runs(config):
            if not run.test_results or run.wall_s <= 0:
                continue
            overhead = run.wall_s - sum(result.duration_s for result in run.test_results)
            overheads.append(overhead)
            shares.append(overhead / run.wall_s)
        if overheads and (best is None or statistics.median(overheads) < best[1]):
            best = (config.label, statistics.median(overheads), statistics.median(shares))
    if best is None:
        return []
    label, overhead, share = best
    if overhead < limits.slow_startup_min_s or share < limits.slow_startup_share:
        return []
    slowest, listed = _slowest(found, pytest=True)
    # What the suite's plugins and conftest imports cost (a lower bound: the probe keeps
    # the slowest top-level imports only). Without the evidence the cause stays open.
    plugins_s = sum(entry.cumulative_s for entry in slowest) if found is not None else None
    requested = _named_plugins(context.job.command)
    named = [entry for entry in slowest if entry.module.split(".")[0] in requested]
    if plugins_s is not None and plugins_s < limits.slow_startup_plugin_share * overhead:
        if overhead < limits.slow_startup_collection_min_s:
            return []
        advice = (
            f". Plugins and conftest imports hold only {plugins_s:.3f} s of it: the rest is pytest's own start-up "
            f"and collecting the tests. Collect less (narrow testpaths, fewer parametrized cases, lighter test "
            f"modules), or split the suite"
        )
    elif plugins_s and 2 * sum(entry.cumulative_s for entry in named) >= plugins_s:
        # The suite asks for these by name: unloading them is no advice (faker_randomly's
        # twin builds Faker in its -p warm_faker plugin on purpose).
        advice = (
            f". Most of it is in plugins the command loads by name ({', '.join(e.module for e in named)}, -p): "
            "what they do at import or configure time is the cost; defer it to the first test that needs it"
        )
    else:
        advice = (
            ". Load only the plugins the suite uses: PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 with -p NAME for each one "
            "needed, or uninstall the rest"
        )
    return [
        FindingDraft(
            kind="slow_startup",
            severity=Severity.medium
            if share >= limits.slow_startup_medium_share and overhead >= limits.slow_startup_medium_s
            else Severity.low,
            title=f"pytest start-up and collection take {overhead:.2f} s, {share:.0%} of the run",
            detail=(
                f"with {label} (the fastest start-up), the median run spent {overhead:.3f} s outside its tests "
                f"(wall time minus the JUnit durations): interpreter start-up, plugin autoload, conftest imports "
                f"and collection{listed}{advice}"
            ),
            config_label=label,
            metrics=SlowStartupPytestMetrics(
                accounts_s=overhead,
                startup_s=overhead,
                share=share,
                plugins_s=plugins_s,
                slowest=slowest,
            ),
            evidence_ids=[found[0].id] if found is not None and slowest else [],
        )
    ]
