"""The benchmark harness (`make bench`): a missed target is reported, a broken benchmark
fails the run, and the figures' intervals cover what they estimate."""

from __future__ import annotations

import json
import random

import pytest

from tests.bench import run as harness
from tests.bench.figures import Figure, percentile, quantile_figure, ratio_figure


def slow_but_working(quick: bool) -> dict:
    return {"figures": [Figure("p95", 900.0, "ms", 850.0, 950.0, "< 300 ms", False, 40)], "rounds": 3}


def raising(quick: bool) -> dict:
    raise RuntimeError("the workload crashed")


def without_its_figure(quick: bool) -> dict:
    return {"figures": [{"name": "something else", "value": 1.0, "unit": "x"}]}


def plain_numbers(quick: bool) -> dict:
    return {"rate": 0.004, "jobs": 1000, "meets_target": True, "label": "text"}


@pytest.fixture
def registry(monkeypatch):
    def use(*benchmarks: harness.Benchmark) -> None:
        monkeypatch.setattr(harness, "BENCHMARKS", list(benchmarks))

    return use


def test_a_missed_target_is_printed_and_does_not_fail_the_run(registry, tmp_path, capsys):
    registry(harness.Benchmark("load", f"{__name__}:slow_but_working", ("p95",)))
    assert harness.main(["--quick", "--json", str(tmp_path / "bench.json")]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("load"))
    assert line.split()[1:7] == ["p95", "900", "ms", "850", "..", "950"]
    assert " NO " in line
    written = json.loads((tmp_path / "bench.json").read_text())
    assert written["quick"] is True and written["machine"]["nproc"] >= 1
    [benchmark] = written["benchmarks"]
    assert benchmark["error"] is None and benchmark["detail"] == {"rounds": 3}
    assert benchmark["figures"][0]["met"] is False


@pytest.mark.parametrize(
    ("function", "why"),
    [("raising", "RuntimeError: the workload crashed"), ("without_its_figure", "missing figure 'p95'")],
)
def test_a_broken_benchmark_fails_the_run_and_the_others_still_run(registry, tmp_path, capsys, function, why):
    registry(
        harness.Benchmark("broken", f"{__name__}:{function}", ("p95",)),
        harness.Benchmark("load", f"{__name__}:slow_but_working", ("p95",)),
    )
    assert harness.main(["--json", str(tmp_path / "bench.json")]) == 1
    out = capsys.readouterr().out
    assert f"BROKEN: {why}" in out
    assert any(line.startswith("load") and "900" in line for line in out.splitlines())
    written = json.loads((tmp_path / "bench.json").read_text())
    assert why in written["benchmarks"][0]["error"] and written["benchmarks"][1]["error"] is None


def test_a_dict_of_plain_numbers_becomes_figures_without_targets(registry, tmp_path):
    registry(harness.Benchmark("sim", f"{__name__}:plain_numbers", ("rate",)))
    assert harness.main(["--json", str(tmp_path / "bench.json")]) == 0
    figures = json.loads((tmp_path / "bench.json").read_text())["benchmarks"][0]["figures"]
    assert [(f["name"], f["value"], f["met"]) for f in figures] == [("rate", 0.004, None), ("jobs", 1000.0, None)]


def test_only_names_known_benchmarks(registry, tmp_path):
    registry(harness.Benchmark("load", f"{__name__}:slow_but_working"))
    with pytest.raises(SystemExit):
        harness.main(["--only", "nope", "--json", str(tmp_path / "bench.json")])


def test_the_ratio_interval_covers_the_true_ratio_and_the_target_is_judged_on_the_point():
    rng = random.Random(1)
    # Two sides 3 % apart with 2 % noise: inside a 5 % target, and the interval says so.
    measured = [1.03 * rng.gauss(1, 0.02) for _ in range(40)]
    plain = [rng.gauss(1, 0.02) for _ in range(40)]
    figure = ratio_figure("ratio", measured, plain, within=0.05)
    assert figure.low is not None and figure.high is not None
    assert figure.low < 1.03 < figure.high
    assert figure.high - figure.low < 0.03
    assert figure.met is True and figure.target == "0.95-1.05"
    assert ratio_figure("ratio", [x * 1.2 for x in plain], plain, within=0.05).met is False


def test_too_few_samples_give_no_interval_rather_than_a_made_up_one():
    figure = quantile_figure("median", [0.5, 0.7], 50, below=1.0)
    assert (figure.value, figure.low, figure.high, figure.met) == (pytest.approx(0.6), None, None, True)


def test_percentile_interpolates_like_numpy():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10, 20, 30, 40, 50], 95) == pytest.approx(48.0)
    assert percentile([7], 95) == 7


def test_the_false_positive_simulation_reads_as_figures():
    result = {
        "jobs": 1000,
        "tests_per_job": 10,
        "worst_false_per_test": 0.0044,
        "target_false_per_test": 0.01,
        "rows": [
            {"noise": "quiet", "repeat": 5, "smallest_slowdown_80": 2.5},
            {"noise": "bimodal", "repeat": 5, "smallest_slowdown_80": None},
        ],
    }
    rate, quiet, bimodal = harness._from_false_positives(result)
    assert (rate.value, rate.met, rate.n) == (pytest.approx(0.44), True, 10_000)
    assert quiet.value == 2.5 and bimodal.note == "> 10x"


def _stall_result(witnessed: int, snapshots: int) -> dict:
    return {
        "runs": 20,
        "snapshots": snapshots,
        "witnessed_gil_wait": witnessed,
        "freeze_delay_median_s": 0.002 if snapshots else None,
        "frozen_median_s": 0.31 if snapshots else None,
        "rss_mb_median": 160 if snapshots else None,
        "stall_after_s": 0.9,
        "default_stall_after_s": 8.0,
        "slow_median_s": 2.1,
        "fast_median_s": 0.8,
    }


def test_the_stall_benchmark_reads_as_percentages_and_no_snapshot_at_all_is_broken():
    seen, delay, frozen = harness._from_stall({"local": _stall_result(witnessed=19, snapshots=20)})
    assert (seen.value, seen.met) == (95.0, True)
    assert (delay.value, delay.met) == (pytest.approx(2.0), True)
    assert (frozen.value, frozen.met, frozen.n) == (pytest.approx(310.0), True, 20)
    assert "deadline 0.90 s (default 8.00 s)" in seen.note
    # Every run ended before its deadline: nothing was measured, the benchmark is broken.
    stall = next(b for b in harness.BENCHMARKS if b.name == "stall")
    problems = harness._problems(stall, harness._from_stall({"local": _stall_result(witnessed=0, snapshots=0)}))
    assert "figure 'deadline to freeze, local' has no value" in problems


def test_the_simulations_and_the_measurements_split_into_two_runs_that_cover_all(registry, tmp_path):
    """CI runs the simulations beside its parallel tier and the rest alone: together, every
    benchmark of the quick run, none twice."""
    registry(
        harness.Benchmark("measured", f"{__name__}:slow_but_working", ("p95",)),
        harness.Benchmark("drawn", f"{__name__}:plain_numbers", simulated=True),
    )
    ran = {}
    for which in ("only", "none"):
        out = tmp_path / f"{which}.json"
        assert harness.main(["--quick", "--simulated", which, "--json", str(out)]) == 0
        ran[which] = [b["name"] for b in json.loads(out.read_text())["benchmarks"]]
    assert ran == {"only": ["drawn"], "none": ["measured"]}


def test_the_registered_simulations_time_nothing():
    """Only benchmarks that draw their durations may run beside other work."""
    simulated = {b.name for b in harness.BENCHMARKS if b.simulated}
    assert simulated == {"pr_power", "gate", "false_positives", "change_points"}
    assert all(b.in_quick for b in harness.BENCHMARKS if b.simulated)
