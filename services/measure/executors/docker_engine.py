"""The Docker engine as the executor reaches it: connecting, telling the engine's trouble
(refused, reset, timed out, a 5xx) from a request it refused, and waiting it out.

Whatever the engine does instead of answering raises ``EngineUnavailable``, never a failed
run: the service waits the engine out (services/jobs/lease.py) and runs the step again.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import docker
import requests
import urllib3
from docker.errors import APIError, DockerException, ImageNotFound

from services.errors import EngineUnavailable

ENGINE_TIMEOUT_S = 30
BUILD_HINT = "build it with services/measure/executors/runner/build-offline.sh; lagtrace never pulls images"
# Waiting for an engine that went away: the first retry after 1 s, doubling up to this.
ENGINE_BACKOFF_MAX_S = 10.0


def connect(timeout_s: float = ENGINE_TIMEOUT_S) -> docker.DockerClient:
    """A client for the engine at DOCKER_HOST (or the local socket), or EngineUnavailable."""
    try:
        # The stub says int; docker-py hands the timeout to requests, which takes a float
        # (wait_for_engine's last try waits for what is left of its bound).
        client = docker.from_env(timeout=timeout_s)  # type: ignore[arg-type]
        client.ping()
    except (DockerException, requests.RequestException) as exc:
        raise EngineUnavailable(
            f"no Docker engine answers ({reason(exc)}); start one or use --executor local"
        ) from None
    return client


def engine_trouble(exc: BaseException) -> bool:
    """The engine did not answer (refused, reset, timed out, a stream cut off) or failed
    with a server error: the environment, as opposed to a request it refused (4xx)."""
    if isinstance(exc, APIError):
        return exc.status_code is not None and exc.status_code >= 500
    if isinstance(
        exc,
        requests.ConnectionError
        | requests.Timeout
        | requests.exceptions.ChunkedEncodingError
        | urllib3.exceptions.HTTPError
        | http.client.HTTPException
        | ConnectionError,
    ):
        return True
    # docker.from_env wraps the first request's failure ("Error while fetching server API version").
    cause = exc.__cause__ or exc.__context__
    return isinstance(exc, DockerException) and cause is not None and engine_trouble(cause)


@contextmanager
def engine_calls(what: str) -> Iterator[None]:
    """Engine trouble while doing ``what`` becomes EngineUnavailable (never the command's failure)."""
    try:
        yield
    except EngineUnavailable:
        raise
    except Exception as exc:
        if not engine_trouble(exc):
            raise
        answered = isinstance(exc, APIError)
        raise EngineUnavailable(
            f"the Docker engine was unavailable while {what} ({reason(exc)})", answered=answered
        ) from None


def wait_for_engine(bound_s: float, progress: Callable[[str], None] = lambda m: None) -> bool:
    """Ping the engine with backoff until it answers (True) or ``bound_s`` has passed (False)."""
    deadline = time.monotonic() + bound_s
    pause = 1.0
    while True:
        try:
            connect(timeout_s=min(ENGINE_TIMEOUT_S, max(1.0, deadline - time.monotonic()))).close()
            return True
        except EngineUnavailable as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            progress(f"the Docker engine does not answer ({exc}); trying again in {min(pause, left):.0f} s")
            time.sleep(min(pause, left))
            pause = min(pause * 2, ENGINE_BACKOFF_MAX_S)


def unavailable_reason(image: str) -> str | None:
    """Why `--executor auto` cannot use docker, or None when it can."""
    try:
        client = connect()
    except EngineUnavailable as exc:
        return str(exc)
    try:
        client.images.get(image)
    except ImageNotFound:
        return f"the runner image {image} is not built ({BUILD_HINT})"
    except (DockerException, requests.RequestException) as exc:
        return f"the Docker engine failed to answer ({reason(exc)})"
    finally:
        client.close()
    return None


def reason(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    if explanation:
        return str(explanation)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
