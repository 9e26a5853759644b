"""The sliding window's table stays bounded whatever names unauthenticated callers send."""

from __future__ import annotations

import pytest

from services.accounts.ratelimit import SlidingWindow, TooManyRequests


class Clock:
    """The window's own clock parameter, advanced by the test instead of by waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_keys_leave_the_table_once_their_last_event_left_the_window():
    clock = Clock()
    window = SlidingWindow(5, window_s=60, clock=clock)
    for i in range(1000):
        window.check(f"user:{i}", "failed sign-ins")  # a check alone stores nothing
    assert len(window) == 0
    for i in range(1000):
        window.hit(f"user:{i}")
    assert len(window) == 1000
    clock.now += 61
    window.hit("user:late")
    assert len(window) == 1


def test_the_table_is_capped_and_a_guessed_name_stays_blocked_meanwhile():
    clock = Clock()
    window = SlidingWindow(5, window_s=60, clock=clock, max_keys=100)
    for _ in range(5):
        window.hit("user:ann")
    for i in range(20):  # fewer than the cap: ann's count survives other names' failures
        window.hit(f"user:spray-{i}")
    with pytest.raises(TooManyRequests):
        window.check("user:ann", "failed sign-ins")
    for i in range(50_000):
        window.hit(f"user:flood-{i}")
        clock.now += 0.0001  # 5 s in all: nothing expires, the cap alone holds the table
    assert len(window) == 100
