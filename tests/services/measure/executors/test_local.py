"""The local executor, for real: affinity, cgroup quotas, rusage, timeouts, bad commands."""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.errors import BadInput
from services.measure.configs import CpuConfig
from services.measure.executors.base import RunRequest
from services.measure.executors.local import LocalExecutor
from services.settings import Settings

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {seconds}: pass\n"


def run(executor, tmp_path, code, config=CpuConfig("all"), timeout_s=None):
    run_dir = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    run_dir.mkdir()
    request = RunRequest([sys.executable, "-c", code], tmp_path, config, run_dir, timeout_s)
    return executor.run(request)


@pytest.fixture
def executor(settings):
    return LocalExecutor(settings)


def test_pinning_is_applied_to_the_command(executor, tmp_path):
    out = tmp_path / "affinity.json"
    code = f"import json, os; json.dump(sorted(os.sched_getaffinity(0)), open({str(out)!r}, 'w'))"
    run(executor, tmp_path, code, CpuConfig("cpuset=0", cpuset=(0,)))
    assert json.loads(out.read_text()) == [0]


def test_rusage_exit_code_and_failure_output_are_recorded(executor, tmp_path):
    result = run(executor, tmp_path, BURN.format(seconds=0.2) + "print('bye'); raise SystemExit(3)")
    assert result.exit_code == 3
    assert result.user_s + result.sys_s >= 0.18
    assert result.wall_s >= 0.18
    assert result.max_rss_kb > 1000
    assert result.voluntary_ctx_switches + result.involuntary_ctx_switches >= 0
    assert "bye" in result.output_tail
    assert result.nr_periods is None  # no quota, no cgroup


def test_timeout_kills_the_whole_process_group(executor, tmp_path):
    marker = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    result = run(executor, tmp_path, code, timeout_s=1.0)
    assert result.timed_out
    assert result.exit_code == -9
    assert result.wall_s < 30
    child = int(marker.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the command's child outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie is dead, only waiting for init to reap it


@pytest.mark.latency
def test_half_a_cpu_quota_throttles_and_doubles_cpu_bound_wall_time(executor, tmp_path):
    if executor.quota_unsupported_reason():
        pytest.fail(f"this machine is documented to support cgroup quotas: {executor.quota_unsupported_reason()}")
    half, whole = [], []
    throttled = []
    for _ in range(3):
        result = run(executor, tmp_path, BURN.format(seconds=0.6), CpuConfig("cpus=0.5", cpus=0.5))
        half.append(result.wall_s)
        throttled.append((result.nr_throttled, result.nr_periods, result.throttled_s))
        whole.append(run(executor, tmp_path, BURN.format(seconds=0.6), CpuConfig("cpus=1", cpus=1.0)).wall_s)
    ratio = statistics.median(half) / statistics.median(whole)
    assert 1.6 < ratio < 2.6, (half, whole)
    for nr_throttled, nr_periods, throttled_s in throttled:
        assert nr_periods >= 5 and nr_throttled >= nr_periods // 2 and throttled_s > 0.2


@pytest.mark.latency
def test_the_kernels_count_of_the_wait_for_a_cpu_accounts_for_a_run_behind_a_busy_loop(executor, tmp_path):
    # 0.3 s of CPU on core 0, with a busy loop pinned there: the run waits about as long
    # as it computes, and its wall time is its CPU time plus that wait.
    pinned = CpuConfig("cpuset=0", cpuset=(0,))
    alone = run(executor, tmp_path, BURN.format(seconds=0.3), pinned)
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    try:
        behind = run(executor, tmp_path, BURN.format(seconds=0.3), pinned)
    finally:
        loop.kill()
        loop.wait()
    assert alone.run_delay_s is not None and alone.run_delay_s < 0.1
    assert behind.run_delay_s is not None and behind.run_delay_s > 0.15
    cpu_s = behind.user_s + behind.sys_s
    assert behind.wall_s == pytest.approx(cpu_s + behind.run_delay_s, abs=0.1)


def test_unenforceable_quota_is_refused_not_ignored(tmp_path):
    executor = LocalExecutor(Settings(database_url="sqlite://", cgroup_root=tmp_path / "no-cgroups"))
    reason = executor.quota_unsupported_reason()
    assert reason and "no writable cgroup" in reason
    with pytest.raises(BadInput, match="cannot be enforced"):
        run(executor, tmp_path, "pass", CpuConfig("cpus=0.5", cpus=0.5))


@pytest.mark.parametrize(
    "command, message",
    [
        ([], "no command given"),
        (["definitely-not-a-program-xyz"], "not found on PATH"),
        (["./missing.sh"], "no such file"),
    ],
)
def test_commands_that_cannot_start_are_bad_input(executor, tmp_path, command, message):
    with pytest.raises(BadInput, match=message):
        executor.check_command(command, tmp_path)


def test_non_executable_file_is_bad_input(executor, tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(BadInput, match="not executable"):
        executor.check_command(["./script.sh"], tmp_path)


def test_missing_workdir_is_bad_input(executor, tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        executor.check_command(["true"], tmp_path / "nowhere")
