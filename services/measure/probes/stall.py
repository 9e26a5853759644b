"""The stall clock's side in the command: a pytest plugin that tells the clock when the
drilled test starts and ends, so the stall deadline counts from the test's start and
not from the process's (pytest's own start-up can take seconds).

The clock itself (freeze, snapshot, thaw) runs in the process that owns the run's clock:
services/measure/executors/stall_clock.py ``StallClock``.

Also here: StopBeforeTimeout, which ends a wrapping tracer just before the hard timeout.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from services.measure.executors.base import ProcessHandle
from services.measure.probes.hooks import install_hook

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


# Imported by every Python process of the run (PYTHONPATH): on a crash the process tells
# the clock and stops itself, so its Python and native stacks (py-spy dump, a core) are
# taken before it dies; then the crash goes on as it would have (faulthandler's
# traceback, the signal's default action).
CRASH_HOOK = '''\
"""Installed by lagtrace for one evidence run: a crash (SIGSEGV, SIGABRT, SIGBUS, SIGFPE,
SIGILL) tells the stall clock and waits, stopped, while the clock takes the stacks."""
import os
import sys


def _install():
    path = os.environ.get("LAGTRACE_STALL_FIFO")
    if not path:
        return
    try:
        import ctypes
        import signal
        libc = ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        return
    handler_type = ctypes.CFUNCTYPE(None, ctypes.c_int)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    previous = {}

    def on_crash(signum):
        # Put back what was there (faulthandler, or the default) for when this returns.
        libc.signal(signum, previous.get(signum))
        line = ("crash %d %s\\n" % (os.getpid(), signal.Signals(signum).name)).encode()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, line)
            os.close(fd)
        except OSError:
            return
        os.kill(os.getpid(), signal.SIGSTOP)  # the clock thaws it once the stacks are taken

    callback = handler_type(on_crash)
    sys.modules[__name__].__dict__["_lagtrace_crash_callback"] = callback  # kept alive
    pointer = ctypes.cast(callback, ctypes.c_void_p).value
    for name in ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL"):
        signum = getattr(signal, name)
        previous[signum] = libc.signal(signum, pointer)


_install()
'''


def install_plugin(run_dir: Path, visible_dir: str, fifo: str) -> dict[str, str]:
    """Write the crash hook and the pytest plugin under run_dir; the environment that
    loads them (visible_dir is the hook directory as the command sees it)."""
    environment = install_hook(run_dir / HOOK_DIR, visible_dir, CRASH_HOOK, **{PLUGIN_MODULE: PLUGIN})
    plugins = PLUGIN_MODULE
    if os.environ.get("PYTEST_PLUGINS"):
        plugins += "," + os.environ["PYTEST_PLUGINS"]
    return {**environment, "PYTEST_PLUGINS": plugins, "LAGTRACE_STALL_FIFO": fifo}


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
