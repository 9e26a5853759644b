"""Which two configurations the drill compares for a subject (services/diagnose/pairs.py)."""

from __future__ import annotations

from pathlib import Path

from services.diagnose import pairs
from services.diagnose.context import DrillPair
from services.jobs.drill_targets import drill_targets
from services.measure.samples import collect
from services.settings import Settings
from services.thresholds import Thresholds
from tests.support import jobs

LABELS = ("cpuset=0", "cpuset=0-1", "cpus=0.5")


def _job(walls: dict[str, list[float]], cpu_share: float = 1.0, command=None, tests=None):
    built = jobs.job(command=command, labels=LABELS)
    for config in built.configs:
        if config.label.startswith("cpus="):
            config.cpus = float(config.label.split("=")[1])
        per_test = {name: values[config.label] for name, values in (tests or {}).items()}
        jobs.timing_runs(config, walls[config.label], cpu_share=cpu_share, tests=per_test)
    return built


def _pair(built, test_id=None):
    samples = collect(built)
    summaries = samples.test_summaries(test_id) if test_id else samples.wall_summaries()
    return pairs.choose(samples, Thresholds(), test_id, summaries, [])


def _five(value: float) -> list[float]:
    return [value * f for f in (1.0, 1.01, 0.99, 1.02, 0.98)]


def test_a_slowdown_without_a_quota_is_compared_even_where_the_quota_is_slower():
    # Threads handing work to each other: 50x slower on two cores than on one; under
    # cpus=0.5 slower still, partly for its quota. The symptom lives in cpuset=0-1.
    built = _job({"cpuset=0": _five(0.06), "cpuset=0-1": _five(3.0), "cpus=0.5": _five(6.0)})
    assert _pair(built) == DrillPair("cpuset=0-1", "cpuset=0")


def test_a_quota_slower_than_its_share_is_compared_when_nothing_else_is_slow():
    # One busy CPU takes 2x under cpus=0.5; 5x is more than the quota explains.
    built = _job({"cpuset=0": _five(1.0), "cpuset=0-1": _five(1.0), "cpus=0.5": _five(5.0)})
    assert _pair(built) == DrillPair("cpus=0.5", "cpuset=0")


def test_the_quotas_share_is_never_the_slow_side():
    # Exactly CPU time over the quota: physics. No symptom: the slowest configuration
    # without a quota beside the fastest.
    built = _job({"cpuset=0": _five(1.0), "cpuset=0-1": _five(1.05), "cpus=0.5": _five(2.0)})
    pair = _pair(built)
    assert pair is not None and "cpus=0.5" not in pair.labels


def test_a_flagged_test_of_a_suite_is_drilled_alone_in_its_own_pair():
    walls = {"cpuset=0": _five(1.0), "cpuset=0-1": _five(1.6), "cpus=0.5": _five(3.0)}
    tests = {
        "t.py::test_handoff": {"cpuset=0": 0.05, "cpuset=0-1": 0.6, "cpus=0.5": 1.5},
        "t.py::test_healthy": {"cpuset=0": 0.3, "cpuset=0-1": 0.3, "cpus=0.5": 0.6},
    }
    built = _job(walls, command=["pytest", "t.py"], tests=tests)
    targets = drill_targets(built, Settings(), Path("."))
    assert [t.test_id for t in targets] == ["t.py::test_handoff"]
    assert targets[0].configs == ("cpuset=0-1", "cpuset=0")
    assert targets[0].command[-1].endswith("test_handoff")


def test_only_a_pair_a_symptom_chose_is_compared():
    # The drill's strace probes take one side of a pair nothing compares
    # (services/measure/drill.py _one_side); a slowdown's pair keeps both.
    slowdown = _job({"cpuset=0": _five(0.06), "cpuset=0-1": _five(3.0), "cpus=0.5": _five(6.0)})
    alike = _job({"cpuset=0": _five(0.29), "cpuset=0-1": _five(0.29), "cpus=0.5": _five(0.58)}, cpu_share=1.0)
    assert _pair(slowdown).compared
    pair = _pair(alike)
    assert pair is not None and not pair.compared
    # A fifth of its time in the kernel: the whole command is drilled, for a tracer to judge.
    [target] = drill_targets(alike, Settings(), Path("."))
    assert target.test_id is None and not target.compared
