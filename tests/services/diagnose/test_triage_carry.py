"""Fingerprints group a problem across jobs, and triage decisions follow the problem."""

import sys

from sqlalchemy import create_engine, update
from sqlalchemy.orm import Session

from services.models import Finding, TriageStatus
from tests.conftest import EXAMPLES, run_cli

# steady.py waits ~0.3 s on ~0.03 s of CPU: with the wall minimum lowered it is a
# cheap, deterministic off_cpu_wait finding.
CHEAP_FINDING = {"LAGTRACE_THRESHOLDS__OFF_CPU_MIN_WALL_S": "0.1"}
ARGS = ["run", "--executor", "local", "--config", "cpuset=0", "--repeat", "3"]  # sys.executable: host only


def job(tmp_path, database_url, name, command=(sys.executable, str(EXAMPLES / "steady.py"))):
    out = tmp_path / f"{name}.json"
    result = run_cli([*ARGS, "--json", str(out), "--", *command], database_url, env=CHEAP_FINDING)
    assert result.returncode == 0, result.stderr
    [finding] = [f for f in result.report(out)["findings"] if f["kind"] == "off_cpu_wait"]
    return finding, result


def set_status(database_url, finding_id, status):
    engine = create_engine(database_url)
    with Session(engine) as session:
        session.execute(update(Finding).where(Finding.id == finding_id).values(status=status, assignee="ana"))
        session.commit()
    engine.dispose()


def test_same_problem_same_fingerprint_and_triage_follows_it(database_url, tmp_path):
    if database_url.startswith("postgresql"):
        assert run_cli(["migrate"], database_url).returncode == 0
    first, _ = job(tmp_path, database_url, "first")
    second, _ = job(tmp_path, database_url, "second")
    assert first["fingerprint"] == second["fingerprint"]
    assert first["id"] != second["id"]
    assert second["status"] == "new" and not second["regression"]

    set_status(database_url, second["id"], TriageStatus.muted)
    third, _ = job(tmp_path, database_url, "third")
    assert third["status"] == "muted"

    set_status(database_url, third["id"], TriageStatus.fixed)
    fourth, result = job(tmp_path, database_url, "fourth")
    assert fourth["status"] == "new" and fourth["regression"]
    assert "REGRESSION" in result.stdout

    other, _ = job(tmp_path, database_url, "other", command=(sys.executable, str(EXAMPLES / "steady.py"), "--other"))
    assert other["fingerprint"] != first["fingerprint"]  # another command is another problem
