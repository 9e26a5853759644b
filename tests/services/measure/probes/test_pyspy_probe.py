import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree

import pytest

from services.evidence import dump as stored
from services.measure.executors.local import LocalProcessHandle
from services.measure.probes import pyspy
from services.settings import Settings
from tests.services.measure.probes.probe_helpers import WithoutTools, handoff, python_program, require_tool, run_probe

NAMED_THREADS = """
import threading, time
stop = threading.Event()
def spin():
    while not stop.is_set():
        pass
def nap():
    stop.wait()
threads = [threading.Thread(target=spin, name="spinner"), threading.Thread(target=nap, name="napper")]
for t in threads:
    t.start()
print("ready", flush=True)
time.sleep(30)
"""


@pytest.mark.latency
def test_record_gives_an_svg_flame_graph_and_a_speedscope_profile(executor, tmp_path):
    require_tool(executor, "py-spy")
    _, _result, drafts = run_probe(executor, "pyspy", handoff(400), tmp_path / "run", timeout_s=30)
    evidence = drafts["pyspy"]
    assert evidence.status == "ok", stored(evidence.content)
    files = {f.name: f for f in evidence.files}
    svg = ElementTree.parse(files["pyspy-flamegraph.svg"].path).getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert files["pyspy-flamegraph.svg"].media_type == "image/svg+xml"
    assert "crunch" in files["pyspy-flamegraph.svg"].path.read_text()
    profile = json.loads(files["pyspy-profile.speedscope.json"].path.read_text())
    assert len(profile["profiles"]) >= 3  # main, echo and crunch threads
    content = stored(evidence.content)
    assert content["idle_included"] is True and content["gil_only"] is False
    assert content["samples"] > 0
    assert any("crunch" in thread["name"] for thread in content["threads"])


def test_dump_lists_every_thread_with_its_state(executor, tmp_path):
    require_tool(executor, "py-spy")
    program = python_program(tmp_path, NAMED_THREADS)
    process = subprocess.Popen(program, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        evidence = pyspy.dump(executor, LocalProcessHandle(process.pid), process.pid)
    finally:
        process.kill()
        process.wait()
    assert evidence.status == "ok", stored(evidence.content)
    threads = {thread["name"]: thread for thread in stored(evidence.content)["threads"]}
    assert set(threads) == {"MainThread", "spinner", "napper"}
    for thread in threads.values():
        assert thread["state"] in {"idle", "active", "active+gil", "idle+gil"}
        assert thread["frames"], thread
    assert threads["napper"]["state"].startswith("idle")
    assert any(frame["function"] == "spin" for frame in threads["spinner"]["frames"])
    assert '"spinner"' in evidence.text


def test_dump_of_a_gone_process_is_a_failure_entry(executor):
    require_tool(executor, "py-spy")
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    time.sleep(0.05)
    evidence = pyspy.dump(executor, LocalProcessHandle(process.pid), process.pid)
    assert stored(evidence.content)["status"] == "failed"
    assert "py-spy dump failed" in stored(evidence.content)["reason"]


def test_missing_pyspy_is_reported(tmp_path):
    executor = WithoutTools(Settings(), {"py-spy": None})
    _, result, drafts = run_probe(executor, "pyspy", ["true"], tmp_path / "run")
    assert result is None
    assert stored(drafts["pyspy"].content)["status"] == "unavailable"
    assert "py-spy is not installed" in stored(drafts["pyspy"].content)["reason"]
    dump = pyspy.dump(executor, LocalProcessHandle(1), 1)
    assert dump.kind == "pyspy_dump" and "py-spy is not installed" in stored(dump.content)["reason"]
