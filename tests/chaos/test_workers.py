"""A worker dies mid-screen (kill -9 of its tree, the OOM killer's kill of its pool child,
systemd's SIGTERM to its process group): the screen is re-leased within the recovery
bound, runs once more from its start, and the job ends with one set of runs, one check
run and no container left, the killed run's included."""

from __future__ import annotations

import os
import re
import signal
import time

from tests.chaos.conftest import BOUND_S, SLOW_YML, START_UP_S, children, kill_group, report

SCREEN_ATTEMPT = 1  # the screen's first attempt is the one killed


def test_kill_9_of_the_worker_tree_mid_screen_then_a_new_worker(stack, repository_with):
    job_id = stack.push(repository_with(SLOW_YML))
    stack.wait_for_run(job_id)
    fault = kill_group(stack.worker(), signal.SIGKILL)
    stack.spawn_worker("worker-after-kill")
    recovery = stack.wait_relaunched(job_id, "screen", SCREEN_ATTEMPT, BOUND_S + START_UP_S + 30, since=fault)
    status, _ = stack.wait_final(job_id, 180)
    report("kill -9 of the worker tree", recovery, time.monotonic() - fault)
    assert status == "done", stack.logs()
    assert recovery <= BOUND_S + START_UP_S
    stack.assert_effects_once(job_id, repeat=4)


def test_the_oom_killer_takes_only_the_pool_child(stack, repository_with):
    job_id = stack.push(repository_with(SLOW_YML))
    stack.wait_for_run(job_id)
    # The ledger names the process running the screen: the pool child (not the beat's).
    [holder] = [who for name, _, _, who in stack.ledger(job_id) if name == "screen"]
    pool_child = int(re.search(r"/(\d+)", holder).group(1))  # host/pid[ on node][, CPU model]
    assert pool_child in children(stack.worker().pid)
    os.kill(pool_child, signal.SIGKILL)
    fault = time.monotonic()
    recovery = stack.wait_relaunched(job_id, "screen", SCREEN_ATTEMPT, BOUND_S + START_UP_S + 30, since=fault)
    status, _ = stack.wait_final(job_id, 180)
    report("kill -9 of the pool child", recovery, time.monotonic() - fault)
    assert status == "done", stack.logs()
    assert recovery <= BOUND_S + START_UP_S
    stack.assert_effects_once(job_id, repeat=4)


def test_sigterm_to_the_workers_process_group(stack, repository_with):
    job_id = stack.push(repository_with(SLOW_YML))
    stack.wait_for_run(job_id)
    victim = stack.worker()
    fault = kill_group(victim, signal.SIGTERM)
    victim.wait(timeout=60)  # a warm shutdown ends once the pool child is gone
    stack.spawn_worker("worker-after-sigterm")
    recovery = stack.wait_relaunched(job_id, "screen", SCREEN_ATTEMPT, BOUND_S + START_UP_S + 60, since=fault)
    status, _ = stack.wait_final(job_id, 180)
    report("SIGTERM to the worker's process group", recovery, time.monotonic() - fault)
    assert status == "done", stack.logs()
    assert recovery <= BOUND_S + START_UP_S + 30  # the warm shutdown takes its time first
    stack.assert_effects_once(job_id, repeat=4)
