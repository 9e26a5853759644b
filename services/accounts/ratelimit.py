"""Sliding-window rate limits: API submissions per token, failed sign-ins per name and address.

Kept in the memory of each API process: a deployment with several API replicas
multiplies the allowance by their number (put the limit at the ingress there too).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque

from services.errors import LagtraceError


class TooManyRequests(LagtraceError):
    """Over a rate limit: the API answers 429 with Retry-After."""

    http_status = 429
    exit_code = 2

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class SlidingWindow:
    """At most ``limit`` events per key in any ``window_s`` seconds.

    Keys come from unauthenticated requests (any username typed at the sign-in form), so
    the table is bounded: a check never adds a key, a key whose last event left the window
    is dropped, and past ``max_keys`` the least recently hit keys go first.
    """

    def __init__(self, limit: int, window_s: float = 60.0, clock=time.monotonic, max_keys: int = 10_000):
        self.limit, self.window_s, self._clock, self.max_keys = limit, window_s, clock, max_keys
        # Ordered by each key's last event (hit moves it to the end): the front expires first.
        self._events: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._events)

    def _expire(self, now: float) -> None:
        while self._events:
            events = next(iter(self._events.values()))
            if events and events[-1] > now - self.window_s:
                break
            self._events.popitem(last=False)

    def _recent(self, key: str, now: float) -> deque[float]:
        self._expire(now)
        events = self._events.get(key)
        if events is None:
            return deque()
        while events and events[0] <= now - self.window_s:
            events.popleft()
        return events

    def _add(self, key: str, now: float) -> None:
        events = self._events.setdefault(key, deque())
        events.append(now)
        self._events.move_to_end(key)
        while len(self._events) > self.max_keys:
            self._events.popitem(last=False)

    def check(self, key: str, what: str) -> None:
        """Raise TooManyRequests if ``key`` is at its limit (without counting this call)."""
        with self._lock:
            self._refuse_if_full(key, self._clock(), what)

    def hit(self, key: str) -> None:
        with self._lock:
            now = self._clock()
            self._recent(key, now)
            self._add(key, now)

    def _refuse_if_full(self, key: str, now: float, what: str) -> None:
        events = self._recent(key, now)
        if len(events) >= self.limit:
            retry = events[0] + self.window_s - now
            raise TooManyRequests(f"{what}: more than {self.limit} in {self.window_s:g} s; retry later", retry)

    def take(self, key: str, what: str) -> None:
        """Count one event for ``key``, or raise TooManyRequests if it is at its limit."""
        with self._lock:
            now = self._clock()
            self._refuse_if_full(key, now, what)
            self._add(key, now)
