"""The stall clock's side in the command: a pytest plugin that tells the clock when the
drilled test starts and ends, so the stall deadline counts from the test's start and
not from the process's (pytest's own start-up can take seconds).

The clock itself (freeze, snapshot, thaw) runs in the process that owns the run's clock:
services/measure/executors/container_timer.py ``StallClock``.

Also here: StopBeforeTimeout, which ends a wrapping tracer just before the hard timeout.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from services.measure.executors.base import ProcessHandle

PLUGIN_MODULE = "lagtrace_stall_clock"
HOOK_DIR = "stall-clock-hook"

# Loaded through PYTEST_PLUGINS from a directory put on PYTHONPATH: no edit to the
# user's code or command. pytest-xdist workers inherit the environment and report too.
PLUGIN = '''\
"""Installed by lagtrace for one evidence run: reports each test's start and end to the
stall clock through a FIFO, so its deadline counts from the test's start."""
import os

_PATH = os.environ.get("LAGTRACE_STALL_FIFO")


def _tell(event, nodeid):
    if not _PATH:
        return
    line = ("%s %d %s\\n" % (event, os.getpid(), nodeid.replace("\\n", " "))).encode()[:4000]
    try:
        fd = os.open(_PATH, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return  # no clock listens (it is gone): the test must not notice
    try:
        os.write(fd, line)
    except OSError:
        pass
    finally:
        os.close(fd)


def pytest_runtest_logstart(nodeid, location):
    _tell("start", nodeid)


def pytest_runtest_logfinish(nodeid, location):
    _tell("end", nodeid)
'''


def install_plugin(run_dir: Path, visible_dir: str, fifo: str) -> dict[str, str]:
    """Write the plugin under run_dir; the environment that loads it (visible_dir is
    the hook directory as the command sees it)."""
    hook = run_dir / HOOK_DIR
    hook.mkdir(exist_ok=True)
    (hook / f"{PLUGIN_MODULE}.py").write_text(PLUGIN)
    python_path = visible_dir
    if os.environ.get("PYTHONPATH"):
        python_path += os.pathsep + os.environ["PYTHONPATH"]
    plugins = PLUGIN_MODULE
    if os.environ.get("PYTEST_PLUGINS"):
        plugins += "," + os.environ["PYTEST_PLUGINS"]
    return {"PYTHONPATH": python_path, "PYTEST_PLUGINS": plugins, "LAGTRACE_STALL_FIFO": fifo}


class StopBeforeTimeout:
    """Ends a wrapping tracer (strace, py-spy record) gracefully just before the hard
    timeout, so it still writes its summary or profile: the executor's SIGKILL of the
    whole process group would lose both.
    """

    def __init__(self, kill_tool: str | None, signal_name: str, timeout_s: float | None, lead_s: float):
        self.kill_tool = kill_tool
        self.signal_name = signal_name
        self.timeout_s = timeout_s
        self.lead_s = lead_s
        self.stopped = False
        self._timer: threading.Timer | None = None
        self._handle: ProcessHandle | None = None

    def started(self, handle: ProcessHandle) -> None:
        if self.kill_tool is None or self.timeout_s is None:
            return
        self._handle = handle
        self._timer = threading.Timer(max(0.0, self.timeout_s - self.lead_s), self._stop)
        self._timer.daemon = True
        self._timer.start()

    def _stop(self) -> None:
        if self._handle is None or self.kill_tool is None:
            return
        self.stopped = True
        self._handle.run_tool([self.kill_tool, f"-{self.signal_name}", str(self._handle.pid)], timeout_s=5.0)

    def finished(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
