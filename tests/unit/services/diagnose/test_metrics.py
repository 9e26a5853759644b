"""A finding's typed numbers: what a rule may state, the JSON stored, and reading it back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.diagnose.metrics import (
    ConfigMedian,
    CpuSensitivityMetrics,
    CpuThrottlingMetrics,
    HotPathGrowthMetrics,
    HotPathProfileMetrics,
    LatencyFlakyDispersedMetrics,
    LatencyFlakyModesMetrics,
    QuotaShare,
    SlowerThanBaseMetrics,
    StoredMetrics,
    metrics_of,
    ratio_of,
)
from services.evidence import ProfiledFunction

DATA = Path(__file__).parents[2] / "data"

THROTTLED = dict(
    throttled_share=0.5,
    nr_periods=40,
    nr_throttled=20,
    median_held_s=0.3,
    median_throttled_s=0.6,
    median_wall_s=1.2,
    cpu_demand=2.0,
    quota_cpus=0.5,
    accounts_s=0.25,
)


def sensitive(**extra) -> CpuSensitivityMetrics:
    return CpuSensitivityMetrics(
        ratio=4.0,
        slower_by_s=0.15,
        slow=ConfigMedian(config="cpus=0.5", median=0.2, ci_low=0.19, ci_high=0.21, n=5, confidence=0.94),
        fast=ConfigMedian(config="cpuset=0", median=0.05, ci_low=0.049, ci_high=0.052, n=5, confidence=0.94),
        medians={"cpuset=0": 0.05, "cpus=0.5": 0.2},
        p_value=0.008,
        fdr=0.05,
        family_size=1,
        method="rank test",
        **extra,
    )


def test_a_misspelt_key_fails_at_the_rule():
    CpuThrottlingMetrics(**THROTTLED)
    with pytest.raises(ValidationError, match="nr_period"):
        CpuThrottlingMetrics(**THROTTLED, nr_period=40)
    with pytest.raises(ValidationError, match="expected"):
        QuotaShare(cpus=0.5, cpu_share=1.0, expected_s=0.1, expected=0.1)


def test_cpu_sensitivity_with_a_quota_stores_the_dict_the_rule_wrote():
    stored = sensitive(quota=QuotaShare(cpus=0.5, cpu_share=1.0, expected_s=0.11)).stored()
    # The rule's dict before it was typed, key for key and in its order: no neighbour_load
    # and no pinned key where the rule added none (not a null).
    expected = {
        "ratio": 4.0,
        "slower_by_s": 0.15,
        "slow": {"config": "cpus=0.5", "median": 0.2, "ci_low": 0.19, "ci_high": 0.21, "n": 5, "confidence": 0.94},
        "fast": {"config": "cpuset=0", "median": 0.05, "ci_low": 0.049, "ci_high": 0.052, "n": 5, "confidence": 0.94},
        "medians": {"cpuset=0": 0.05, "cpus=0.5": 0.2},
        "p_value": 0.008,
        "fdr": 0.05,
        "family_size": 1,
        "method": "rank test",
        "quota": {"cpus": 0.5, "cpu_share": 1.0, "expected_s": 0.11},
    }
    assert stored == expected and list(stored) == list(expected)
    assert list(stored["slow"]) == list(expected["slow"])
    assert isinstance(stored["slow"]["n"], int) and isinstance(stored["family_size"], int)


def test_keys_the_rules_always_wrote_keep_their_null():
    profile = HotPathProfileMetrics(thread="MainThread", samples=10, functions=[], cpu_share=None)
    assert profile.stored() == {"thread": "MainThread", "samples": 10, "functions": [], "cpu_share": None}


def test_a_non_finite_float_stays_a_float_for_the_json_column_to_null():
    stored = LatencyFlakyModesMetrics(ratio=math.inf, fast_runs=[0.0], slow_runs=[0.5], runs=[0.0, 0.5]).stored()
    assert stored["ratio"] == math.inf and stored["pattern"] == "multimodal"
    assert "neighbour_load" not in stored


def test_a_stored_dict_reads_back_as_its_kinds_model():
    metrics = sensitive(quota=QuotaShare(cpus=0.5, cpu_share=1.0, expected_s=0.11))
    read = metrics_of("cpu_sensitivity", metrics.stored())
    assert isinstance(read, CpuSensitivityMetrics) and read == metrics
    assert read.quota is not None and read.quota.expected_s == 0.11 and read.pinned is None
    assert ratio_of(read) == 4.0


def test_a_kind_with_two_producers_reads_back_as_the_one_that_wrote_it():
    function = ProfiledFunction(
        function="f", file="m.py", line=3, own_samples=5, cumulative_samples=8, own_pct=50.0, cumulative_pct=80.0
    )
    grown = HotPathGrowthMetrics(
        functions=[function], per_run_s={"f (m.py)": {"a": 0.2, "b": 0.1}}, accounts_s=0.1, slow_vs_fast="in a ..."
    )
    profiled = HotPathProfileMetrics(thread="MainThread", samples=10, functions=[function], cpu_share=0.9)
    assert metrics_of("hot_path", grown.stored()) == grown
    assert metrics_of("hot_path", profiled.stored()) == profiled
    dispersed = LatencyFlakyDispersedMetrics(iqr_s=0.1, median_s=0.2, runs=[0.1, 0.2, 0.3])
    assert metrics_of("latency_flaky", dispersed.stored()) == dispersed
    assert ratio_of(metrics_of("latency_flaky", dispersed.stored())) is None


def test_an_unknown_kind_or_an_older_shape_is_kept_as_stored():
    unknown = metrics_of("no_such_kind", {"ratio": 2.5, "note": "x"})
    assert isinstance(unknown, StoredMetrics) and unknown.stored() == {"ratio": 2.5, "note": "x"}
    assert ratio_of(unknown) == 2.5
    # A cpu_sensitivity finding built by hand with its ratio alone (tests/services/diagnose/test_inbox.py).
    partial = metrics_of("cpu_sensitivity", {"ratio": 3.0})
    assert isinstance(partial, StoredMetrics) and ratio_of(partial) == 3.0
    assert metrics_of("stall", {}).stored() == {} and metrics_of("stall", None).stored() == {}
    assert ratio_of(metrics_of("slower_since", {"ratio": "oops"})) is None


def test_a_key_an_older_job_stored_is_left_out_and_the_rest_reads_typed():
    # A key no model states any more, at the top and inside a part: the stored JSON keeps
    # it (the report and the API serve the column as stored); the typed read skips it.
    stored = sensitive(quota=QuotaShare(cpus=0.5, cpu_share=1.0, expected_s=0.11)).stored()
    stored["verdict"] = "slower"
    stored["slow"]["mean"] = 0.21
    read = metrics_of("cpu_sensitivity", stored)
    assert isinstance(read, CpuSensitivityMetrics)
    assert read.slow.median == 0.2 and read.quota is not None and read.quota.expected_s == 0.11
    assert "verdict" not in read.stored() and stored["verdict"] == "slower"
    # Where the kind has two producers, the extra key does not make it the other one.
    function = ProfiledFunction(
        function="f", file="m.py", line=3, own_samples=5, cumulative_samples=8, own_pct=50.0, cumulative_pct=80.0
    )
    profiled = HotPathProfileMetrics(thread="MainThread", samples=10, functions=[function], cpu_share=0.9)
    assert metrics_of("hot_path", {**profiled.stored(), "hottest": "f"}) == profiled


def test_a_pull_requests_slowdown_states_its_ratio():
    metrics = SlowerThanBaseMetrics(
        ratio=2.5,
        ratio_low=2.1,
        ratio_high=3.0,
        base_median_s=0.1,
        head_median_s=0.25,
        p_value=0.004,
        base_commit="0123456789abcdef",
    )
    stored = metrics.stored()
    assert list(stored) == [
        "ratio",
        "ratio_low",
        "ratio_high",
        "base_median_s",
        "head_median_s",
        "p_value",
        "base_commit",
    ]
    read = metrics_of("slower_than_base", stored)
    assert read == metrics and ratio_of(read) == 2.5


def test_findings_stored_before_the_models_read_typed_and_store_the_same_json():
    # One finding of each kind and producer the corpus stored while the rules still wrote
    # plain dicts (tests/unit/data/stored-finding-metrics.json, from `make accuracy`'s
    # database): each reads as its model and writes back the same JSON text, an int still
    # an int and a key the rule left out still absent.
    recorded = json.loads((DATA / "stored-finding-metrics.json").read_text())
    assert {entry["kind"] for entry in recorded} >= {
        "busy_polling",
        "command_failed",
        "cpu_sensitivity",
        "cpu_throttling",
        "event_loop_blocked",
        "futex_storm",
        "gil_contention",
        "hot_path",
        "latency_flaky",
        "off_cpu_wait",
        "slow_startup",
        "stall",
        "tiny_reads",
    }
    for entry in recorded:
        read = metrics_of(entry["kind"], entry["metrics"])
        assert type(read).__name__ == entry["model"], entry["kind"]
        assert json.dumps(read.stored()) == json.dumps(entry["metrics"]), entry["kind"]
