"""Sliding-window rate limits: API submissions per token, failed sign-ins per account and
client, and per client.

Shared by every serving process and replica where the service has Redis (the broker's, or
LAGTRACE_RATE_LIMIT_STORAGE_URL): kept there by the ``limits`` library (Flask-Limiter's
storage and strategy layer) in a moving window. Without Redis (`lagtrace serve` with no
broker is one process) they are kept in this process's memory, in a bounded table.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections import OrderedDict, deque
from typing import Protocol

from limits import RateLimitItemPerSecond
from limits.errors import StorageError
from limits.storage import Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from services.errors import LagtraceError, Misconfigured, ServiceUnreachable
from services.settings import Settings

# An IPv6 client is limited by its /64: one host is routinely given a whole /64 (RFC 6177
# section 2; SLAAC picks addresses in it at will), so a key per address would let it try
# 2**64 times more (tests/security/test_abuse.py).
IPV6_CLIENT_PREFIX = 64


def client_key(address: str | None) -> str:
    """The key a client's requests are limited under: its IPv4 address (an IPv4-mapped
    IPv6 one as IPv4), or its IPv6 /64; what is no address, as given."""
    if not address:
        return "unknown"
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(parsed)


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


class Window(Protocol):
    """What the API and the dashboard need of a limit: check, count, or both at once."""

    limit: int

    def check(self, key: str, what: str) -> None: ...

    def hit(self, key: str) -> None: ...

    def take(self, key: str, what: str) -> None: ...


class SharedWindow:
    """At most ``limit`` events per key in any ``window_s`` seconds, counted in a storage of
    the ``limits`` library (Redis: shared by every process that names it)."""

    def __init__(self, storage: Storage, limit: int, namespace: str, window_s: int = 60):
        self.limit, self.window_s = limit, window_s
        self._limiter = MovingWindowRateLimiter(storage)
        self._item = RateLimitItemPerSecond(limit, window_s, namespace=namespace)
        self._where = storage.__class__.__name__

    def _refusal(self, key: str, what: str) -> TooManyRequests:
        stats = self._guarded(lambda: self._limiter.get_window_stats(self._item, key))
        retry = max(1.0, stats.reset_time - time.time())
        return TooManyRequests(f"{what}: more than {self.limit} in {self.window_s:g} s; retry later", retry)

    def _guarded(self, action):
        try:
            return action()
        except (StorageError, OSError, ConnectionError) as exc:
            raise ServiceUnreachable(f"the rate limits' store is unavailable ({type(exc).__name__})") from None
        except Exception as exc:  # redis-py's errors, without importing the client here
            if type(exc).__module__.startswith("redis"):
                raise ServiceUnreachable(f"the rate limits' store is unavailable ({type(exc).__name__})") from None
            raise

    def check(self, key: str, what: str) -> None:
        if not self._guarded(lambda: self._limiter.test(self._item, key)):
            raise self._refusal(key, what)

    def hit(self, key: str) -> None:
        self._guarded(lambda: self._limiter.hit(self._item, key))

    def take(self, key: str, what: str) -> None:
        if not self._guarded(lambda: self._limiter.hit(self._item, key)):
            raise self._refusal(key, what)


def storage_url(settings: Settings) -> str | None:
    """Where limits are shared: LAGTRACE_RATE_LIMIT_STORAGE_URL, else a Redis broker's URL;
    None: in this process only."""
    if settings.rate_limit_storage_url:
        return settings.rate_limit_storage_url
    broker = settings.broker_url or ""
    if broker.startswith(("redis://", "rediss://", "unix://")):
        return broker
    return None


class Limits:
    """The service's abuse limits, made once per serving process from the settings."""

    def __init__(self, settings: Settings):
        url = storage_url(settings)
        self.shared = url is not None and not url.startswith("memory://")
        if url is None or not self.shared:
            self.submissions: Window = SlidingWindow(settings.submissions_per_minute)
            self.sign_in_failures: Window = SlidingWindow(settings.sign_in_failures_per_minute)
            self.sign_in_client_failures: Window = SlidingWindow(settings.sign_in_client_failures_per_minute)
            return
        # Short socket timeouts: a request waits on the store at most that long.
        storage = storage_from_string(url, socket_timeout=2, socket_connect_timeout=2)
        if not isinstance(storage, Storage):  # an async:// scheme
            raise Misconfigured(
                f"LAGTRACE_RATE_LIMIT_STORAGE_URL: {url.split('://', 1)[0]}:// is not a storage for this"
            )
        # One installation's keys apart from another's sharing the Redis (token and user ids
        # are per database).
        prefix = f"lagtrace/{settings.installation}"
        self.submissions = SharedWindow(storage, settings.submissions_per_minute, f"{prefix}/submissions")
        self.sign_in_failures = SharedWindow(storage, settings.sign_in_failures_per_minute, f"{prefix}/sign-in")
        self.sign_in_client_failures = SharedWindow(
            storage, settings.sign_in_client_failures_per_minute, f"{prefix}/sign-in-client"
        )
