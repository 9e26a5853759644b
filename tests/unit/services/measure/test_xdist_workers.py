"""How many processes a pytest command runs its tests in, read from the command, its
configuration file's addopts and PYTEST_ADDOPTS (services/measure/pytest_workers.py): the sum of a run's durations is held against its wall time that many
times over (services/diagnose/timing_disagrees.py)."""

from __future__ import annotations

import pytest

from services.measure.pytest_workers import xdist_workers

PYTEST = ["python3", "-m", "pytest"]


@pytest.mark.parametrize(
    ("arguments", "workers"),
    [
        ([], 1),
        (["-n", "2"], 2),
        (["-n2"], 2),
        (["-n=3"], 3),
        (["--numprocesses", "4"], 4),
        (["--numprocesses=4"], 4),
        (["-n", "0"], 1),  # xdist off
        (["-n", "auto"], 8),  # the machine's CPUs, the most xdist can count
        (["--numprocesses=logical"], 8),
        (["-n", "2", "-n", "3"], 3),  # the last one stands, as in argparse
        (["--tx", "3*popen", "--tx", "popen"], 4),
        (["-n", "4", "-p", "no:xdist"], 1),
        (["-k", "-n", "-m", "slow"], 1),  # values of -k and -m, not options
        (["-qn4"], None),  # bundled flags: not read, so not judged
        (["-n", "many"], None),
        (["-Wignore", "-ra", "-q"], 1),
    ],
)
def test_the_command_s_workers(tmp_path, arguments, workers):
    assert xdist_workers([*PYTEST, *arguments], tmp_path, cpus=8) == workers


def test_auto_counts_what_xdist_is_told_to_where_that_is_more(tmp_path):
    env = {"PYTEST_XDIST_AUTO_NUM_WORKERS": "16"}
    assert xdist_workers(["pytest", "-n", "auto"], tmp_path, env=env, cpus=2) == 16


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pytest.ini", "[pytest]\naddopts = -q -n 3\n"),
        ("tox.ini", "[pytest]\naddopts = -n 3\n"),
        ("setup.cfg", "[tool:pytest]\naddopts = -n 3\n"),
        ("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-n 3"\n'),
        ("pyproject.toml", '[tool.pytest.ini_options]\naddopts = ["-n", "3"]\n'),
    ],
)
def test_the_configuration_s_addopts_come_first_and_the_command_wins(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    assert xdist_workers(PYTEST, tmp_path) == 3
    assert xdist_workers([*PYTEST, "-n", "0"], tmp_path) == 1
    # PYTEST_ADDOPTS comes between the two, as pytest reads them.
    assert xdist_workers(PYTEST, tmp_path, env={"PYTEST_ADDOPTS": "-n 5"}) == 5
    assert xdist_workers([*PYTEST, "-n", "2"], tmp_path, env={"PYTEST_ADDOPTS": "-n 5"}) == 2


def test_the_configuration_a_command_names_is_read(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -n 3\n")
    (tmp_path / "ci.ini").write_text("[pytest]\naddopts = -n 2\n")
    assert xdist_workers([*PYTEST, "-c", "ci.ini"], tmp_path) == 2


def test_an_unreadable_configuration_is_none_of_its_options(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options\n")
    assert xdist_workers(PYTEST, tmp_path) == 1
    assert xdist_workers(PYTEST, tmp_path, env={"PYTEST_ADDOPTS": "-n '2"}) is None  # an unbalanced quote
