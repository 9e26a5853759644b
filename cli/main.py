"""`lagtrace` CLI. Exit status: 0 report produced, 2 bad input, 1 failure."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import click
from pydantic import ValidationError

from services.errors import BadInput, LagtraceError
from services.settings import Settings


def _load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        raise click.UsageError(f"invalid LAGTRACE_* setting: {exc}") from None


def _cancel(signum, frame) -> None:
    raise KeyboardInterrupt


def _progress(message: str) -> None:
    click.echo(f"lagtrace: {message}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """lagtrace: find out why a test is slow on some CPU configurations and not others."""


@cli.command(context_settings={"ignore_unknown_options": False})
@click.option("--executor", type=click.Choice(["auto", "local", "docker"]), default="auto", show_default=True,
              help="Where the command runs: docker containers, the host (local), or docker when an "
                   "engine answers and the runner image exists (auto).")
@click.option("--image", default=None, metavar="IMG",
              help="Image for the docker executor (default: LAGTRACE_DOCKER_IMAGE, lagtrace-runner:latest).")
@click.option("--config", "specs", multiple=True, metavar="SPEC",
              help="A CPU configuration, key=value[,key=value] with keys cpus (quota) and cpuset "
                   "(e.g. cpuset=0, cpus=0.5). Repeatable. Default: one core, all cores, half a core.")
@click.option("--repeat", type=int, default=5, show_default=True,
              help="Most timing runs per configuration (fewer when the verdict settles early).")
@click.option("--timeout", "timeout_s", type=float, default=None, help="Kill a run after this many seconds.")
@click.option("--evidence", "evidence", default=None, metavar="PROBES",
              help="Evidence probes for the drill after the screen, comma-separated: strace, pyspy, core, "
                   "faulthandler (or all, or none). Default: all of them, where the screen found a "
                   "CPU-sensitive command or test or a run slower than --stall-after; naming probes "
                   "drills the whole command whatever the screen found.")
@click.option("--stall-after", "stall_after_s", type=float, default=None, metavar="S",
              help="Snapshot an evidence run (py-spy dump, core read by gdb, faulthandler) once it has run "
                   "this long. Default: a multiple of the fast configuration's median "
                   "(LAGTRACE_THRESHOLDS__STALL_MULTIPLE).")
@click.option("--workdir", type=click.Path(path_type=Path), default=None,
              help="Directory the command runs in (default: the current one).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="Also write the lagtrace.report/v1 JSON here.")
@click.option("--project", default="local", show_default=True, help="Project the job is stored under.")
@click.argument("command", nargs=-1, required=False, type=click.UNPROCESSED)
def run(executor, image, specs, repeat, timeout_s, evidence, stall_after_s, workdir, json_path, project,
        command) -> None:
    """Screen COMMAND (given after --) under a matrix of CPU configurations."""
    from cli.run import run_job

    settings = _load_settings()
    # `kill` (SIGTERM) cancels like Ctrl-C: the job is marked cancelled and the run's
    # container is removed on the way out, instead of the process vanishing mid-run.
    signal.signal(signal.SIGTERM, _cancel)
    try:
        report = run_job(
            settings,
            command=list(command),
            executor_name=executor,
            image=image,
            specs=list(specs),
            repeat=repeat,
            timeout_s=timeout_s,
            evidence=evidence,
            stall_after_s=stall_after_s,
            workdir=workdir,
            project=project,
            progress=_progress,
        )
    except BadInput as exc:
        click.echo(f"lagtrace: error: {exc}", err=True)
        sys.exit(2)
    except LagtraceError as exc:
        click.echo(f"lagtrace: failed: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # the job is marked failed; say why without a wall of traceback
        if os.environ.get("LAGTRACE_DEBUG"):
            raise
        click.echo(f"lagtrace: failed: {type(exc).__name__}: {exc} (LAGTRACE_DEBUG=1 shows where)", err=True)
        sys.exit(1)
    from services.report import render_text

    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n")
        _progress(f"report written to {json_path}")
    click.echo(render_text(report), nl=False)


@cli.command()
def migrate() -> None:
    """Bring the database at LAGTRACE_DATABASE_URL to the newest schema."""
    from services import migrate as migrations

    settings = _load_settings()
    migrations.upgrade(settings)
    _progress("database schema is at head")


def main() -> None:
    cli(prog_name="lagtrace")


if __name__ == "__main__":
    main()
