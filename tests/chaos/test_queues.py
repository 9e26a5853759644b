"""Light work never waits behind screens (docs/guides/reliability.md): with a backlog of screens queued on the
measurement queue, the reconciler still gives a killed worker's step back to the ledger,
and a cancelled job's check run is completed, while the backlog runs.

Before, beat sent the reconciler to the same FIFO queue as the screens with an expiry of
one interval: behind them it expired unrun, and a killed step waited for the backlog to
drain; a check run waited for every screen queued before it.
"""

from __future__ import annotations

import math
import re
import signal
import time

import pytest

from services.models import TaskState
from tests.chaos.conftest import BOUND_S, SHIPPED_DEFAULTS, START_UP_S, children, kill_group, record

# make chaos: a backlog of 20 jobs on 2 workers (docs/guides/reliability.md); in make test, 6 keep it short.
JOBS = 20 if SHIPPED_DEFAULTS else 6
# Four runs (warm-up and three timed) of 3 s each: a screen of about 15 s. With the
# shipped defaults (a 90 s bound) runs are longer, so that the backlog behind the killed
# screen still outlasts the bound.
RUN_S = max(3, math.ceil((BOUND_S + 40) / ((JOBS - 2) * 4)))
BACKLOG_YML = (
    f'command: [python3, -c, "import time; time.sleep({RUN_S})"]\n'
    "configs: [cpuset=0]\nrepeat: 3\nexecutor: docker\nevidence: []\n"
)
BACKLOG_S = JOBS * 4 * RUN_S


# Nightly (104 s): the routing it relies on, light steps and the reconciler on their own
# queue, is asserted in make test by tests/worker/test_light_pool.py.
@pytest.mark.nightly
def test_a_backlog_of_screens_delays_neither_the_reconciler_nor_a_check_run(stack, repository_with):
    # The stack's worker (with beat) and a second one, killed once it holds a screen.
    victim = stack.spawn_worker("victim", beat=False)
    jobs = [stack.push(repository_with(BACKLOG_YML)) for _ in range(JOBS)]

    def screens() -> dict[int, tuple]:
        return {
            job_id: (state, attempts, worker)
            for job_id in jobs
            for name, state, attempts, worker in stack.ledger(job_id)
            if name == "screen"
        }

    def held_by_victim(worker: str | None) -> bool:
        found = re.search(r"/(\d+)", worker or "")  # host/pid[ on node][, CPU model]
        return found is not None and int(found.group(1)) in children(victim.pid)

    def backlog(*besides: int) -> list[int]:
        """Jobs whose screen is queued or running (on the surviving worker)."""
        busy = (TaskState.pending, TaskState.running)
        return [j for j, (state, _, _) in screens().items() if j not in besides and state in busy]

    # Every job prepared (its screen queued: the backlog is in the queue), and the second
    # worker holding a screen.
    deadline = time.monotonic() + 120
    while len(screens()) < JOBS or not (
        killed := [j for j, (s, _, w) in screens().items() if s is TaskState.running and held_by_victim(w)]
    ):
        assert time.monotonic() < deadline, f"no backlog with a screen on the second worker\n{stack.logs()}"
        time.sleep(0.2)
    [job_id] = killed
    fault = kill_group(victim, signal.SIGKILL)
    # Cancelled while queued: GitHub hears of it at once, not after the screens before it.
    cancelled = next(j for j, (state, _, _) in reversed(screens().items()) if state is TaskState.pending)
    status, answer = stack.request("POST", f"/api/v1/jobs/{cancelled}/cancel")
    assert status == 200, answer

    # The reconciler (on the surviving worker's light pool) gives the dead worker's screen
    # back to the ledger while that worker is busy with the other screens.
    while (screen := screens()[job_id])[0] is TaskState.running and screen[1] == 1:
        assert time.monotonic() - fault < 120, f"the killed screen was never given back\n{stack.logs()}"
        time.sleep(0.2)
    resent, waiting = time.monotonic() - fault, backlog(job_id, cancelled)
    record(f"kill -9 of a worker behind a backlog of {JOBS} screens", "step given back", resent)
    print(
        f"killed worker's screen given back {resent:.1f} s after kill -9, {len(waiting)} screens still queued or running"
    )
    assert waiting, "the backlog drained first: the reconciler waited behind it"
    assert resent <= BOUND_S + START_UP_S

    while not [
        r
        for r in stack.github.check_runs()
        if r.body.get("external_id") == str(cancelled) and r.body.get("status") == "completed"
    ]:
        assert time.monotonic() - fault < 300 + BACKLOG_S, (
            f"job {cancelled}'s check run never completed\n{stack.logs()}"
        )
        time.sleep(0.2)
    waiting = backlog(job_id, cancelled)
    print(f"the cancelled job's check run completed with {len(waiting)} screens still queued or running")
    assert waiting, "the check run waited behind the screens"

    for each in jobs:
        status, _ = stack.wait_final(each, 300 + BACKLOG_S)
        assert status == ("cancelled" if each == cancelled else "done"), stack.logs()
    stack.assert_effects_once(job_id, repeat=3)
