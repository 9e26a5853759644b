"""Does the stall snapshot catch the stall? A benchmark of the stall clock, per executor.

A hand-off program (examples/handoff.py's pathology, two clients, holding ~150 MB of
ordinary Python objects so its core is realistic) runs as the `core` evidence run on
both cores, where it is slow. Its stall deadline is the drill's default (stall_multiple x
the pinned median, at least stall_min_s), or half the slow configuration's quickest
timing run where that comes sooner (the drill's retry deadline,
services.measure.drill.RETRY_FRACTION): on this machine the hand-off is anywhere from 2x
to 25x slower on two cores from one minute to the next, and a deadline no run reaches
measures nothing. Each run ends 3 s after its deadline (the timeout). For each executor
it prints:

- how many snapshots witnessed a thread waiting for the GIL (gdb reading the core
  taken while frozen; target: at least 19 of 20),
- the delay from the stall deadline to the freeze (SIGSTOP of the process group sent;
  target: median under 10 ms), and until every thread had really stopped,
- how long the process stayed frozen while py-spy dump, /proc io and gcore ran
  (target: median under 0.5 s for the ~150 MB process).

    .venv/bin/python -m tests.bench.bench_stall [--quick] [--runs 20] [--executor local docker]

Run it alone (it measures latency): `flock /tmp/lagtrace-cpu.lock ...`. ``run()``
returns the figures as a dict for a caller such as `make bench`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from services.evidence import GdbContent, StallContent
from services.measure.configs import CpuConfig
from services.measure.drill import MAX_STALL_ATTEMPTS, RETRY_FRACTION
from services.measure.executors.base import RunRequest
from services.measure.probes import PROBES, ProbeContext
from services.settings import Settings
from services.thresholds import Thresholds

PINNED = CpuConfig("cpuset=0", cpuset=(0,))
BOTH = CpuConfig("cpuset=0-1", cpuset=(0, 1))
ROUND_TRIPS = 2000
QUICK_ROUND_TRIPS = 400  # the smoke run: shorter runs, the same code
BALLAST_MB = 150
TARGET_WITNESSED = 0.95
TARGET_DELAY_S = 0.010
TARGET_FROZEN_S = 0.5

PROGRAM = """
import queue, sys, threading
ballast = [str(i) * 4 for i in range(int(sys.argv[2]) * 1024 * 1024 // 100)]
def crunch(stop):
    x = 0
    while not stop.is_set():
        x += 1
def echo(inbox, outbox):
    while (item := inbox.get()) is not None:
        outbox.put(item)
def client(count):
    ping, pong = queue.Queue(), queue.Queue()
    helper = threading.Thread(target=echo, args=(ping, pong), name="echo")
    helper.start()
    for i in range(count):
        ping.put(i)
        pong.get()
    ping.put(None)
    helper.join()
stop = threading.Event()
threading.Thread(target=crunch, args=(stop,), name="crunch").start()
clients = [threading.Thread(target=client, args=(int(sys.argv[1]),), name=f"client-{n}") for n in range(2)]
for thread in clients:
    thread.start()
for thread in clients:
    thread.join()
stop.set()
"""


def make_executor(name: str):
    settings = Settings()
    if name == "docker":
        from services.measure.executors.docker import DockerExecutor

        return DockerExecutor(settings)
    from services.measure.executors.local import LocalExecutor

    return LocalExecutor(settings)


def _request(
    workdir: Path, run_dir: Path, config: CpuConfig, timeout_s: float | None, probe=None, round_trips: int = ROUND_TRIPS
) -> RunRequest:
    command = ["python3", str(workdir / "handoff_ballast.py"), str(round_trips), str(BALLAST_MB)]
    return RunRequest(
        command=command,
        workdir=workdir,
        config=config,
        run_dir=run_dir,
        timeout_s=timeout_s,
        env=probe.env() if probe else {},
        watcher=probe.watcher() if probe else None,
        stall_clock=probe.stall_clock() if probe else None,
    )


def bench_executor(name: str, runs: int, timing_runs: int, workdir: Path, round_trips: int = ROUND_TRIPS) -> dict:
    executor = make_executor(name)
    thresholds = Thresholds()
    # The default threshold, as the drill derives it from the fast configuration.
    walls: dict[str, list[float]] = {PINNED.label: [], BOTH.label: []}
    for number in range(timing_runs):
        for config in (PINNED, BOTH):  # interleaved, so drift hits both alike
            run_dir = workdir / f"{name}-timing{number}-{config.label}"
            run_dir.mkdir()
            walls[config.label].append(executor.run(_request(workdir, run_dir, config, 60.0, None, round_trips)).wall_s)
    fast_median = statistics.median(walls[PINNED.label])
    slow_low = min(walls[BOTH.label])
    default_after = max(thresholds.stall_min_s, thresholds.stall_multiple * fast_median)
    stall_after = max(thresholds.stall_min_s, min(default_after, RETRY_FRACTION * slow_low))
    # Each run ends 3 s after its deadline (the timeout): the snapshot comes at the
    # deadline, the rest would be waiting.
    witnessed = 0
    delays, stopped, frozen, rss_mb, missed, attempts = [], [], [], [], [], []
    for number in range(runs):
        # As the drill does: a run that ended before its deadline is tried again with a
        # deadline inside it (half its length), at most MAX_STALL_ATTEMPTS times.
        after, observed = stall_after, []
        for attempt in range(MAX_STALL_ATTEMPTS):
            run_dir = workdir / f"{name}-core{number}-{attempt}"
            run_dir.mkdir()
            context = ProbeContext(executor, run_dir, after, after + 3.0, thresholds.last_snapshot_lead_s)
            probe = PROBES["core"](context)
            result = executor.run(_request(workdir, run_dir, BOTH, after + 3.0, probe, round_trips))
            drafts = probe.collect(result)
            stall = drafts[0].content
            if isinstance(stall, StallContent) and stall.ok:
                break
            observed.append(result.wall_s)
            after = max(thresholds.stall_min_s, RETRY_FRACTION * min(observed))
            shutil.rmtree(run_dir, ignore_errors=True)
        attempts.append(attempt + 1)
        if not isinstance(stall, StallContent) or not stall.ok:
            missed.append(stall.reason)
            continue
        delays.append(stall.freeze_delay_s or 0.0)
        frozen.append(stall.frozen_s or 0.0)
        record = probe.record or {}
        stall_snapshot = next(s for s in record.get("snapshots", []) if s["phase"] == "stall")
        if stall_snapshot.get("stop_wait_s") is not None:
            stopped.append(stall_snapshot["freeze_delay_s"] + stall_snapshot["stop_wait_s"])
        rss_mb.append(result.max_rss_kb / 1024)
        if any(isinstance(d.content, GdbContent) and d.content.ok and d.content.waiting_for_gil for d in drafts):
            witnessed += 1
        for path in run_dir.glob("core*"):
            path.unlink()  # 300 MB each
    return {
        "executor": name,
        "runs": runs,
        "fast_median_s": round(fast_median, 4),
        "slow_median_s": round(statistics.median(walls[BOTH.label]), 4),
        "default_stall_after_s": round(default_after, 4),
        "stall_after_s": round(stall_after, 4),
        "snapshots": len(delays),
        "witnessed_gil_wait": witnessed,
        "freeze_delay_median_s": statistics.median(delays) if delays else None,
        "freeze_delay_max_s": max(delays) if delays else None,
        "all_stopped_median_s": statistics.median(stopped) if stopped else None,
        "frozen_median_s": statistics.median(frozen) if frozen else None,
        "frozen_max_s": max(frozen) if frozen else None,
        "rss_mb_median": round(statistics.median(rss_mb)) if rss_mb else None,
        "missed": missed,
        "attempts": attempts,
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def print_table(results: list[dict]) -> None:
    header = ["executor", "threshold", "GIL wait seen", "deadline->freeze", "->all stopped", "frozen", "RSS"]
    rows = [
        [
            r["executor"],
            f"{r['stall_after_s']:.2f} s",
            f"{r['witnessed_gil_wait']}/{r['runs']}",
            f"{_ms(r['freeze_delay_median_s'])} (max {_ms(r['freeze_delay_max_s'])})",
            _ms(r["all_stopped_median_s"]),
            f"{_ms(r['frozen_median_s'])} (max {_ms(r['frozen_max_s'])})",
            f"{r['rss_mb_median']} MB" if r["rss_mb_median"] else "-",
        ]
        for r in results
    ]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
    print(
        f"targets: GIL wait seen >= {TARGET_WITNESSED:.0%} of runs, deadline->freeze median < "
        f"{_ms(TARGET_DELAY_S)}, frozen median < {_ms(TARGET_FROZEN_S)} (medians over runs)"
    )
    for r in results:
        if r["missed"]:
            print(f"{r['executor']}: {len(r['missed'])} run(s) without a stall snapshot: {r['missed'][0]}")


def run(quick: bool = False, executors: tuple[str, ...] = ("local", "docker"), runs: int | None = None) -> dict:
    """The figures per executor, plus whether each met its targets."""
    runs = runs or (1 if quick else 20)
    timing_runs = 1 if quick else 5
    results = []
    with tempfile.TemporaryDirectory(prefix="lagtrace-bench-stall-") as directory:
        workdir = Path(directory)
        workdir.chmod(0o755)  # the docker executor's uid 1000 reads it
        (workdir / "handoff_ballast.py").write_text(PROGRAM)
        for name in executors:
            results.append(
                bench_executor(name, runs, timing_runs, workdir, QUICK_ROUND_TRIPS if quick else ROUND_TRIPS)
            )
    for r in results:
        r["met"] = bool(
            r["witnessed_gil_wait"] >= TARGET_WITNESSED * r["runs"]
            and r["freeze_delay_median_s"] is not None
            and r["freeze_delay_median_s"] < TARGET_DELAY_S
            and r["frozen_median_s"] is not None
            and r["frozen_median_s"] < TARGET_FROZEN_S
        )
    print_table(results)
    return {r["executor"]: r for r in results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run per executor instead of 20")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--executor", nargs="+", default=["local", "docker"], choices=["local", "docker"])
    options = parser.parse_args()
    figures = run(options.quick, tuple(options.executor), options.runs)
    sys.exit(0 if all(r["met"] for r in figures.values()) else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
