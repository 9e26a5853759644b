"""Executors run one command under one CPU configuration and measure it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from services.errors import BadInput
from services.measure.executors.base import Executor, RunRequest, RunResult
from services.measure.executors.local import LocalExecutor
from services.settings import Settings

EXECUTORS = ("auto", "local", "docker")


def make_executor(
    name: str,
    settings: Settings,
    *,
    image: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
    allowed: Sequence[str] | None = None,
    cache_scope: str = "",
    job_id: int | None = None,
) -> Executor:
    """The executor called ``name``; ``auto`` is docker where it works, else local, and says why.

    ``allowed`` (the service passes settings.allowed_executors; `lagtrace run` None: all)
    limits the choice. ``auto`` then fails closed: it never falls back to an executor
    outside the list because the engine or the image is missing.
    ``cache_scope`` keeps docker's prepared dependency images apart (one per project);
    ``job_id`` labels every container docker starts, so a cancel finds them all.
    """
    # Imported here: the Docker SDK is only needed when docker is asked for or tried.
    from services.measure.executors import docker, docker_engine

    if allowed is not None and name in ("local", "docker") and name not in allowed:
        raise BadInput(
            f"executor {name}: not allowed on this server (LAGTRACE_ALLOWED_EXECUTORS={','.join(allowed)}); "
            "the service runs untrusted code only in containers"
        )
    if name == "auto" and allowed is not None and "local" not in allowed:
        # Fail closed: an engine that is down must not turn into running on the host.
        try:
            return docker.DockerExecutor(settings, image, progress, cache_scope=cache_scope, job_id=job_id)
        except BadInput as exc:
            raise BadInput(f"executor auto: this server runs jobs only in containers; {exc}") from None
    if name == "local":
        if image is not None:
            raise BadInput("--image applies to the docker executor only (use --executor docker or auto)")
        return LocalExecutor(settings)
    if name == "docker":
        return docker.DockerExecutor(settings, image, progress, cache_scope=cache_scope, job_id=job_id)
    if name == "auto":
        problem = docker_engine.unavailable_reason(image or settings.docker_image)
        if problem is None:
            progress(
                f"executor auto: a Docker engine answers and {image or settings.docker_image} exists: using docker"
            )
            return docker.DockerExecutor(settings, image, progress, cache_scope=cache_scope, job_id=job_id)
        if image is not None:
            # The user asked for an image: running on the host instead would ignore that.
            raise BadInput(f"--image {image}: {problem}")
        progress(f"executor auto: {problem}: using local")
        return LocalExecutor(settings)
    raise BadInput(f"unknown executor {name!r} (known: {', '.join(EXECUTORS)})")


# What the job engine asks of the container engine outside any one executor: a cancelled
# job's runs stopped at once, what an interrupted attempt left removed, the engine waited
# out. Imported when called, like the docker executor itself (the Docker SDK is needed
# only where docker is used).


def stop_job_containers(settings: Settings, job_id: int) -> list[str]:
    """Kill the running containers of a cancelled job of this installation; their names."""
    from services.measure.executors import docker_guards

    return docker_guards.stop_job_containers(settings, job_id)


def remove_own_containers(settings: Settings, job_id: int) -> list[str]:
    """Remove this process's containers of one job (an attempt the engine interrupted); their names."""
    from services.measure.executors import docker_guards

    return docker_guards.remove_own_containers(settings, job_id)


def wait_for_engine(bound_s: float, progress: Callable[[str], None] = lambda message: None) -> bool:
    """Wait up to ``bound_s`` for the Docker engine to answer again; whether it does."""
    from services.measure.executors import docker_engine

    return docker_engine.wait_for_engine(bound_s, progress)


__all__ = [
    "EXECUTORS",
    "Executor",
    "LocalExecutor",
    "RunRequest",
    "RunResult",
    "make_executor",
    "remove_own_containers",
    "stop_job_containers",
    "wait_for_engine",
]
