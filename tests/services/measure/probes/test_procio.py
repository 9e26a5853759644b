import subprocess
import sys

from services.evidence import dump as stored
from services.measure.executors.local import LocalProcessHandle
from services.measure.probes import procio
from services.settings import Settings
from tests.services.measure.probes.probe_helpers import WithoutTools, python_program

READER = """
import sys
chunk = int(sys.argv[1])
with open(sys.argv[2], "rb", buffering=0) as f:
    while f.read(chunk):
        pass
print("done", flush=True)
sys.stdin.read()
"""


def _counters_after_reading(executor, tmp_path, chunk: int) -> dict:
    data = tmp_path / "data.bin"
    data.write_bytes(b"x" * 20_000)
    program = python_program(tmp_path, READER)
    process = subprocess.Popen(
        [*program, str(chunk), str(data)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline().strip() == "done"
        return stored(procio.read(executor, LocalProcessHandle(process.pid), process.pid, "stall", 1.0).content)
    finally:
        process.kill()
        process.wait()


def test_bytes_per_read_syscall_tells_tiny_reads_from_big_ones(executor, tmp_path):
    tiny = _counters_after_reading(executor, tmp_path, 1)
    big = _counters_after_reading(executor, tmp_path, 65536)
    assert tiny["status"] == "ok"
    assert tiny["counters"]["syscr"] >= 20_000
    # Interpreter start-up reads are few and large; 20 000 1-byte reads dominate.
    assert tiny["bytes_per_read_syscall"] < 200
    assert big["bytes_per_read_syscall"] > 10 * tiny["bytes_per_read_syscall"]


def test_gone_process_and_missing_cat(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    gone = procio.read(WithoutTools(Settings(), {}), LocalProcessHandle(process.pid), process.pid, "stall", 1.0)
    assert stored(gone.content)["status"] == "failed" and f"/proc/{process.pid}/io" in stored(gone.content)["reason"]
    missing = procio.read(WithoutTools(Settings(), {"cat": None}), LocalProcessHandle(1), 1, "stall", 1.0)
    assert stored(missing.content)["status"] == "unavailable"
