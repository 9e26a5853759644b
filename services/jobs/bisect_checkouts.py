"""A bisect's runs: the commits it measures, each checked out once into a git worktree.

The search is services/jobs/bisect.py's; this module gives it its runs. Each commit it
asks for is checked out once into a worktree of its own (``git worktree add --detach``,
removed at the end), and the command, narrowed to the one test, runs there in the
configuration through the executor, as every lagtrace run does
(services/measure/runs.py ``run_once``): the test's time is its JUnit duration. With no
test (a program that is no pytest suite, or a whole suite), the time is the command's
wall time as lagtrace's timer took it, and a run that exits non-zero ends the commit. The
service's bisect step (services/jobs/bisect_step.py) gives it the job's session and
configuration, a clone with the range's history and the job's executor; `lagtrace bisect`
a scratch configuration (``scratch_config``), the user's repository and the local executor.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from services.errors import BadInput
from services.jobs.bisect import BisectResult, MeasureFailed
from services.jobs.sources import SourceError
from services.measure import pytest_command
from services.measure.configs import CpuConfig
from services.measure.executors.base import Executor
from services.measure.runs import run_once
from services.models import Base, Job, JobConfig, Project, RunKind

# git(where, *args): its output; it raises (CalledProcessError, SourceError) when git fails.
Git = Callable[..., str]


def commit_range(repo: Path, good: str, bad: str) -> tuple[Path, str, list[str]]:
    """The repository's top, the folder of it ``repo`` names, and the commits from
    ``good`` to ``bad`` along the first-parent line, oldest first; BadInput names the
    argument at fault."""

    if not repo.is_dir():
        raise BadInput(f"--repo {repo}: no such directory")
    try:
        top = Path(_git(repo, "rev-parse", "--show-toplevel"))
        folder = _git(repo, "rev-parse", "--show-prefix")
    except subprocess.CalledProcessError:
        raise BadInput(f"--repo {repo}: not a git repository") from None
    shas = {}
    for flag, rev in (("--good", good), ("--bad", bad)):
        try:
            shas[flag] = _git(top, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        except subprocess.CalledProcessError:
            raise BadInput(f"{flag} {rev}: no such commit in {top}") from None
    return top, folder, first_parent_range(_git, top, shas["--good"], shas["--bad"], (f"--good {good}", f"--bad {bad}"))


def first_parent_range(git: Git, top: Path, good_sha: str, bad_sha: str, named: tuple[str, str]) -> list[str]:
    """The commits from ``good_sha`` to ``bad_sha`` along the first-parent line, oldest
    first; BadInput names the two ends as ``named`` says them (``--good REV``, ``good REV``)."""
    good, bad = named
    if good_sha == bad_sha:
        raise BadInput(f"{good} and {bad} are the same commit: there is nothing between them")
    try:
        git(top, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except (subprocess.CalledProcessError, SourceError):
        raise BadInput(f"{good} is not an ancestor of {bad}") from None
    # The first-parent line: a merge is one step, as the branch it landed on saw it.
    later = git(top, "rev-list", "--reverse", "--first-parent", f"{good_sha}..{bad_sha}").split()
    if not later or git(top, "rev-parse", f"{later[0]}^") != good_sha:
        raise BadInput(f"{good} is not on the first-parent line of {bad} (a commit of a merged branch)")
    return [good_sha, *later]


@contextmanager
def scratch_config(command: list[str], executor: Executor, config: CpuConfig) -> Iterator[tuple[Session, JobConfig]]:
    """A job configuration in a scratch database in memory, dropped on the way out: where
    `lagtrace bisect` stores its runs, which it keeps nothing of (the service stores them
    with the job's own configuration)."""
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    session = Session(engine)
    try:
        job = Job(project=Project(name="bisect"), command=command, executor=executor.name, repeat=1)
        job_config = JobConfig(job=job, position=0, label=config.label, cpus=config.cpus, cpuset=config.cpuset_text)
        session.add(job_config)
        session.flush()
        yield session, job_config
    finally:
        session.close()
        engine.dispose()


class Checkouts:
    """The commits the search measures, each checked out once into its own worktree under
    one directory (``scratch``, the caller's, or a temporary one removed on the way out);
    the worktrees are removed on the way out.

    Each run is stored (``run_once``, what the screen and the confirm step run through) in
    ``job_config`` with the commit it ran at; ``after_run`` is called after each (the
    service commits there, and stops if the job was cancelled).
    """

    def __init__(
        self,
        session: Session,
        job_config: JobConfig,
        top: Path,
        folder: str,
        executor: Executor,
        command: list[str],
        test_id: str | None,
        timeout_s: float | None,
        progress: Callable[[str], None],
        *,
        scratch: Path | None = None,
        git: Git | None = None,
        after_run: Callable[[], None] = lambda: None,
    ):
        self.session, self.job_config = session, job_config
        self.top, self.folder, self.executor = top, folder, executor
        self.command, self.test_id, self.timeout_s = command, test_id, timeout_s
        self.progress, self.after_run = progress, after_run
        self.git: Git = git or _git
        self.given_scratch = scratch
        self.worktrees: dict[str, tuple[Path, list[str]]] = {}

    def __enter__(self) -> Checkouts:
        self.scratch = self.given_scratch or Path(tempfile.mkdtemp(prefix="lagtrace-bisect-"))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for path, _ in self.worktrees.values():
            with suppress(subprocess.CalledProcessError, SourceError):
                self.git(self.top, "worktree", "remove", "--force", str(path))
        with suppress(subprocess.CalledProcessError, SourceError):
            self.git(self.top, "worktree", "prune")
        if self.given_scratch is None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _checkout(self, sha: str) -> tuple[Path, list[str]]:
        """The commit's worktree (its folder the command runs in) and the command narrowed to the test there."""

        if sha not in self.worktrees:
            path = self.scratch / sha[:12]
            self.git(self.top, "worktree", "add", "--detach", "--quiet", str(path), sha)
            workdir = path / self.folder
            self.executor.prepare(workdir, self.progress)
            self.executor.check_command(self.command, workdir)
            narrowed = self.command
            if self.test_id is not None:
                ceiling = pytest_command.search_ceiling(self.executor.name)
                narrowed = pytest_command.narrow_to_test(self.command, self.test_id, workdir, ceiling=ceiling)
            self.worktrees[sha] = (workdir, narrowed)
        return self.worktrees[sha]

    def measure(self, sha: str, n: int) -> list[float]:
        """``n`` runs of the test at ``sha``: its JUnit durations (MeasureFailed: it did not
        pass); with no test, of the whole command: its wall time (MeasureFailed: it failed)."""

        workdir, command = self._checkout(sha)
        durations = []
        for _ in range(n):
            run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=self.scratch))
            try:
                measured = run_once(
                    self.session,
                    self.executor,
                    self.job_config,
                    command=command,
                    workdir=workdir,
                    run_dir=run_dir,
                    timeout_s=self.timeout_s,
                    kind=RunKind.bisect,
                    repetition=1 + len(self.job_config.runs),
                    test_id=self.test_id,
                )
            except BadInput as exc:
                raise MeasureFailed(sha, str(exc)) from None
            finally:
                shutil.rmtree(run_dir, ignore_errors=True)
            measured.run.commit_sha = sha
            self.after_run()
            result = measured.result
            if result.timed_out:
                raise MeasureFailed(sha, f"the run timed out after {result.wall_s:.1f} s")
            if self.test_id is None:
                # A plain command (or a whole suite): its wall time, as lagtrace's own timer took it.
                if result.exit_code != 0:
                    tail = (result.output_tail or "").strip()[-500:]
                    raise MeasureFailed(sha, f"the command exited {result.exit_code}: {tail}")
                durations.append(result.wall_s)
                continue
            if why := pytest_command.nothing_ran(result.exit_code, self.test_id):
                raise MeasureFailed(sha, why)
            cases = measured.cases
            if len(cases) != 1:
                raise MeasureFailed(sha, f"{self.test_id} ran {len(cases)} test cases, not one: name one case")
            if cases[0].outcome != "passed":
                raise MeasureFailed(sha, f"{cases[0].test_id} {cases[0].outcome}: {(result.output_tail or '').strip()}")
            durations.append(cases[0].duration_s)
        return durations


def verdict_text(result: BisectResult, test_id: str | None, subject: Callable[[str], str]) -> str:
    """The verdict in a few lines: what changed where, by how much, and what finding it cost."""
    where = f" in {result.config}" if result.config else ""
    test_id = test_id or "the command"
    lines = []
    if result.verdict == "culprit" and result.culprit is not None:
        sha = result.commits[result.culprit]
        before = statistics.median(result.durations(result.commits[result.culprit - 1]))
        after = statistics.median(result.durations(sha))
        interval = (
            f" [{result.ratio_low:.2f} .. {result.ratio_high:.2f}]"
            if result.ratio_low is not None and result.ratio_high is not None
            else ""
        )
        lines.append(
            f"culprit: {sha[:10]} {subject(sha)!r} (commit {result.culprit + 1} of {len(result.commits)}) made "
            f"{test_id} {result.direction}{where}: {result.ratio:.2f}x its parent's time{interval}, "
            f"{before:.3f} s -> {after:.3f} s"
        )
        lines += [
            f"  also {result.direction}: {result.commits[i][:10]} {subject(result.commits[i])!r}" for i in result.also
        ]
    elif result.verdict == "no_culprit":
        lines.append(f"no culprit: {test_id}{where}: {result.reason}")
    else:
        lines.append(f"undecided: {test_id}{where}: {result.reason}")
    lines.append(f"cost: {result.cost()}")
    return "\n".join(lines)


def _git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def subject(top: Path, sha: str) -> str:
    """The commit's subject line, as the verdict names it."""
    return _git(top, "log", "-1", "--format=%s", sha)
