"""Which test a piece of evidence names: a finding found on the whole command belongs to
the test whose code the evidence shows (an asyncio task running the test's coroutine, a
stack frame inside the test's function).

A pytest node id ``tests/test_cache.py::TestCache::test_refresh[fast]`` names its file
(relative to pytest's rootdir), its class and its function; a frame names an absolute
file (the checkout's place on the host or in the container) and a function or a
qualified name (``TestCache.test_refresh``). A frame is the test's when its file ends
with the node's file and its function is the node's function (and class, where the
frame says). Parametrized cases share one function: a frame cannot tell them apart, so
evidence that matches several tests names none of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# "function (file:line)" or "function (file)": how the probes write a frame.
_FRAME = re.compile(r"^(?P<function>.+?) \((?P<file>[^()]+?)(?::\d+)?\)$")


@dataclass(frozen=True)
class _Node:
    test_id: str
    file: str
    classes: tuple[str, ...]
    function: str


def _node(test_id: str) -> _Node | None:
    parts = test_id.split("::")
    if len(parts) < 2 or not parts[0].endswith(".py"):
        return None
    function = parts[-1].split("[", 1)[0]
    return _Node(test_id, parts[0], tuple(parts[1:-1]), function)


def parse_frame(text: str) -> tuple[str, str] | None:
    """(function or qualified name, file) of a frame written "function (file:line)"."""
    found = _FRAME.match(text.strip())
    if found is None:
        return None
    return found["function"].strip(), found["file"].strip()


def _matches(node: _Node, function: str, file: str, strict: bool) -> bool:
    """``strict``: the frame's qualified name is the node's class path and function
    exactly (a task's coroutine says ``TestLookup.test_x``, a module function ``test_x``);
    else the function's name alone (a stack frame's code name carries no class)."""
    path = file.replace("\\", "/")
    if not (path == node.file or path.endswith("/" + node.file)):
        return False
    *owners, name = function.split(".")
    if name != node.function:
        return False
    return tuple(owners) == node.classes if strict else True


def named_test(frames: Iterable[tuple[str, str]], tests: Iterable[str]) -> str | None:
    """The one test whose function a frame of ``frames`` ((function or qualified name,
    file) pairs) is in; None where no frame is a test's, or the frames match several."""
    nodes = [node for node in map(_node, tests) if node is not None]
    frames = list(frames)
    for strict in (True, False):
        found = {node.test_id for function, file in frames for node in nodes if _matches(node, function, file, strict)}
        if found:
            return next(iter(found)) if len(found) == 1 else None
    return None


def task_frames(callback: str, functions: Iterable[str]) -> list[tuple[str, str]]:
    """The frames an asyncio_loop task entry names: its coroutine ("Task test_x (file:12)")
    and the functions on the loop thread's stacks."""
    texts = [callback.removeprefix("Task ").strip(), *functions]
    return [frame for frame in map(parse_frame, texts) if frame is not None]
