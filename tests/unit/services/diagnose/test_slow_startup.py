"""slow_startup judged on recorded pytest timings and -X importtime output."""

from __future__ import annotations

from services.diagnose import slow_startup
from services.measure.probes import imports
from tests.support import jobs

PYTEST = ["python", "-m", "pytest", "-q", "test_fast.py"]
TESTS = {f"test_fast.py::test_square[{n}]": 0.0003 for n in range(10)}


def _job(walls_by_label: dict[str, list[float]], importtime: str | None = None, command: list[str] = PYTEST):
    built = jobs.job(command, labels=tuple(walls_by_label))
    for config in built.configs:
        jobs.timing_runs(config, walls_by_label[config.label], cpu_share=0.95, tests=TESTS)
    if importtime is not None:
        total, slowest = imports.parse(importtime)
        content = {"status": "ok", "total_import_s": total, "slowest": slowest}
        jobs.evidence(built, built.configs[0], "imports", content, wall_s=1.2)
    return built


IMPORTTIME = "\n".join(
    [
        "import time: self [us] | cumulative | imported package",
        "import time:      2000 |     120000 | _pytest.main",
        "import time:      1500 |     260000 | hypothesis",
        "import time:      1000 |     180000 | faker",
        "import time:       900 |      90000 | pytest_benchmark.plugin",
        "import time:       100 |      15000 | json",
        "import time:        50 |       4000 |   json.decoder",
    ]
)


def test_plugin_autoload_that_is_most_of_a_short_run_is_named_with_its_plugins():
    built = _job({"cpuset=0": [1.1, 1.15, 1.12], "cpus=0.5": [2.3, 2.4, 2.35]}, IMPORTTIME)
    [finding] = slow_startup.check(jobs.context(built))
    assert finding.config_label == "cpuset=0"  # the fastest start-up, not the quota's
    assert finding.metrics.stored()["share"] > 0.95 and finding.severity == "medium"
    assert finding.metrics.stored()["accounts_s"] == finding.metrics.stored()["startup_s"]
    modules = [entry["module"] for entry in finding.metrics.stored()["slowest"]]
    assert modules[:3] == ["hypothesis", "faker", "pytest_benchmark.plugin"]
    assert "_pytest.main" not in modules and "json" not in modules
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1" in finding.detail


def test_start_up_under_a_second_still_counts_when_it_is_the_run():
    built = _job({"cpuset=0": [0.7, 0.72, 0.71]})
    [finding] = slow_startup.check(jobs.context(built))
    assert finding.severity == "low"


def test_pytest_own_start_up_is_no_finding():
    # pytest with no plugins: ~0.3 s here, even when it is all of a tiny suite's run;
    # under half a core it doubles, which is the quota's factor and not a finding.
    built = _job({"cpuset=0": [0.3, 0.31, 0.3], "cpus=0.5": [0.62, 0.6, 0.61]})
    assert slow_startup.check(jobs.context(built)) == []


# jsonschema 4.22's own suite (397 tests), recorded: pytest's modules and the suite's
# own package; no plugin at all.
SUITE_IMPORTTIME = "\n".join(
    [
        "import time: self [us] | cumulative | imported package",
        "import time:      2000 |      80000 | _pytest.main",
        "import time:      1500 |      40000 | pluggy",
        "import time:      1000 |      56417 | jsonschema.tests",
        "import time:       100 |      15000 | json",
    ]
)


def test_collection_that_imports_do_not_explain_gets_no_plugin_advice():
    # 0.60 s outside the tests, 0.056 s of it the suite's own imports: pytest and
    # collection, the ordinary price of a pytest run of that size.
    built = _job({"cpuset=0-1": [0.83, 0.84, 0.82], "cpus=0.5": [1.66, 1.7, 1.6]}, SUITE_IMPORTTIME)
    assert slow_startup.check(jobs.context(built)) == []


def test_a_second_of_collection_is_named_as_collection():
    built = _job({"cpuset=0-1": [2.2, 2.25, 2.2]}, SUITE_IMPORTTIME)
    [finding] = slow_startup.check(jobs.context(built))
    assert finding.metrics.stored()["plugins_s"] < 0.25 * finding.metrics.stored()["startup_s"]
    assert "collecting the tests" in finding.detail
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in finding.detail


# faker_randomly's healthy twin in a container, recorded: its own plugin, named with -p,
# builds Faker's six-locale instance at import, on purpose.
NAMED_IMPORTTIME = "\n".join(
    [
        "import time: self [us] | cumulative | imported package",
        "import time:      2000 |     120000 | _pytest.main",
        "import time:      1000 |     573000 | warm_faker",
        "import time:        50 |        300 | pytest_randomly.compat",
    ]
)


def test_plugins_the_command_names_with_p_are_not_told_to_be_unloaded():
    command = ["python", "-m", "pytest", "-q", "-p", "no:faker", "-p", "warm_faker", "test_signup.py"]
    built = _job({"cpuset=0-1": [1.06, 1.07, 1.05]}, NAMED_IMPORTTIME, command)
    [finding] = slow_startup.check(jobs.context(built))
    assert "loads by name (warm_faker, -p)" in finding.detail
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in finding.detail
    # The same imports autoloaded (not named): unloading them is the advice.
    built = _job({"cpuset=0-1": [1.06, 1.07, 1.05]}, NAMED_IMPORTTIME)
    [finding] = slow_startup.check(jobs.context(built))
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1" in finding.detail
