"""Which of a drilled test's evidence runs add nothing a rule reads (drill._needless)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.measure.drill import Target, _needless
from services.measure.probes.pyspy import ran_event_loop
from services.measure.stats import median_interval
from services.models import Evidence, Job, JobConfig, Run, RunKind
from tests.support import jobs

TEST = "test_app.py::test_slow"


def _job() -> tuple[Job, JobConfig, Target]:
    built = jobs.job(["python", "-m", "pytest", "-q", "test_app.py"])
    summaries = {config.label: median_interval([0.05, 0.05, 0.06]) for config in built.configs}
    target = Target(TEST, ["python", "-m", "pytest", "-q", TEST], summaries, ("cpuset=0-1", "cpuset=0"))
    return built, built.configs[1], target


def _stored(built: Job, config: JobConfig, kind: str, content: dict, probe: str, run_kind=RunKind.evidence) -> None:
    run = Run(kind=run_kind, repetition=1, wall_s=1.0, exit_code=0, probe=probe, test_id=TEST)
    config.runs.append(run)
    built.evidence.append(Evidence(kind=kind, content=content, config=config, run=run, test_id=TEST))


def test_the_whole_command_gets_every_probe():
    built, config, target = _job()
    whole = Target(None, list(built.command), target.summaries)
    assert all(_needless(built, config, whole, name) is None for name in ("imports", "faulthandler", "reads"))


def test_strace_takes_one_side_where_nothing_compares_the_two():
    # A program only a tracer can judge (recv(1) in a loop, alike everywhere): strace's
    # counts are the same on either side, and cost 5x more traced across two cores.
    built, _, target = _job()
    for config in built.configs:
        config.cpuset = config.label.removeprefix("cpuset=") if config.label.startswith("cpuset=") else None
    one_core, two_cores = (next(c for c in built.configs if c.label == label) for label in ("cpuset=0", "cpuset=0-1"))
    alike = Target(None, list(built.command), target.summaries, ("cpuset=0-1", "cpuset=0"), compared=False)
    for name in ("strace", "reads"):
        assert _needless(built, one_core, alike, name) is None
        assert "cpuset=0 alone" in (_needless(built, two_cores, alike, name) or "")
    assert _needless(built, two_cores, alike, "pyspy") is None
    # A test's pair too; but where a symptom compares the two, both sides are traced.
    assert _needless(built, two_cores, replace(target, compared=False), "strace") is not None
    compared = Target(None, list(built.command), target.summaries, ("cpuset=0-1", "cpuset=0"))
    assert _needless(built, two_cores, compared, "strace") is None
    assert _needless(built, two_cores, target, "strace") is None


def test_import_times_are_the_whole_commands_not_a_tests():
    built, config, target = _job()
    assert _needless(built, config, target, "imports") is not None
    assert _needless(built, config, target, "strace") is None
    assert _needless(built, config, target, "pyspy") is None


def test_faulthandler_runs_only_where_the_core_probe_took_no_python_stacks():
    built, config, target = _job()
    assert _needless(built, config, target, "faulthandler") is None
    # The core probe ran, but py-spy was denied ptrace: faulthandler is the fallback.
    _stored(built, config, "pyspy_dump", {"status": "denied", "reason": "ptrace"}, probe="core")
    assert _needless(built, config, target, "faulthandler") is None
    # ... in another configuration, its stacks say nothing of this one.
    _stored(built, built.configs[0], "pyspy_dump", {"status": "ok", "threads": []}, probe="core")
    assert _needless(built, config, target, "faulthandler") is None
    _stored(built, config, "gdb", {"status": "ok", "threads": []}, probe="core")
    assert "core" in (_needless(built, config, target, "faulthandler") or "")


@pytest.mark.parametrize(("event_loop", "needless"), [(True, False), (None, False), (False, True)])
def test_the_asyncio_probe_runs_where_py_spy_saw_a_loop_or_could_not_tell(event_loop, needless):
    built, config, target = _job()
    _stored(built, config, "pyspy", {"status": "ok", "samples": 300, "event_loop": event_loop}, probe="pyspy")
    assert (_needless(built, config, target, "asyncio_loop") is not None) is needless


def _census(built: Job, suspects: list[str], **extra) -> None:
    content = {"status": "ok", "tests": {}, "tests_seen": 40, "suspects": suspects, **extra}
    _stored(built, built.configs[1], "census", content, probe="census", run_kind=RunKind.survey)


def test_reads_are_traced_again_only_where_the_census_suspects_them_or_did_not_finish():
    built, config, target = _job()
    assert _needless(built, config, target, "reads") is None  # no census: a plain screen
    _census(built, suspects=[])
    assert _needless(built, config, target, "reads") is not None
    _census(built, suspects=[TEST])  # a second shard's census suspects it
    assert _needless(built, config, target, "reads") is None


def test_a_census_stopped_before_its_end_clears_no_reads():
    built, config, target = _job()
    _census(built, suspects=[], stopped_before_timeout=True)
    assert _needless(built, config, target, "reads") is None


def _profile(*stacks: list[int]) -> dict:
    frames = [
        {"name": "main", "file": "/app/server.py"},
        {"name": "BaseEventLoop._run_once", "file": "/usr/lib/python3.11/asyncio/base_events.py"},
        {"name": "_run_once", "file": "/app/vendored/base_events.py"},  # not asyncio's
    ]
    return {"shared": {"frames": frames}, "profiles": [{"name": "MainThread", "samples": list(stacks)}]}


def test_py_spy_sees_an_event_loop_by_its_iteration_on_a_sampled_stack():
    assert ran_event_loop(_profile([0], [0, 1]))
    assert not ran_event_loop(_profile([0], [0, 2]))
    assert not ran_event_loop(_profile())


def _census_of_command(built: Job, content: dict, exit_code: int = 0) -> None:
    """A command's census: its warm-up run with the asyncio hook (services/measure/survey_census.py)."""
    run = Run(kind=RunKind.warmup, repetition=1, wall_s=1.0, exit_code=exit_code, timed_out=False)
    built.configs[0].runs.append(run)
    built.evidence.append(Evidence(kind="asyncio_loop", content=content, config=built.configs[0], run=run))


@pytest.mark.parametrize(
    ("census", "exit_code", "needless"),
    [
        (None, 0, False),  # no census (probes named, or a pytest suite's): the drill looks
        ({"status": "unavailable", "reason": "no process of the command ran an asyncio event loop"}, 0, True),
        ({"status": "ok", "callbacks": 556, "blocked_s": 0.0, "held_s": 0.0}, 0, False),  # a loop ran
        ({"status": "unavailable", "reason": "no process ..."}, 1, False),  # it failed before any loop?
    ],
)
def test_the_whole_command_skips_the_asyncio_probe_where_its_census_ran_no_loop(census, exit_code, needless):
    built, config, target = _job()
    whole = Target(None, list(built.command), target.summaries)
    if census is not None:
        _census_of_command(built, census, exit_code)
    reason = _needless(built, config, whole, "asyncio_loop")
    assert (reason is not None) is needless, reason
    assert _needless(built, config, whole, "pyspy") is None
