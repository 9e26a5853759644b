"""What a service job asks for, validated the same way from the API and from .lagtrace.yml.

Field-level checks live here (pydantic names the field in its message); checks that
need the executor (CPUs that exist, quotas that can be enforced, the program on PATH)
come later in services.jobs.plan.plan_job.
"""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from services.errors import BadInput
from services.measure.configs import parse_spec
from services.measure.install import parse_install
from services.measure.probes import PROBES
from services.models import Project
from services.settings import Settings

# The repeat limit is the server's (LAGTRACE_MAX_REPEAT, Settings.max_repeat): a model
# validated with validation_context(settings) checks it with the other fields, so a form
# or a body lists it among every other problem; enforce_policy checks it for every spec.
MAX_REPEAT_SETTING = "LAGTRACE_MAX_REPEAT"


def validation_context(settings: Settings) -> dict[str, int]:
    """What JobSpec and RerunSpec check against this server's settings (model_validate's context)."""
    return {"max_repeat": settings.max_repeat}


def repeat_limit_message(limit: int) -> str:
    return f"at most {limit} ({MAX_REPEAT_SETTING})"


def _check_repeat(value: int | None, info: ValidationInfo) -> int | None:
    limit = (info.context or {}).get("max_repeat")
    if value is not None and limit is not None and value > limit:
        raise ValueError(repeat_limit_message(limit))
    return value


Spec = Annotated[str, Field(min_length=1, max_length=200, examples=["cpuset=0", "cpus=0.5"])]


MAX_CPU = 4095


def check_spec_syntax(spec: str) -> str:
    """Reject a malformed SPEC early; whether its CPUs exist is the worker's to say."""
    # A range such as cpuset=0-999999999 would be expanded CPU by CPU: bound it first.
    if any(int(number) > MAX_CPU for number in re.findall(r"\d+", spec)):
        raise ValueError(f"{spec!r}: numbers in a configuration stop at {MAX_CPU}")
    try:
        # Every CPU number is "available" here: this checks the grammar, not the machine.
        parse_spec(spec, tuple(range(MAX_CPU + 1)))
    except BadInput as exc:
        raise ValueError(str(exc).removeprefix("--config ")) from None
    return spec


def check_spec_list(value: list[str]) -> list[str]:
    for spec in value:
        check_spec_syntax(spec)
    if len(set(value)) != len(value):
        raise ValueError("a configuration is given more than once")
    return value


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: list[Annotated[str, Field(max_length=4096)]] = Field(
        min_length=1, max_length=256, description="The test command, one argument per item."
    )
    configs: list[Spec] = Field(
        default_factory=list,
        max_length=32,
        description="CPU configurations (key=value[,key=value], keys cpus and cpuset); empty: the default matrix.",
    )
    repeat: int = Field(
        5, ge=1, description=f"Most timing runs per configuration; at most the server's {MAX_REPEAT_SETTING}."
    )
    timeout_s: float | None = Field(None, gt=0, le=86400, description="Kill a run after this many seconds.")
    evidence: list[str] | None = Field(
        None,
        max_length=len(PROBES),
        description=f"Probes for the drill ({', '.join(PROBES)}). Unset: every probe, where the screen found "
        "something; []: no drill; a list: those probes on the whole command whatever the screen found.",
    )
    stall_after_s: float | None = Field(None, gt=0, le=86400, description="Snapshot a run slower than this.")
    budget_s: float | None = Field(
        None,
        gt=0,
        le=7 * 86400,
        description="How long the job's runs may take in all, in seconds; the focused screen and the drill spend "
        "it on the most suspicious tests first and the report names what it left out. Unset: a multiple of the "
        "suite's own time (LAGTRACE_THRESHOLDS__BUDGET_MULTIPLE), at least LAGTRACE_THRESHOLDS__BUDGET_FLOOR_S.",
    )
    kind: Literal["matrix", "gate"] = Field(
        "matrix",
        description="matrix: every configuration surveyed, focused and drilled (the reference later gates read); "
        "gate: the suite once in the gate configuration, each test compared with the base branch's stored runs, "
        "only the tests that moved or are new going on.",
    )
    executor: str = Field(
        "auto", max_length=32, description="auto (docker where an engine answers, else local), local or docker."
    )
    image: str | None = Field(None, min_length=1, max_length=255, description="Runner image for the docker executor.")

    _repeat_limit = field_validator("repeat")(_check_repeat)

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value):
        # .lagtrace.yml authors write a shell-like string; the API also accepts it.
        if isinstance(value, str):
            return shlex.split(value)
        return value

    @field_validator("configs")
    @classmethod
    def _valid_specs(cls, value: list[str]) -> list[str]:
        return check_spec_list(value)

    @field_validator("evidence")
    @classmethod
    def _known_probes(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        unknown = [name for name in value if name not in PROBES]
        if unknown:
            raise ValueError(f"unknown probe {', '.join(map(repr, unknown))} (known: {', '.join(PROBES)})")
        return list(dict.fromkeys(value))

    @field_validator("command")
    @classmethod
    def _program_given(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the program (first item) is empty")
        return value


class RerunSpec(BaseModel):
    """Another run of a job's code, under other configurations (API body and dashboard form)."""

    model_config = ConfigDict(extra="forbid")
    configs: list[Spec] = Field(min_length=1, max_length=32, description="The configurations to run this time.")
    repeat: int | None = Field(None, ge=1, description=f"At most the server's {MAX_REPEAT_SETTING}.")
    timeout_s: float | None = Field(None, gt=0, le=86400)

    _repeat_limit = field_validator("repeat")(_check_repeat)

    @field_validator("configs")
    @classmethod
    def _valid_specs(cls, value: list[str]) -> list[str]:
        # Checked here too, beside repeat: a form lists both problems at once.
        return check_spec_list(value)


FAIL_ON = ("regression", "high", "medium", "low", "info")
DEFAULT_FAIL_ON = ["regression", "high"]


class RepositoryConfig(JobSpec):
    """`.lagtrace.yml` at the repository root: the same fields as an API job, and the check run's policy."""

    fail_on: list[Literal["regression", "high", "medium", "low", "info"]] | None = Field(
        None,
        max_length=len(FAIL_ON),
        description="What fails the GitHub check run: `regression` (a test slower than the pull request's base, "
        "or a fixed finding back), and severities (that one or worse) of open findings. Unset: "
        f"{DEFAULT_FAIL_ON}; []: never fails on findings.",
    )
    matrix_every_h: float | None = Field(
        None,
        gt=0,
        description="How often, in hours, the branch gets a matrix job of this command on its latest pushed "
        "commit (trigger `schedule`), counted from the last matrix job of it there, however started; read from "
        "pushes to the branches the server keeps history on (LAGTRACE_CHANGE_POINT_BRANCHES). Its runs are the "
        "history gates compare with. Unset: never scheduled.",
    )
    bisect_regressions: bool | None = Field(
        None,
        description="When a gate finds a test slower than its history on a push of several commits, start a bisect "
        "job between the push's first and last commit to name the commit that slowed it (its largest regressions, "
        "in the gate's configuration: docs/guides/github.md). Unset: true; false: never.",
    )
    install: list[str] | None = Field(
        None,
        description="How the docker executor's prepare step installs the project, as its own CI does: one "
        "`pip install ...` command (e.g. `pip install -e . -r requirements/tests.txt`), run once into the cached "
        "image; false installs nothing. Unset: requirements.txt and the test sets (requirements/tests.txt, "
        "requirements-test.txt, ...), not the project itself: docs/guides/github.md.",
    )

    @field_validator("install", mode="before")
    @classmethod
    def _pip_install(cls, value: object) -> list[str] | None:
        # The prepare step reads it from the checkout again (services/measure/install.py):
        # validated here too, so the prepare step's error lists it with the other fields.
        return parse_install(value)


REPOSITORY_CONFIG_FILE = ".lagtrace.yml"


# Prepared dependency images are the engine's cache, per project: never a job's choice.
INTERNAL_IMAGE_PREFIXES = ("lagtrace-deps",)


def enforce_policy(spec: JobSpec, settings: Settings, project: Project) -> JobSpec:
    """What this server lets a service job ask for, from any entry point (API, dashboard,
    .lagtrace.yml); returns the spec with the server's defaults filled in, or BadInput."""
    allowed = settings.allowed_executors
    if spec.executor != "auto" and spec.executor not in allowed:
        raise BadInput(
            f"executor: {spec.executor} is not allowed on this server (allowed: {', '.join(allowed)}); "
            "the service runs jobs only in containers"
        )
    if spec.image is not None:
        if spec.image.split(":", 1)[0].split("/")[-1].startswith(INTERNAL_IMAGE_PREFIXES):
            raise BadInput(f"image: {spec.image} is lagtrace's own dependency cache, not a runner image")
        if spec.image != settings.docker_image and spec.image not in (project.allowed_images or []):
            raise BadInput(
                f"image: {spec.image} is not allowed for project {project.name} "
                f"(allowed: {', '.join([settings.docker_image, *(project.allowed_images or [])])})"
            )
    if spec.repeat > settings.max_repeat:
        raise BadInput(f"repeat: {repeat_limit_message(settings.max_repeat)}")
    if spec.timeout_s is not None and spec.timeout_s > settings.run_timeout_max_s:
        raise BadInput(
            f"timeout_s: {spec.timeout_s:g} s is above the maximum of {settings.run_timeout_max_s:g} s on this server "
            "(LAGTRACE_RUN_TIMEOUT_MAX_S)"
        )
    if spec.stall_after_s is not None and spec.stall_after_s > settings.max_stall_after_s:
        raise BadInput(f"stall_after_s: at most {settings.max_stall_after_s:g} s on this server")
    every_h = spec.matrix_every_h if isinstance(spec, RepositoryConfig) else None
    if every_h is not None and every_h < settings.matrix_min_interval_h:
        raise BadInput(
            f"matrix_every_h: {every_h:g} h is below the minimum of {settings.matrix_min_interval_h:g} h on this "
            "server (LAGTRACE_MATRIX_MIN_INTERVAL_H)"
        )
    return spec.model_copy(update={"timeout_s": spec.timeout_s or settings.run_timeout_s})
