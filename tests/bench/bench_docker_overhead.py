"""Does lagtrace's docker executor change the time it measures? A side-by-side benchmark.

The same workload runs, interleaved, (a) as a timing run of lagtrace's docker executor
and (b) as a plain `docker run` with the same flags (image, user, read-only root,
tmpfs, no network, capabilities, limits, cpuset). The workload times itself, so the
two sides are compared on the same clock: the ratio of medians is lagtrace's overhead
on measured test time (target: within 5 %). lagtrace's own measurement (wall_s, taken
by the in-container timer) and the host's view of `docker run` (container start-up
included) are printed beside it.

    .venv/bin/python tests/bench/bench_docker_overhead.py [--repeat 15] [--cpuset 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from services.measure.configs import CpuConfig  # noqa: E402
from services.measure.executors.base import RunRequest  # noqa: E402
from services.measure.executors.docker import RUNNER_USER, DockerExecutor  # noqa: E402
from services.settings import Settings  # noqa: E402

# CPU work, small syscalls and thread hand-offs: the kinds of time tests spend.
WORKLOAD = r"""
import json, os, queue, threading, time
started = time.perf_counter()
total = 0
for i in range(1_500_000):
    total += i * i
for _ in range(3_000):
    os.stat("/")
ping, pong = queue.Queue(), queue.Queue()
def echo():
    while (item := ping.get()) is not None:
        pong.put(item)
thread = threading.Thread(target=echo); thread.start()
for i in range(300):
    ping.put(i); pong.get()
ping.put(None); thread.join()
print(json.dumps({"elapsed_s": time.perf_counter() - started}))
"""


def plain_docker_run(settings: Settings, image: str, cpuset: str, workdir: Path) -> tuple[float, float]:
    """The workload's own time and the host's wall time of `docker run`."""
    argv = [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "--read-only",
        "--tmpfs",
        f"/tmp:rw,exec,nosuid,nodev,size={settings.docker_tmpfs_size}",
        "--cap-drop",
        "ALL",
        "--cap-add",
        "SYS_PTRACE",
        "--security-opt",
        "no-new-privileges",
        "--user",
        RUNNER_USER,
        "--memory",
        settings.docker_memory,
        "--memory-swap",
        settings.docker_memory,
        "--pids-limit",
        str(settings.docker_pids_limit),
        "--cpuset-cpus",
        cpuset,
        "-e",
        "HOME=/tmp",
        "-e",
        "PYTHONDONTWRITEBYTECODE=1",
        "-v",
        f"{workdir}:{workdir}:ro",
        "-w",
        str(workdir),
        image,
        "python3",
        "-c",
        WORKLOAD,
    ]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    host_s = time.perf_counter() - started
    return json.loads(done.stdout.strip().splitlines()[-1])["elapsed_s"], host_s


def lagtrace_run(executor: DockerExecutor, config: CpuConfig, workdir: Path, number: int) -> tuple[float, float]:
    """The workload's own time and lagtrace's measured wall time of the command."""
    run_dir = workdir / f"run{number}"
    run_dir.mkdir()
    result = executor.run(RunRequest(["python3", "-c", WORKLOAD], workdir, config, run_dir))
    if result.exit_code != 0:
        raise SystemExit(f"lagtrace run failed: {result.output_tail}")
    output = (run_dir / "output.log").read_text().strip().splitlines()[-1]
    return json.loads(output)["elapsed_s"], result.wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--cpuset", default="0")
    args = parser.parse_args()

    settings = Settings()
    executor = DockerExecutor(settings)
    config = CpuConfig(f"cpuset={args.cpuset}", cpuset=tuple(int(c) for c in args.cpuset.split(",")))
    with tempfile.TemporaryDirectory(prefix="lagtrace-bench-") as scratch:
        workdir = Path(scratch)
        workdir.chmod(0o755)
        lagtrace_self, lagtrace_wall, plain_self, plain_host = [], [], [], []
        # Interleaved, so drift on a shared machine spreads over both sides.
        for number in range(args.repeat):
            own, wall = lagtrace_run(executor, config, workdir, number)
            lagtrace_self.append(own)
            lagtrace_wall.append(wall)
            own, host = plain_docker_run(settings, executor.image, args.cpuset, workdir)
            plain_self.append(own)
            plain_host.append(host)
            print(
                f"round {number + 1}/{args.repeat}: lagtrace {lagtrace_self[-1]:.4f} s, "
                f"docker run {plain_self[-1]:.4f} s",
                file=sys.stderr,
            )

    median = statistics.median
    ratio = median(lagtrace_self) / median(plain_self)
    print(f"workload: CPU loop (1.5M) + 3000 stat() + 300 thread hand-offs, cpuset={args.cpuset}, {args.repeat} rounds")
    print(f"{'':38} {'median':>9} {'min':>9} {'max':>9}")
    rows = [
        ("test time, lagtrace docker executor", lagtrace_self),
        ("test time, plain docker run", plain_self),
        ("lagtrace measured wall_s (in container)", lagtrace_wall),
        ("docker run seen from the host", plain_host),
    ]
    for name, values in rows:
        print(f"{name:38} {median(values):9.4f} {min(values):9.4f} {max(values):9.4f}")
    print(
        f"ratio of measured test time (lagtrace / docker run): {ratio:.3f} "
        f"({'within' if abs(ratio - 1) <= 0.05 else 'OUTSIDE'} the 5 % target)"
    )
    print(f"container start-up lagtrace leaves out: {median(plain_host) - median(lagtrace_wall):.3f} s per run")


if __name__ == "__main__":
    main()
