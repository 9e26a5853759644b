"""How long the stall snapshot takes, from trigger to stored evidence, for a ~150 MB
process: py-spy dump + /proc io + gcore (while it runs), gdb (after), and the core
zstd-compressed into the artifact store. Target: under 2 s on this machine.

    .venv/bin/python -m tests.bench.bench_snapshot [--mb 150] [--repeat 3]
    .venv/bin/python -m tests.bench.run --only snapshot [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from services.measure.artifacts import DirectoryArtifactStore
from services.measure.executors.local import LocalExecutor, LocalProcessHandle
from services.measure.probes.base import ProbeContext
from services.measure.probes.core import CoreSnapshot
from services.measure.probes.stall import STALL
from services.settings import Settings
from tests.bench.figures import quantile_figure

# The hand-off pathology (examples/handoff.py) inside a process holding ~N MB of
# ordinary Python objects, so the core is realistic rather than one zeroed buffer.
PROGRAM = """
import queue, sys, threading
ballast = [str(i) * 4 for i in range(int(sys.argv[1]) * 1024 * 1024 // 100)]
stop = threading.Event()
def crunch():
    x = 0
    while not stop.is_set():
        x += 1
def echo(inbox, outbox):
    while (item := inbox.get()) is not None:
        outbox.put(item)
ping, pong = queue.Queue(), queue.Queue()
threading.Thread(target=crunch, daemon=True).start()
threading.Thread(target=echo, args=(ping, pong), daemon=True).start()
print("ready", flush=True)
while True:
    ping.put(1)
    pong.get()
"""


def one_snapshot(megabytes: int, store_root: Path) -> dict:
    executor = LocalExecutor(Settings())
    run_dir = Path(tempfile.mkdtemp(prefix="lagtrace-bench-"))
    process = subprocess.Popen([sys.executable, "-c", PROGRAM, str(megabytes)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        rss_mb = int(Path(f"/proc/{process.pid}/statm").read_text().split()[1]) * 4096 / 2**20
        handle = LocalProcessHandle(process.pid)
        snapshot = CoreSnapshot(ProbeContext(executor, run_dir, stall_after_s=0.0, timeout_s=None))
        triggered = time.perf_counter()
        snapshot.take(handle, STALL, elapsed_s=0.0)
        captured = time.perf_counter()
        snapshot.analyse(handle)
        analysed = time.perf_counter()
    finally:
        process.kill()
        process.wait()
    gdb = next(d for d in snapshot.drafts if d.kind == "gdb")
    core = gdb.files[0]
    store = DirectoryArtifactStore(store_root, max_bytes=1 << 30, retention_s=3600)
    ref = store.put(f"bench/{core.name}", core.path, core.media_type)
    stored = time.perf_counter()
    core.path.unlink()
    return {
        "rss_mb": rss_mb,
        "capture_s": captured - triggered,
        "analyse_s": analysed - captured,
        "store_s": stored - analysed,
        "total_s": stored - triggered,
        "gcore_s": snapshot.timings["gcore_s"],
        "gdb_s": snapshot.timings.get("gdb_s", float("nan")),
        "core_mb": ref.size / 2**20,
        "stored_mb": ref.stored_size / 2**20,
        "ratio": ref.size / ref.stored_size,
        "waiting_for_gil": gdb.content.waiting_for_gil,
    }


def run(quick: bool = False, megabytes: int = 150) -> dict:
    with tempfile.TemporaryDirectory() as store_root:
        results = [one_snapshot(megabytes, Path(store_root)) for _ in range(1 if quick else 5)]
    return {
        "figures": [
            quantile_figure(
                "trigger to stored evidence", [r["total_s"] for r in results], 50, below=2.0, note="median"
            ),
            quantile_figure("trigger to captured (gcore)", [r["capture_s"] for r in results], 50, note="median"),
            quantile_figure("core read by gdb", [r["analyse_s"] for r in results], 50, note="median"),
        ],
        "snapshots": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=150, help="approximate size of the process's Python heap")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store_root:
        results = [one_snapshot(args.mb, Path(store_root)) for _ in range(args.repeat)]
    for r in results:
        print(
            f"rss {r['rss_mb']:.0f} MB: capture {r['capture_s']:.3f} s (gcore {r['gcore_s']:.3f} s), "
            f"gdb {r['gdb_s']:.3f} s, store {r['store_s']:.3f} s -> total {r['total_s']:.3f} s; "
            f"core {r['core_mb']:.0f} MB -> {r['stored_mb']:.1f} MB zstd ({r['ratio']:.0f}x); "
            f"{r['waiting_for_gil']} thread(s) waiting for the GIL"
        )
    total = statistics.median(r["total_s"] for r in results)
    print(f"median trigger -> stored evidence: {total:.3f} s (target < 2 s: {'met' if total < 2 else 'missed'})")


if __name__ == "__main__":
    main()
