"""`lagtrace bisect`: which commit between --good and --bad changed one test's time.

The search is services/jobs/bisect.py's, its runs services/jobs/bisect_checkouts.py's
(each commit in a git worktree of its own); this module reads the arguments and says
the verdict.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import click


def _progress(message: str) -> None:
    click.echo(f"lagtrace: {message}", err=True)


@click.command()
@click.option(
    "--repo",
    type=click.Path(path_type=Path),
    default=Path("."),
    show_default=True,
    help="A local git repository (or a folder of one: the command runs in that folder of each checkout).",
)
@click.option("--good", required=True, metavar="REV", help="The last commit known good (the older end).")
@click.option("--bad", required=True, metavar="REV", help="A commit known bad (the newer end); --good is its ancestor.")
@click.option(
    "--test",
    "test_id",
    default=None,
    metavar="NODEID",
    help="The pytest node id of the one test to time. Unset: the whole command's wall time (any program).",
)
@click.option(
    "--config",
    "spec",
    default=None,
    metavar="SPEC",
    help="The CPU configuration the change shows in, as for `run` (e.g. cpuset=0, cpus=0.5). Default: all cores.",
)
@click.option(
    "--executor",
    type=click.Choice(["local"]),
    default="local",
    show_default=True,
    help="Where the runs run: the host (the docker executor is not offered here yet).",
)
@click.option(
    "--max-runs",
    type=click.IntRange(min=2),
    default=None,
    help="Stop after this many runs in all; the verdict is then undecided. Default: no bound.",
)
@click.option(
    "--max-seconds",
    "max_s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="S",
    help="Stop before the runs' wall time would pass S seconds; the verdict is then undecided. Default: no bound.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="S",
    help="Kill a run after this many seconds (the commit then ends the search, undecided).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the result here: the verdict, every run with its commit, every pair judged, the cost.",
)
@click.argument("command", nargs=-1, required=False, type=click.UNPROCESSED)
def bisect(
    repo: Path,
    good: str,
    bad: str,
    test_id: str | None,
    spec: str | None,
    executor: str,
    max_runs: int | None,
    max_s: float | None,
    timeout_s: float | None,
    json_path: Path | None,
    command: tuple[str, ...],
) -> None:
    """Find the commit that made one test slower (or faster): COMMAND (after --) is the
    pytest command, run narrowed to --test at the commits the search picks. Without --test,
    COMMAND is any program, timed whole."""
    # Here, not at the top: cli.main imports this module to register the command.
    from cli.main import _cancel, _load_settings
    from services.errors import BadInput
    from services.jobs.bisect import Budget
    from services.jobs.bisect import bisect as search
    from services.jobs.bisect_checkouts import Checkouts, commit_range, scratch_config, subject, verdict_text
    from services.measure import pytest_command
    from services.measure.configs import format_cpulist, parse_spec
    from services.measure.confirm import rule_of
    from services.measure.executors import make_executor

    # `kill` stops it as Ctrl-C does: the worktrees are removed on the way out.
    signal.signal(signal.SIGTERM, _cancel)
    if not command:
        raise BadInput("COMMAND: give the command after --: -- python -m pytest -q (with --test), or -- python app.py")
    if test_id is not None and not pytest_command.is_pytest(list(command)):
        raise BadInput(
            f"--test {test_id}: COMMAND {command[0]!r} is no pytest command (pytest, python -m pytest); "
            "leave --test out to time the whole command"
        )
    top, folder, commits = commit_range(repo, good, bad)
    settings = _load_settings()
    runner = make_executor(executor, settings, progress=_progress)
    available = runner.available_cpus()
    try:
        config = parse_spec(spec, available) if spec else parse_spec(f"cpuset={format_cpulist(available)}", available)
    except BadInput as exc:
        raise BadInput(f"--config {exc}") from None
    if config.cpus is not None and (problem := runner.quota_unsupported_reason()):
        raise BadInput(f"--config {config.label}: CPU quotas cannot be enforced on this machine: {problem}")
    what = test_id or "the command"
    _progress(f"bisect {what} in {config.label}: {len(commits)} commits, {commits[0][:10]}..{commits[-1][:10]}")

    with (
        scratch_config(list(command), runner, config) as (session, job_config),
        Checkouts(session, job_config, top, folder, runner, list(command), test_id, timeout_s, _progress) as checkouts,
    ):
        result = search(
            commits,
            checkouts.measure,
            rule_of(settings.thresholds),
            Budget(max_runs=max_runs, max_s=max_s),
            config=config.label,
            timed="the test" if test_id else "the command",
            progress=_progress,
        )
    if json_path is not None:
        json_path.write_text(json.dumps({**result.as_json(), "test": test_id, "repo": str(top)}, indent=2) + "\n")
        _progress(f"result written to {json_path}")
    click.echo(verdict_text(result, test_id, lambda sha: subject(top, sha)))
