"""command_failed: the command failed or timed out in every run of a configuration.

Such a configuration measured nothing; its runs are left out of every statistic, so
without this finding the report would show "no findings" over runs that all exited 1
(failure shown as health). One finding per job, naming every such configuration; on the
test that failed when it is the only one.
"""

from __future__ import annotations

import statistics
from collections import Counter

from services.diagnose.context import RuleContext
from services.diagnose.findings import FindingDraft, Severity
from services.diagnose.metrics import CollectionError, CommandFailedMetrics
from services.measure import pytest_command
from services.models import COMMAND_KINDS, Run

KIND = "command_failed"
TAIL_LINES = 20
TESTS_NAMED = 5


def check(context: RuleContext) -> list[FindingDraft]:
    failing: dict[str, list[Run]] = {}
    measured = 0  # configurations with any timing run (a screen stopped early ran not all)
    for config in context.job.configs:
        # A suite that cannot run stops the screen at its first run, which the census may
        # have traced: a tracer changes its clock, not whether pytest exits 2 or 5
        # (tests/cli/test_run_suite_failures.py, on a busy machine). A traced run that
        # timed out may be the tracer's doing, and fails nothing.
        runs = context.all_timing_runs(config) or [
            run
            for run in config.runs
            if run.kind in COMMAND_KINDS and run.traced and run.exit_code != 0 and not run.timed_out
        ]
        measured += bool(runs)
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
    # Configurations the screen never ran (it stopped at a suite that cannot run) are no
    # configuration where the command passed.
    everywhere = len(failing) == measured
    where = "in every configuration" if everywhere else "with " + ", ".join(failing)
    verb = "timed out" if timed_out == len(runs) else "failed"
    kind = failure_kind(context, last, timed_out == len(runs))
    detail = [
        f"No run succeeded {where} ({', '.join(ended)}), so the command's latency there was not "
        f"measured and nothing else is judged from those runs."
    ]
    title = f"The command {verb} in all {len(runs)} runs {where}"
    uncollected = pytest_command.read_collection_errors(last.output_tail)
    if kind == pytest_command.COLLECTION_ERROR:
        modules = ", ".join(error.module for error in uncollected[:TESTS_NAMED]) + (
            f" and {len(uncollected) - TESTS_NAMED} more" if len(uncollected) > TESTS_NAMED else ""
        )
        title = f"The command stopped at a collection error: pytest could not collect {modules}"
        detail = [
            "pytest could not collect "
            + "; ".join(f"{error.module} ({error.exception})" for error in uncollected)
            + ", so no test ran and nothing was measured."
        ]
    elif kind == pytest_command.NO_TESTS:
        title = "The command ran no test: no tests collected (pytest exit 5)"
        detail = [
            "pytest found no test to run, so nothing was measured: check the command's paths and -k/-m "
            "options, and that the test files are named test_*.py or *_test.py."
        ]
    elif kind == pytest_command.USAGE_ERROR:
        title = "pytest refused the command (exit 4, a usage error)"
        detail = ["pytest did not start the tests: a path or an option of the command does not exist."]
    elif failed_tests:
        named = ", ".join(failed_tests[:TESTS_NAMED]) + (
            f" and {len(failed_tests) - TESTS_NAMED} more" if len(failed_tests) > TESTS_NAMED else ""
        )
        detail.append(f"Failing tests: {named}; the passing tests' durations are still judged.")
    # One test failing beside passing ones is that test's finding, not the command's: its
    # page, the catalogue and the check run's annotation show it there
    # (examples/corpus/toolz_failing_test). Several stay on the command, named.
    test_id = failed_tests[0] if len(failed_tests) == 1 and passed_tests and kind == EXITED else None
    if test_id is not None:
        title = f"The test {test_id} failed in all {len(runs)} runs {where}"
    if uncollected and kind != pytest_command.COLLECTION_ERROR:
        named = "; ".join(f"{error.module} ({error.exception})" for error in uncollected)
        detail.append(f"pytest could not collect {named}.")
    shown = "\n".join(line for line in tail.splitlines() if not line.startswith(pytest_command.COLLECTION_ERROR_LINE))
    detail.append(f"Last output:\n{shown}" if shown else "The command printed nothing.")
    return [
        FindingDraft(
            kind=KIND,
            # Nothing at all was measured: the report must not look like a clean bill.
            severity=Severity.medium if passed_tests else Severity.high,
            title=title,
            detail=" ".join(detail),
            config_label=None if everywhere else next(iter(failing)),
            test_id=test_id,
            metrics=CommandFailedMetrics(
                # No run measured anything but the failure: each run's whole time is its.
                accounts_s=statistics.median(run.wall_s for run in runs),
                configs={label: len(per_config) for label, per_config in failing.items()},
                runs=len(runs),
                timed_out=timed_out,
                exit_codes={str(code): count for code, count in codes.items()},
                exit_code=codes.most_common(1)[0][0] if codes else None,
                failed_tests=failed_tests,
                collection_errors=[CollectionError(module=e.module, exception=e.exception) for e in uncollected],
                # How it failed: part of the finding's fingerprint (services/diagnose/diagnose.py).
                failure=kind,
                output_tail=tail,
            ),
        )
    ]


# A failure no more precise kind names: the command (or some of its tests) failed.
EXITED, TIMED_OUT = "exit_status", "timed_out"


def failure_kind(context: RuleContext, last: Run, all_timed_out: bool) -> str:
    """How the command failed: a pytest suite that ran no test (collection error, no tests
    collected, usage error), every run timed out, or an exit status."""
    if all_timed_out:
        return TIMED_OUT
    if pytest_command.is_pytest(context.job.command):
        kind = pytest_command.suite_failure(last.exit_code, last.output_tail, len(last.test_results))
        if kind is not None:
            return kind
    return EXITED
