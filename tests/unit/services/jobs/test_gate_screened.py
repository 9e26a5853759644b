"""What a gate job's matrix screens, and so what its drill traces: the tests that went on
(services/jobs/gate.py screened). Drilling the whole suite for one test's move cost a
60 s suite 325 s of evidence runs and snapshot a test that never moved."""

from __future__ import annotations

import sys
from pathlib import Path

from services.jobs import gate
from services.models import Job, JobKind

COMMAND = [sys.executable, "-m", "pytest", "-q"]


def gate_job(kind: JobKind, went_on: dict[str, bool]) -> Job:
    result = gate.GateResult("cpuset=0-1", "main", 9)
    for test, on in went_on.items():
        row = gate.GateTest(test, gate.REGRESSED if on else gate.UNCHANGED, 12, [2, 1], [0.1])
        row.went_on = on
        result.tests.append(row)
    return Job(kind=kind, command=COMMAND, executor="local", gate=result.as_json())


def suite(tmp_path: Path) -> Path:
    (tmp_path / "test_a.py").write_text("def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    return tmp_path


def test_a_gate_that_sent_some_tests_on_is_screened_and_drilled_on_those_alone(tmp_path):
    job = gate_job(JobKind.gate, {"test_a.py::test_one": True, "test_a.py::test_two": False})
    narrowed = gate.screened(job, suite(tmp_path))
    assert narrowed is not job
    assert narrowed.command == [*COMMAND, "test_a.py::test_one"]
    assert narrowed.id == job.id and narrowed.configs is job.configs  # the job's own rows


def test_the_whole_command_where_every_test_went_on_none_did_or_it_is_no_gate(tmp_path):
    folder = suite(tmp_path)
    every = gate_job(JobKind.gate, {"test_a.py::test_one": True, "test_a.py::test_two": True})
    none = gate_job(JobKind.gate, {"test_a.py::test_one": False, "test_a.py::test_two": False})
    matrix = gate_job(JobKind.matrix, {"test_a.py::test_one": True, "test_a.py::test_two": False})
    declined = Job(kind=JobKind.gate, command=COMMAND, executor="local", gate=None)
    for job in (every, none, matrix, declined):
        assert gate.screened(job, folder) is job
