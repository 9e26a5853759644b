"""Container escape by link: each run_dir is the container's to write, and the worker
opens fixed names in it afterwards. The container plants links (and a FIFO) at those
names pointing at host files; the worker must neither read nor write through them."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

from services.measure.configs import CpuConfig
from services.measure.executors.base import RunRequest
from services.measure.executors.docker import DockerExecutor
from services.measure.probes.pyspy import FLAMEGRAPH_FILE
from services.settings import Settings
from tests.security.conftest import docker_ready
from tests.service_support import make_repository

# Inside the container, the command's stdout is output.log in the run_dir's mount.
RUN_DIR = "import os; run_dir = os.path.dirname(os.readlink('/proc/self/fd/1'))"


def test_output_log_linked_to_a_host_file_is_not_read_back(service, tmp_path):
    host_file = tmp_path / "host-only-secret.txt"
    host_file.write_text("HOST-CANARY-3b71\n")
    url, _ = make_repository(tmp_path / "repo", None)
    plant = (
        f"{RUN_DIR}; import sys; out = os.readlink('/proc/self/fd/1'); os.unlink(out); "
        f"os.symlink({str(host_file)!r}, out); sys.exit(5)"  # 5: planted
    )
    response = service.submit(
        {
            "repository": {"url": url},
            "command": ["python3", "-c", plant],
            "configs": ["cpuset=0"],
            "repeat": 1,
            "evidence": [],
        }
    )
    job = service.wait(response.get_json()["id"])
    assert [run["exit_code"] for run in job["report"]["failed_runs"]] == [5], job["report"]["failed_runs"]
    assert "HOST-CANARY-3b71" not in json.dumps(job)


def test_a_flame_graph_name_linked_to_a_pth_file_does_not_write_into_site_packages(service, tmp_path):
    # A .pth line starting with `import` runs in every interpreter the worker starts.
    pth = Path(sysconfig.get_paths()["purelib"]) / "lagtrace_security_test_pwned.pth"
    pth.unlink(missing_ok=True)
    url, _ = make_repository(tmp_path / "repo", None)
    plant = (
        f"{RUN_DIR}; import time; os.symlink({str(pth)!r}, os.path.join(run_dir, {FLAMEGRAPH_FILE!r})); "
        "time.sleep(1); raise SystemExit(7)"  # 7: the link was planted
    )
    try:
        response = service.submit(
            {
                "repository": {"url": url},
                "command": ["python3", "-c", plant],
                "configs": ["cpuset=0"],
                "repeat": 1,
                "evidence": ["pyspy"],
            }
        )
        job = service.wait(response.get_json()["id"])
        assert job["status"] == "done", job["error"]
        profiles = [e for e in job["report"]["evidence"] if e["kind"] == "pyspy"]
        # py-spy did profile the run, so the flame graph was written after it...
        assert profiles and profiles[0]["content"]["status"] == "ok", profiles
        assert [run["exit_code"] for run in job["report"]["failed_runs"]] == [7], job["report"]["failed_runs"]
        assert not pth.exists() and not pth.is_symlink()
    finally:
        pth.unlink(missing_ok=True)


PLANT_EVERYWHERE = f"""
{RUN_DIR}
targets = {{"output.log": "/etc/shadow", "pyspy-flamegraph.svg": "/etc/passwd", "core.1": "/etc/hostname",
           "junit.xml": "/etc/hosts", "strace-summary.txt": "/proc/self/environ"}}
for name, target in targets.items():
    path = os.path.join(run_dir, name)
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)
os.mkdir(os.path.join(run_dir, "nested"))
os.symlink("/", os.path.join(run_dir, "nested", "root"))
os.mkfifo(os.path.join(run_dir, "fifo"))
open(os.path.join(run_dir, "kept.txt"), "w").write("a plain file stays")
raise SystemExit(1)
"""


def test_after_a_run_no_link_or_special_file_is_left_in_the_run_dir(tmp_path):
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}")
    docker_ready(settings)
    tmp_path.chmod(0o755)
    workdir = tmp_path / "work"
    workdir.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    executor = DockerExecutor(settings)
    result = executor.run(
        RunRequest(["python3", "-c", PLANT_EVERYWHERE], workdir, CpuConfig("all"), run_dir, 60, job_id=0)
    )
    assert result.exit_code == 1
    left = sorted(str(path.relative_to(run_dir)) for path in run_dir.rglob("*"))
    assert left == ["kept.txt", "nested"], left
    assert (run_dir / "kept.txt").read_text() == "a plain file stays"
    assert result.output_tail is None or "root:" not in result.output_tail
