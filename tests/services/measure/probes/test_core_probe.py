from pathlib import Path

import pytest

from services.evidence import dump as stored
from services.measure.executors import stall_clock as clock
from services.settings import Settings
from tests.services.measure.probes.probe_helpers import WithoutTools, handoff, python_program, require_tool, run_probe

# Long enough to still be running (and slow) at the stall threshold on any machine.
HANDOFF_FOREVER = handoff(10_000_000)


def _stall_snapshot(executor, tmp_path, **options):
    for tool in ("gcore", "gdb", "py-spy"):
        require_tool(executor, tool)
    _, result, drafts = run_probe(
        executor, "core", HANDOFF_FOREVER, tmp_path / "run", stall_after_s=1.0, timeout_s=4.0, **options
    )
    assert drafts["stall"].status == "ok", stored(drafts["stall"].content)
    return result, drafts


@pytest.mark.latency
def test_stall_snapshot_of_the_handoff_shows_threads_waiting_for_the_gil(executor, tmp_path):
    # A snapshot is one instant; in the hand-off pathology some thread is nearly always
    # queued for the GIL, but one unlucky instant is allowed a second look.
    for attempt in range(2):
        result, drafts = _stall_snapshot(executor, tmp_path / str(attempt))
        gdb = stored(drafts["gdb"].content)
        if gdb["waiting_for_gil"] >= 1:
            break
    assert gdb["status"] == "ok" and gdb["reader"] == "gdb", gdb
    assert len(gdb["threads"]) == 3
    waiting = [t for t in gdb["threads"] if t["waiting_for_gil"]]
    assert waiting, [t["native_frames"][:7] for t in gdb["threads"]]
    assert "Waiting for the GIL" in drafts["gdb"].text
    functions = {frame["function"] for thread in gdb["threads"] for frame in thread["frames"]}
    assert {"crunch", "echo"} <= functions
    assert drafts["gdb"].files[0].path.stat().st_size > 1_000_000  # the core itself
    # Snapshot taken while slow, then the run went on to its timeout.
    assert 0.9 < stored(drafts["stall"].content)["elapsed_s"] < 2.0
    assert result.timed_out

    dump = stored(drafts["pyspy_dump"].content)
    names = sorted(t["name"] for t in dump["threads"])
    assert len(names) == 3 and "MainThread" in names, names
    assert any("crunch" in name for name in names) and any("echo" in name for name in names), names
    # Frozen, each thread's state is the kernel's: running user code, or waiting in futex.
    assert all(t["state"].split("+")[0] in {"running", "waiting"} for t in dump["threads"]), dump["threads"]
    assert dump.get("gil_holder") == "crunch" or sum(t["owns_gil"] for t in dump["threads"]) <= 1
    stall = stored(drafts["stall"].content)
    # Everything was taken while the process group was frozen, right at the deadline.
    assert stall["freeze_delay_s"] < 0.05 and 0 < stall["frozen_s"] < 3.0
    assert [p["program"].startswith("python") for p in stall["processes"]] == [True]
    assert len(stall["captured"]) == 4 and stall["not_captured"] == [], stall
    # Twenty looks before the deadline, with no debug symbols needed: some saw a GIL waiter.
    [looked] = stall["gil_samples"]["processes"]
    # Up to twenty: on a busy machine a look takes longer and fewer fit before the deadline.
    assert 10 <= looked["samples"] <= clock.GIL_SAMPLES and looked["gil_found"] and looked["with_waiter"] >= 1, looked
    assert "before the deadline: a thread waited for the GIL in" in stall["captured"][3]
    io = stored(drafts["proc_io"].content)
    assert io["counters"]["syscr"] > 0 and io["bytes_per_read_syscall"] > 0


# The same stall snapshot as the test above: beside other work no snapshot was taken.
@pytest.mark.latency
def test_without_py_bt_pystack_reads_the_python_frames(executor, tmp_path):
    require_tool(executor, "pystack")
    _, drafts = _stall_snapshot(executor, tmp_path, load_python_extension=False)
    gdb = stored(drafts["gdb"].content)
    assert gdb["reader"] == "gdb+pystack"
    assert "py-bt" in gdb["py_bt"] and "python3.X-dbg" in gdb["py_bt"]
    functions = {frame["function"] for thread in gdb["threads"] for frame in thread["frames"]}
    assert {"crunch", "echo"} <= functions


def test_fast_run_has_nothing_to_snapshot(executor, tmp_path):
    _, _result, drafts = run_probe(
        executor, "core", python_program(tmp_path, "pass"), tmp_path / "run", stall_after_s=2.0
    )
    assert list(drafts) == ["stall"]
    assert stored(drafts["stall"].content)["status"] == "no_stall"
    assert "before the stall threshold of 2.000 s" in stored(drafts["stall"].content)["reason"]


@pytest.mark.latency
def test_a_run_that_ends_before_its_deadline_keeps_its_looks_at_the_gil(executor, tmp_path):
    # The hand-off for 1.5 s, then an exit: well before the 4 s deadline, but after the
    # looks begin (a quarter of the way, at 1 s). A slow run that does not reach the
    # deadline is still evidence of where its time went.
    program = python_program(
        tmp_path,
        f"import os, runpy, sys, threading\nsys.argv = ['handoff.py', '100000000']\n"
        f"threading.Timer(1.5, os._exit, (0,)).start()\n"
        f"runpy.run_path({HANDOFF_FOREVER[1]!r}, run_name='__main__')\n",
    )
    _, result, drafts = run_probe(executor, "core", program, tmp_path / "run", stall_after_s=4.0, timeout_s=10.0)
    stall = stored(drafts["stall"].content)
    assert stall["status"] == "no_stall" and result.wall_s < 4.0, stall
    [looked] = stall["gil_samples"]["processes"]
    assert 1.0 <= stall["gil_samples"]["started_s"] < 1.5, stall["gil_samples"]
    assert looked["gil_found"] and 1 <= looked["samples"] < clock.GIL_SAMPLES, looked


def test_missing_gcore_still_gives_the_pyspy_dump(tmp_path):
    executor = WithoutTools(Settings(), {"gcore": None})
    require_tool(executor, "py-spy")
    _, _result, drafts = run_probe(
        executor, "core", HANDOFF_FOREVER, tmp_path / "run", stall_after_s=0.5, timeout_s=2.0
    )
    assert "gdb" not in drafts
    stall = stored(drafts["stall"].content)
    assert stall["not_captured"] == [
        f"core of {stall['processes'][0]['program']} (pid {stall['processes'][0]['pid']}): "
        "gcore is not installed where the command runs"
    ]
    assert drafts["pyspy_dump"].status == "ok"


def test_broken_gdb_is_a_failure_entry(executor, tmp_path):
    require_tool(executor, "gcore")
    executor = WithoutTools(Settings(), {"gdb": str(tmp_path / "no-such-gdb")})
    _, _result, drafts = run_probe(
        executor, "core", HANDOFF_FOREVER, tmp_path / "run", stall_after_s=0.5, timeout_s=2.5
    )
    assert stored(drafts["gdb"].content)["status"] == "failed"
    assert "no-such-gdb" in stored(drafts["gdb"].content)["reason"]


def test_a_crash_leaves_its_python_and_native_stacks(executor, tmp_path):
    for tool in ("gcore", "gdb", "py-spy"):
        require_tool(executor, tool)
    program = python_program(
        tmp_path, "import ctypes\n\n\ndef read_nowhere():\n    ctypes.string_at(0)\n\n\nread_nowhere()\n"
    )
    _, result, drafts = run_probe(executor, "core", program, tmp_path / "run", stall_after_s=5.0, timeout_s=20.0)
    assert result.exit_code == -11  # the crash went on as it would have
    stall = stored(drafts["stall"].content)
    assert stall["status"] == "no_stall" and stall["crash_signal"] == "SIGSEGV", stall
    assert "crashed (SIGSEGV)" in stall["reason"] and stall["not_captured"] == []
    dump = stored(drafts["pyspy_dump"].content)
    assert dump["phase"] == "crash"
    assert [f["function"] for f in dump["threads"][0]["frames"][:2]] == ["string_at", "read_nowhere"]
    gdb = stored(drafts["gdb"].content)
    [thread] = gdb["threads"]
    assert [f["function"] for f in thread["frames"][:2]] == ["string_at", "read_nowhere"]
    # The native stack starts at the fault, below the signal frame.
    assert thread["native_frames"][0] == "<signal handler called>" and "string_at" in thread["native_frames"][:4]
    # faulthandler's Python traceback still reached the output.
    assert "Fatal Python error: Segmentation fault" in (tmp_path / "run" / "output.log").read_text()


# A wrapper (sh -c) around a Python process that starts a worker in a session of its
# own, as some runners do: out of the process group, still the command's.
WRAPPED = """
import subprocess, sys, time
if len(sys.argv) > 1:
    gaps, last = [], time.monotonic()
    while time.monotonic() - float(sys.argv[1]) < 2.5:
        time.sleep(0.002)
        now = time.monotonic()
        gaps.append(now - last)
        last = now
    open(sys.argv[2], "w").write(str(max(gaps)))
else:
    worker = subprocess.Popen([sys.executable, __file__, str(time.monotonic()), sys.argv[0] + ".gap"],
                              start_new_session=True)
    worker.wait()
"""


def test_wrappers_are_walked_down_and_every_python_process_is_frozen_and_dumped(executor, tmp_path):
    require_tool(executor, "py-spy")
    [python, script] = python_program(tmp_path, WRAPPED)
    command = ["sh", "-c", f"{python} {script}; true"]
    _, _result, drafts = run_probe(executor, "core", command, tmp_path / "run", stall_after_s=0.8, timeout_s=20.0)
    stall = stored(drafts["stall"].content)
    assert stall["status"] == "ok", stall
    programs = [(p["program"], p["snapshotted"]) for p in stall["processes"]]
    assert programs[0] == ("dash", False) and len(programs) == 3, programs
    assert [snapshotted for name, snapshotted in programs[1:]] == [True, True]
    assert stall["captured"][0].startswith("py-spy dump of 2 of 2 Python process(es)"), stall
    # The worker left the process group, yet it was frozen as long as the others.
    gap = float(Path(script + ".gap").read_text())
    assert gap > 0.8 * stall["frozen_s"], (gap, stall["frozen_s"])
