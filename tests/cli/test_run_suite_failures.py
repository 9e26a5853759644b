"""`lagtrace run` on a pytest suite that cannot run: named for what it is, after one run."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import run_cli

PYTEST = [sys.executable, "-m", "pytest", "-q"]
CONFIGS = ["--config", "cpuset=0", "--config", "cpuset=0-1", "--config", "cpus=1"]


def _run(suite, sqlite_url, tmp_path):
    out = tmp_path / "out.json"
    options = ["--executor", "local", *CONFIGS, "--repeat", "5", "--workdir", str(suite), "--json", str(out)]
    result = run_cli(["run", *options, "--", *PYTEST], sqlite_url)
    assert result.returncode == 0, result.stderr
    return result, result.report(out)


def _runs(report) -> int:
    # The census traces the survey's first run: it is listed apart from the timing runs.
    return sum(
        len(config["runs"]) + len(config["warmup_runs"]) + len(config["traced_runs"]) for config in report["configs"]
    )


@pytest.fixture
def suite(tmp_path):
    made = tmp_path / "suite"
    made.mkdir()
    return made


def test_a_collection_error_is_one_run_one_finding_with_its_exception(suite, sqlite_url, tmp_path):
    (suite / "test_broken.py").write_text("import nonexistent_module\n\n\ndef test_broken():\n    pass\n")
    (suite / "test_ok.py").write_text("def test_ok():\n    pass\n")
    result, report = _run(suite, sqlite_url, tmp_path)
    # One run, not 3 configurations x (warm-up + 5): every other would fail the same way.
    assert _runs(report) == 1, report["configs"]
    [failed] = [f for f in report["findings"] if f["kind"] == "command_failed"]
    assert "collection error" in failed["title"] and "test_broken.py" in failed["title"]
    assert "ModuleNotFoundError: No module named 'nonexistent_module'" in failed["detail"]
    assert failed["config"] is None and failed["metrics"]["failure"] == "collection_error"
    # No "failing test" that never ran, and no test of that name at all.
    assert "Failing tests" not in result.stdout and "test_broken.py::" not in result.stdout
    assert not [t for t in report["tests"] if "test_broken" in t["id"]]
    assert any("the screen stopped after its first run" in note for note in report["notes"]), report["notes"]
    # pytest's cache is off: no warning about it, nothing written into the checkout.
    assert "PytestCacheWarning" not in result.stdout and not (suite / ".pytest_cache").exists()


def test_a_suite_that_collects_nothing_is_named_after_one_run(suite, sqlite_url, tmp_path):
    (suite / "helpers.py").write_text("def helper():\n    return 1\n")
    result, report = _run(suite, sqlite_url, tmp_path)
    assert _runs(report) == 1, report["configs"]
    [failed] = [f for f in report["findings"] if f["kind"] == "command_failed"]
    assert failed["title"].endswith("no tests collected (pytest exit 5)") and failed["severity"] == "high"
    assert "no tests collected" in result.stdout


def test_a_job_that_fails_prints_a_report_that_says_so_first(sqlite_url, tmp_path):
    # The node's lock directory cannot be made (a file is in its way): the job fails before
    # its screen, after it was stored.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    out = tmp_path / "out.json"
    options = ["--executor", "local", "--config", "cpuset=0", "--repeat", "2", "--json", str(out)]
    result = run_cli(
        ["run", *options, "--", sys.executable, "-c", "pass"],
        sqlite_url,
        env={"LAGTRACE_NODE_LOCK_PATH": str(blocker / "locks")},
    )
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    # Not an empty stdout, nor a clean-looking "Findings: none": the failure, first.
    assert lines[0].startswith("lagtrace job ") and lines[2].startswith("JOB FAILED: NotADirectoryError"), lines
    assert "Findings: none" not in lines and "Findings: none (the job failed before any were made)" in lines
    assert result.report(out)["job"]["status"] == "failed"
    assert "lagtrace: failed: NotADirectoryError" in result.stderr
