"""`make accuracy`: run lagtrace over the diagnosis corpus as a user would, and score it.

Every case under examples/corpus/ is a program that carries a real pathology (a pinned
library version with the bug, or the wrong call) beside its healthy twin (the fixed
version or the corrected call). Each side is run as ``lagtrace run --json OUT -- CMD``
with the default matrix; the script prints expected against found per case, precision
and recall per finding kind, and the time from command to diagnosis. It exits 1 when a
pathology's kind is missed or a healthy twin gets a medium or high finding.

Pinned libraries are installed once into a virtual environment per requirements file
and interpreter, cached under .state/accuracy/venvs/ by their hash. With the docker
executor each side runs from a staged copy of its folder: its own requirements file and
a wheelhouse downloaded on the host, which lagtrace's prepare step installs without a
network into the cached ``lagtrace-deps`` image that every timing run starts from
(timing and evidence runs have no network either).

    .venv/bin/python tests/accuracy/corpus.py [--quick] [--case NAME ...] [--executor local|docker] [--prepare]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "examples" / "corpus"
STATE = REPO / ".state" / "accuracy"
LAGTRACE = REPO / ".venv" / "bin" / "lagtrace"
UV = REPO / ".venv" / "bin" / "uv"
# The machine's shared lock for anything that measures latency (one measurement at a time).
CPU_LOCK = Path(os.environ.get("LAGTRACE_CPU_LOCK", "/tmp/lagtrace-cpu.lock"))
SERIOUS = {"medium", "high"}
# How long one hold of the lock may start new cases (a case takes 1-4 minutes: a hold
# stays under the machine's 10-minute rule).
HOLD_S = float(os.environ.get("LAGTRACE_ACCURACY_HOLD_S", "300"))
HAND_OVER_S = 2.0


@dataclass
class Side:
    """One program to run: a pathology (expect non-empty) or a healthy twin (expect empty)."""

    case: str
    variant: str  # "pathology" or "healthy"
    directory: Path
    command: list[str]
    expect: list[str]
    tolerate: list[str]
    requirements: Path | None
    interpreter: str
    # The cause a diagnosis of this side must name (`expect_cause:` in case.yaml): finding
    # the symptom's kind is not enough, the story must say why.
    expect_cause: str | None = None
    # ... and words its text must hold (`expect_cause_in:`): where the time goes, say the
    # library's module, not the test runner's.
    expect_cause_in: str | None = None
    # ... and the test whose diagnosis must name it (`expect_cause_test:`): evidence that
    # names a test belongs to that test, not to the whole command. Without it the cause
    # belongs to the whole command (a program, a suite's start-up).
    expect_cause_test: str | None = None
    # Kinds that must not be found at medium or high severity on this side (`forbid:`): a
    # pathology's own finding beside, say, a suite's healthy tests read as CPU-sensitive.
    forbid: list[str] = field(default_factory=list)
    # What turning the expected cause's knob must show (`expect_knob:`, services/measure/
    # confirm.py): "confirmed" (the diagnosis names the cause, proven), or "not confirmed"
    # (a case built so that the obvious knob does not help: the cause is then not
    # established). A healthy twin gets no confirm step at all.
    expect_knob: str | None = None

    @property
    def name(self) -> str:
        return f"{self.case}/{self.variant}"


@dataclass
class Outcome:
    side: Side
    found: list[tuple[str, str]]  # (kind, severity)
    seconds: float
    error: str | None = None
    causes: list[str] = field(default_factory=list)  # the cause kind of each diagnosis
    cause_texts: list[str] = field(default_factory=list)  # and its text, in the same order
    cause_tests: list[str | None] = field(default_factory=list)  # and its test (None: the command)
    # Each experiment's outcome: True confirmed, False not (services/measure/confirm.py).
    knobs: list[bool] = field(default_factory=list)

    @property
    def kinds(self) -> set[str]:
        return {kind for kind, _ in self.found}

    @property
    def missed(self) -> list[str]:
        return [kind for kind in self.side.expect if kind not in self.kinds]

    @property
    def unexpected(self) -> list[tuple[str, str]]:
        allowed = set(self.side.expect) | set(self.side.tolerate)
        return [(kind, severity) for kind, severity in self.found if kind not in allowed]

    @property
    def cause_right(self) -> bool | None:
        """Whether some diagnosis names the expected cause; None where none is expected."""
        if self.side.expect_cause is None:
            return None
        tests = self.cause_tests or [self.side.expect_cause_test] * len(self.causes)
        return any(
            kind == self.side.expect_cause
            and (self.side.expect_cause_in or "") in text
            and self._is_expected_test(test)
            for kind, text, test in zip(self.causes, self.cause_texts or [""] * len(self.causes), tests, strict=True)
        )

    @property
    def attributed(self) -> bool | None:
        """Whether a diagnosis names the expected cause where it belongs: on the case's
        test (`expect_cause_test`), else on the whole command; None where no cause is
        expected. A cause right in kind but filed under the wrong test (or under the
        command when a test showed it) is a wrong attribution."""
        if self.side.expect_cause is None:
            return None
        tests = self.cause_tests or [None] * len(self.causes)
        expected = self.side.expect_cause_test
        return any(
            kind == self.side.expect_cause and (self._is_expected_test(test) if expected else test is None)
            for kind, test in zip(self.causes, tests, strict=True)
        )

    def _is_expected_test(self, test: str | None) -> bool:
        """The test the case names, as its node id ends: a suite run with --pyargs is named
        by its path in the case's virtual environment, which changes with the venv."""
        expected = self.side.expect_cause_test
        return expected is None or (test is not None and (test == expected or test.endswith("/" + expected)))

    @property
    def knob_right(self) -> bool | None:
        """Whether the knobs turned say what the case expects; a healthy twin's: none
        turned. None where the case expects nothing of them."""
        if self.side.variant == "healthy":
            return not self.knobs
        if self.side.expect_knob is None:
            return None
        return (self.side.expect_knob == "confirmed") in self.knobs

    @property
    def forbidden(self) -> list[tuple[str, str]]:
        return [(kind, severity) for kind, severity in self.found if kind in self.side.forbid and severity in SERIOUS]

    @property
    def failed(self) -> bool:
        if self.error or self.missed or self.cause_right is False or self.attributed is False or self.forbidden:
            return True
        if self.knob_right is False:
            return True
        # A healthy twin may carry a low note, never a medium or high finding, tolerated
        # or not: a twin's tolerate list excuses a note in the precision count only.
        # (Extra findings on a pathology count against precision, not as a failure.)
        return self.side.variant == "healthy" and any(severity in SERIOUS for _, severity in self.found)


def load_cases() -> dict[str, tuple[bool, list[Side]]]:
    """Case name -> (in the quick subset, its sides)."""
    cases: dict[str, tuple[bool, list[Side]]] = {}
    for path in sorted(CORPUS.glob("*/case.yaml")):
        spec = yaml.safe_load(path.read_text())
        directory = path.parent
        interpreter = spec.get("interpreter", "python3")
        if "cases" in spec:  # a folder of several small cases sharing a working directory
            workdir = (directory / spec.get("workdir", ".")).resolve()
            for name, case in spec["cases"].items():
                healthy = bool(case.get("healthy"))
                side = Side(
                    name,
                    "healthy" if healthy else "pathology",
                    workdir,
                    case["command"],
                    [] if healthy else case["expect"],
                    case.get("tolerate", []),
                    None,
                    case.get("interpreter", interpreter),
                    None if healthy else case.get("expect_cause"),
                    expect_knob=None if healthy else case.get("expect_knob"),
                )
                cases[name] = (bool(case.get("quick")), [side])
            continue
        sides = []
        # A case may be a healthy suite alone: a real project's own tests, nothing to find.
        for variant in [v for v in ("pathology", "healthy") if v in spec]:
            part = spec[variant]
            requirements = directory / part["requirements"] if part.get("requirements") else None
            sides.append(
                Side(
                    directory.name,
                    variant,
                    directory,
                    part["command"],
                    part.get("expect", []) if variant == "pathology" else [],
                    part.get("tolerate", []),
                    requirements,
                    interpreter,
                    part.get("expect_cause") if variant == "pathology" else None,
                    part.get("expect_cause_in") if variant == "pathology" else None,
                    part.get("expect_cause_test") if variant == "pathology" else None,
                    part.get("forbid", []),
                    part.get("expect_knob") if variant == "pathology" else None,
                )
            )
        cases[directory.name] = (bool(spec.get("quick")), sides)
    return cases


@functools.cache
def find_interpreter(name: str) -> str | None:
    """``name`` (python3.12) on PATH if it runs, else pyenv's build of it: pyenv's shims
    run only the versions `pyenv global` selected."""
    found = shutil.which(name)
    if found and subprocess.run([found, "-c", "pass"], capture_output=True).returncode == 0:
        return found
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    builds = sorted(
        root.glob(f"versions/*/bin/{name}"), key=lambda p: [int(x) for x in p.parts[-3].split(".") if x.isdigit()]
    )
    return str(builds[-1]) if builds else None


def interpreter_version(side: Side) -> str:
    """What ran the side's command with the local executor: ``python3.12 (3.12.1)``."""
    return f"{side.interpreter} ({_version_of(python_for(side))})"


@functools.cache
def _version_of(python: str) -> str:
    asked = [python, "-c", "import platform; print(platform.python_version())"]
    return subprocess.run(asked, capture_output=True, text=True).stdout.strip() or "?"


def python_for(side: Side) -> str:
    """The interpreter of the case's cached virtual environment (built on first use)."""
    interpreter = find_interpreter(side.interpreter)
    if interpreter is None:
        raise RuntimeError(f"{side.interpreter} is not installed")
    # Even without requirements a venv: its python is the real binary, where a pyenv
    # shim on PATH would add a shell script and a few execs to every start-up measured.
    requirements = side.requirements.read_text() if side.requirements else ""
    key = hashlib.sha256((os.path.realpath(interpreter) + "\n" + requirements).encode()).hexdigest()[:16]
    venv = STATE / "venvs" / key
    python = venv / "bin" / "python"
    if not (venv / ".ready").exists():
        shutil.rmtree(venv, ignore_errors=True)
        print(f"accuracy: a virtual environment for {side.name} in {venv}", file=sys.stderr)
        subprocess.run([interpreter, "-m", "venv", str(venv)], check=True)
        if requirements.strip() and side.requirements is not None:
            # uv, as `make install` does: pip's versions, a fraction of its CPU (this runs
            # beside the parallel tier in CI). Compiled as pip would, so a case's first
            # start-up does not pay for its bytecode.
            uv = [str(UV), "pip", "install", "-q", "--system-certs", "--compile-bytecode", "--python", str(python)]
            subprocess.run([*uv, "-r", str(side.requirements)], check=True)
        (venv / ".ready").touch()
    return str(python)


# The docker executor's prepare step installs every requirements*.txt of the working
# tree; these stay out of a staged copy, which gets the side's own file alone.
LOCK_FILES = ("requirements*.txt", "constraints*.txt")


def wheelhouse(side: Side) -> Path:
    """The side's pinned libraries as wheels, downloaded once on the host (cached by hash).

    The host's interpreter is CPython 3.11 on Debian bookworm's glibc, as the runner
    image's is, so the wheels it picks install in the container."""
    assert side.requirements is not None
    python = python_for(side)
    key = hashlib.sha256(side.requirements.read_bytes()).hexdigest()[:16]
    wheels = STATE / "wheels" / key
    if not (wheels / ".ready").exists():
        shutil.rmtree(wheels, ignore_errors=True)
        print(f"accuracy: wheels for {side.name} in {wheels}", file=sys.stderr)
        pip = [python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:"]
        subprocess.run([*pip, "-d", str(wheels), "-r", str(side.requirements)], check=True)
        (wheels / ".ready").touch()
    return wheels


def staged_for_docker(side: Side) -> Path:
    """A copy of the side's folder that the container can install from without a network.

    Only the side's own requirements file goes in (the pathology and its twin may pin
    different versions in one folder), as requirements.txt, with --no-index and the
    wheelhouse beside it: lagtrace's prepare step then builds the side's cached
    lagtrace-deps image from it, as it would from a user's repository."""
    if side.requirements is None:
        return side.directory
    pinned = side.requirements.read_text()
    pins = [line for line in pinned.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    wheels = wheelhouse(side) if pins else None
    key = hashlib.sha256(f"{side.directory}\n{pinned}".encode()).hexdigest()[:12]
    stage = STATE / "stage" / f"{side.case}-{side.variant}-{key}"
    shutil.rmtree(stage, ignore_errors=True)
    skip = shutil.ignore_patterns(*LOCK_FILES, "case.yaml", "__pycache__", ".pytest_cache")
    shutil.copytree(side.directory, stage, ignore=skip)
    if pins:  # an empty requirements file: nothing to prepare, the runner image as it is
        assert wheels is not None
        shutil.copytree(wheels, stage / "wheels", ignore=shutil.ignore_patterns(".ready"))
        # Relative: pip finds it beside the requirements file wherever the container mounts
        # the checkout (/workspace), as it would in a user's repository.
        (stage / "requirements.txt").write_text(f"--no-index\n--find-links wheels\n{pinned}")
    # The container runs as uid 1000: the copy must be readable (and its folders listable) by others.
    for path in [stage, *stage.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    for parent in stage.parents:
        if parent == REPO:
            break
        parent.chmod(parent.stat().st_mode | 0o005)
    return stage


def prepare_images(sides: list[Side]) -> None:
    """Build each staged side's lagtrace-deps image before the timing starts, outside the
    CPU lock: a pip install is not a measurement (as python_for's venvs are built outside).

    The image is keyed by the project (the engine's cache scope, ``project-<id>``), so
    this only applies to cases that already have a project in the corpus database; the
    others are prepared by their first `lagtrace run`, which does the same."""
    os.environ["XDG_DATA_HOME"] = str(STATE / "data")
    sys.path.insert(0, str(REPO))
    from sqlalchemy import select
    from sqlalchemy.exc import DBAPIError

    from services.db import make_engine, make_session_factory
    from services.measure.executors.docker import DockerExecutor
    from services.models import Project
    from services.settings import Settings

    settings = Settings()
    try:
        with make_session_factory(make_engine(settings))() as session:
            projects = {name: id_ for name, id_ in session.execute(select(Project.name, Project.id))}
    except DBAPIError:
        projects = {}  # a corpus database not made yet: each side's first run prepares its image
    for side in sides:
        stage = staged_for_docker(side)
        if side.case not in projects or not (stage / "requirements.txt").exists():
            continue
        executor = DockerExecutor(settings, cache_scope=f"project-{projects[side.case]}")
        executor.prepare(stage, functools.partial(_say, side.name))


def _say(name: str, line: str) -> None:
    print(f"accuracy: {name}: {line}", file=sys.stderr)


def command_for(side: Side, executor: str) -> tuple[list[str], Path]:
    """The command as a user would type it, and its working directory, per executor."""
    if executor == "docker":
        # In the container the prepared image's virtual environment is first on PATH.
        return ["python3" if part == "python" else part for part in side.command], staged_for_docker(side)
    python = python_for(side)
    return [python if part == "python" else part for part in side.command], side.directory


@contextlib.contextmanager
def cpu_lock():
    with CPU_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_side(side: Side, executor: str, out_dir: Path) -> Outcome:
    command, workdir = command_for(side, executor)
    report_path = out_dir / f"{side.case}-{side.variant}.json"
    log_path = out_dir / f"{side.case}-{side.variant}.log"
    # No per-side environment: lagtrace passes none of its caller's to the command
    # (services/measure/executors/local.py child_environment), so a twin differs by its
    # command or its requirements, as a user's fix would.
    env = {**os.environ, "XDG_DATA_HOME": str(STATE / "data")}
    argv = [str(LAGTRACE), "run", "--executor", executor, "--json", str(report_path), "--project", side.case]
    argv += ["--workdir", str(workdir), "--", *command]
    started = time.perf_counter()
    with log_path.open("w") as log:
        result = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    seconds = time.perf_counter() - started
    if result.returncode != 0 or not report_path.exists():
        tail = " / ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])
        return Outcome(side, [], seconds, f"lagtrace exited {result.returncode}: {tail}")
    report = json.loads(report_path.read_text())
    found = [(finding["kind"], finding["severity"]) for finding in report["findings"]]
    diagnoses = report.get("diagnoses", [])
    return Outcome(
        side,
        found,
        seconds,
        causes=causes_of(diagnoses),
        cause_texts=cause_texts_of(diagnoses),
        cause_tests=cause_tests_of(diagnoses),
        knobs=[d["knob_confirmed"] for d in diagnoses if d.get("knob_confirmed") is not None],
    )


def causes_of(diagnoses: list[dict]) -> list[str]:
    return [d["cause"]["kind"] for d in diagnoses if d.get("cause")]


def cause_texts_of(diagnoses: list[dict]) -> list[str]:
    return [d["cause"].get("text") or "" for d in diagnoses if d.get("cause")]


def cause_tests_of(diagnoses: list[dict]) -> list[str | None]:
    return [d.get("test") for d in diagnoses if d.get("cause")]


def score(outcomes: list[Outcome]) -> dict[str, dict[str, float | int | None]]:
    """Per kind: true positives (expected and found), false negatives (expected, missed),
    false positives (found where neither expected nor tolerated, at any severity)."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"tp": 0, "fn": 0, "fp": 0})
    for outcome in outcomes:
        for kind in outcome.side.expect:
            counts[kind]["tp" if kind in outcome.kinds else "fn"] += 1
        for kind in {kind for kind, _ in outcome.unexpected}:
            counts[kind]["fp"] += 1
    table: dict[str, dict[str, float | int | None]] = {}
    for kind, c in sorted(counts.items()):
        found = c["tp"] + c["fp"]
        expected = c["tp"] + c["fn"]
        table[kind] = {
            **c,
            "precision": c["tp"] / found if found else None,
            "recall": c["tp"] / expected if expected else None,
        }
    return table


def _pct(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the cases marked quick (CI)")
    parser.add_argument("--case", action="append", default=[], help="run only this case (repeatable)")
    parser.add_argument("--executor", default="local", choices=["local", "docker"])
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only install what the chosen cases need (virtual environments, wheels, images) and run none: "
        "no measurement, so it may run beside other work",
    )
    parser.add_argument(
        "--rejudge",
        metavar="RUN_DIR",
        type=Path,
        help="judge a previous run's stored jobs again with the rules as they are now (no new runs)",
    )
    args = parser.parse_args(argv)
    cases = load_cases()
    if args.rejudge:
        return rejudge(cases, args.rejudge)
    chosen = [name for name, (quick, _) in cases.items() if (not args.quick or quick)]
    if args.case:
        unknown = set(args.case) - set(cases)
        if unknown:
            parser.error(f"unknown case {', '.join(sorted(unknown))} (known: {', '.join(cases)})")
        chosen = [name for name in chosen if name in args.case] or args.case
    if args.executor == "docker":
        # The runner image has one interpreter: a case pinned to another is the local
        # executor's to run.
        pinned = [name for name in chosen if any(side.interpreter != "python3" for side in cases[name][1])]
        for name in pinned:
            print(f"accuracy: {name} not run: the docker executor runs the runner image's python3 only")
        chosen = [name for name in chosen if name not in pinned]
    out_dir = STATE / "runs" / time.strftime("%Y%m%dT%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in chosen:
        for side in cases[name][1]:
            # Installs outside the lock: pip is not a measurement.
            if args.executor == "local":
                python_for(side)
    if args.executor == "docker":
        prepare_images([side for name in chosen for side in cases[name][1]])
    if args.prepare:
        print(f"accuracy: prepared {len(chosen)} cases for the {args.executor} executor; none run", file=sys.stderr)
        return 0
    outcomes = []
    pending = list(chosen)
    while pending:
        # Whole cases (pathology and twin) per hold of the machine's lock, and no new case
        # once the hold passed HOLD_S: the lock is shared, and waiting for it once per
        # case would cost more than the runs.
        with cpu_lock():
            held = time.monotonic()
            while pending and time.monotonic() - held < HOLD_S:
                for side in cases[pending.pop(0)][1]:
                    outcome = run_side(side, args.executor, out_dir)
                    outcomes.append(outcome)
                    _print_outcome(outcome)
        if pending:
            # flock is not fair: re-requesting the lock at once after releasing it wins it
            # back before a waiter wakes, so a queued measurement would wait for the whole
            # corpus. Step aside long enough for it to take its turn.
            time.sleep(HAND_OVER_S)
    return _summarize(outcomes, out_dir / "summary.json", args.executor)


def _summarize(outcomes: list[Outcome], path: Path, executor: str) -> int:
    out_dir = path.resolve().parent
    table = score(outcomes)
    print("\nkind                 tp  fn  fp  precision  recall")
    for kind, row in table.items():
        print(
            f"{kind:<20} {row['tp']:>3} {row['fn']:>3} {row['fp']:>3}  {_pct(row['precision']):>9}  {_pct(row['recall']):>6}"
        )
    causes = cause_accuracy(outcomes)
    if causes:
        # "on its test": the cause filed under the test the case names, or under the whole
        # command where it names none (the report's, the test page's and the check run's place).
        print("\nexpected cause       right  on its test  of  accuracy")
        for kind, (right, on_test, of) in causes.items():
            print(f"{kind:<20} {right:>5} {on_test:>12} {of:>3}  {_pct(right / of):>8}")
    failures = [o for o in outcomes if o.failed]
    total = sum(o.seconds for o in outcomes)
    # A worktree's .state is a link to the main checkout's: its runs are not under REPO.
    shown = out_dir.relative_to(REPO) if out_dir.is_relative_to(REPO) else out_dir
    print(f"\n{len(outcomes)} runs in {total:.0f} s, {len(failures)} failed; reports in {shown}")
    interpreters = _interpreters(outcomes, executor)
    print(f"interpreters: {', '.join(interpreters)}")
    summary = {
        "executor": executor,
        "outcomes": [
            {
                "case": o.side.case,
                "variant": o.side.variant,
                "expect": o.side.expect,
                "found": o.found,
                "seconds": round(o.seconds, 1),
                "error": o.error,
                "failed": o.failed,
                "expect_cause": o.side.expect_cause,
                "causes": o.causes,
                "cause_tests": o.cause_tests,
                "attributed": o.attributed,
                "expect_knob": o.side.expect_knob,
                "knobs": o.knobs,
            }
            for o in outcomes
        ],
        "interpreters": interpreters,
        "kinds": table,
        "causes": {
            kind: {"right": right, "on_its_test": on_test, "of": of} for kind, (right, on_test, of) in causes.items()
        },
    }
    path.write_text(json.dumps(summary, indent=2))
    return 1 if failures else 0


def rejudge(cases: dict[str, tuple[bool, list[Side]]], run_dir: Path) -> int:
    """The same measurements, today's rules: for a rule change, without a quiet machine."""
    os.environ["XDG_DATA_HOME"] = str(STATE / "data")
    sys.path.insert(0, str(REPO))
    from services import migrate
    from services.db import make_engine, make_session_factory
    from services.diagnose.diagnose import diagnose
    from services.jobs.report import build_report
    from services.jobs.report_schema import report_json
    from services.models import Job
    from services.settings import Settings

    settings = Settings()
    migrate.upgrade(settings)  # the run may predate today's schema, as it predates its rules
    summary = json.loads((run_dir / "summary.json").read_text())
    outcomes = []
    with make_session_factory(make_engine(settings))() as session:
        for entry in summary["outcomes"]:
            side = next(s for s in cases[entry["case"]][1] if s.variant == entry["variant"])
            report = json.loads((run_dir / f"{side.case}-{side.variant}.json").read_text())
            job = session.get(Job, report["job"]["id"])
            if job is None:  # the corpus database was reset since that run
                outcomes.append(
                    Outcome(side, [], entry["seconds"], f"job {report['job']['id']} is not in {STATE / 'data'}")
                )
            else:
                found = [(f.kind, str(f.severity)) for f in diagnose(session, job, settings.thresholds)]
                session.flush()
                report = report_json(build_report(job, settings.thresholds))  # as `--json` writes it
                diagnoses = report["diagnoses"]
                outcomes.append(
                    Outcome(
                        side,
                        found,
                        entry["seconds"],
                        causes=causes_of(diagnoses),
                        cause_texts=cause_texts_of(diagnoses),
                        cause_tests=cause_tests_of(diagnoses),
                        knobs=[d["knob_confirmed"] for d in diagnoses if d.get("knob_confirmed") is not None],
                    )
                )
            _print_outcome(outcomes[-1])
        session.rollback()  # the stored findings stay those of the run
    return _summarize(outcomes, run_dir / "rejudged.json", "rejudge")


def cause_accuracy(outcomes: list[Outcome]) -> dict[str, tuple[int, int, int]]:
    """Per expected cause: the sides whose diagnosis named it, those that named it on the
    right test (or the whole command), and the sides expecting it."""
    table: dict[str, tuple[int, int, int]] = {}
    for outcome in outcomes:
        if outcome.side.expect_cause is None or outcome.error:
            continue
        right, on_test, of = table.get(outcome.side.expect_cause, (0, 0, 0))
        table[outcome.side.expect_cause] = (
            right + bool(outcome.cause_right),
            on_test + bool(outcome.attributed),
            of + 1,
        )
    return table


def _interpreters(outcomes: list[Outcome], executor: str) -> list[str]:
    if executor == "docker":
        return ["the runner image's python3"]
    return sorted({interpreter_version(o.side) for o in outcomes})


def _print_outcome(outcome: Outcome) -> None:
    found = ", ".join(f"{kind}:{severity}" for kind, severity in outcome.found) or "none"
    verdict = "FAIL" if outcome.failed else "ok"
    expected = ", ".join(outcome.side.expect) or "no medium/high finding"
    print(f"{verdict:<4} {outcome.side.name:<34} expected {expected}; found {found} ({outcome.seconds:.0f} s)")
    if outcome.error:
        print(f"     {outcome.error}")
    elif outcome.missed:
        print(f"     missed: {', '.join(outcome.missed)}")
    if outcome.forbidden:
        print(f"     forbidden: {', '.join(f'{kind}:{severity}' for kind, severity in outcome.forbidden)}")
    if outcome.side.expect_cause:
        named = ", ".join(
            kind + (f" ({test})" if test else "")
            for kind, test in zip(outcome.causes, outcome.cause_tests or [None] * len(outcome.causes), strict=True)
        )
        mark = "right" if outcome.cause_right else "WRONG"
        if outcome.cause_right and outcome.attributed is False:
            mark = "WRONG test"
        wanted = outcome.side.expect_cause + (
            f" on {outcome.side.expect_cause_test}" if outcome.side.expect_cause_test else ""
        )
        print(f"     cause: expected {wanted}, diagnosed {named or 'none'} ({mark})")
    if outcome.knob_right is not None and (outcome.side.expect_knob or outcome.knobs):
        turned = ", ".join("confirmed" if knob else "not confirmed" for knob in outcome.knobs) or "none turned"
        wanted = outcome.side.expect_knob or "none turned (a healthy twin)"
        print(f"     knob: expected {wanted}, {turned} ({'right' if outcome.knob_right else 'WRONG'})")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
