import pytest

from services.measure.evidence import dump as stored
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
    assert all(t["state"] in {"idle", "active", "active+gil", "idle+gil"} for t in dump["threads"])
    io = stored(drafts["proc_io"].content)
    assert io["counters"]["syscr"] > 0 and io["bytes_per_read_syscall"] > 0


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


def test_missing_gcore_still_gives_the_pyspy_dump(tmp_path):
    executor = WithoutTools(Settings(), {"gcore": None})
    require_tool(executor, "py-spy")
    _, _result, drafts = run_probe(
        executor, "core", HANDOFF_FOREVER, tmp_path / "run", stall_after_s=0.5, timeout_s=2.0
    )
    assert stored(drafts["gdb"].content) == {
        "status": "unavailable",
        "reason": "gcore is not installed where the command runs (local executor)",
    }
    assert drafts["pyspy_dump"].status == "ok"


def test_broken_gdb_is_a_failure_entry(executor, tmp_path):
    require_tool(executor, "gcore")
    executor = WithoutTools(Settings(), {"gdb": str(tmp_path / "no-such-gdb")})
    _, _result, drafts = run_probe(
        executor, "core", HANDOFF_FOREVER, tmp_path / "run", stall_after_s=0.5, timeout_s=2.5
    )
    assert stored(drafts["gdb"].content)["status"] == "failed"
    assert "no-such-gdb" in stored(drafts["gdb"].content)["reason"]
