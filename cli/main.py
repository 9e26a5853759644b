"""`lagtrace` CLI. Exit status: 0 report produced, 2 bad input, 1 failure."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

import click
from pydantic import ValidationError

from cli.bisect import bisect
from services.errors import BadInput, LagtraceError, ServiceUnreachable
from services.settings import Settings


def _load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        from services.jobs.sources import error_message

        problems = []
        for error in exc.errors():
            variable = "LAGTRACE_" + "__".join(str(part) for part in error["loc"]).upper() if error["loc"] else ""
            message = error_message(error)
            # A validator's message may name its variable itself (settings.py's do).
            problems.append(message if not variable or message.startswith(variable) else f"{variable}: {message}")
        raise click.UsageError(f"invalid setting: {'; '.join(problems)}") from None


def _cancel(signum, frame) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _exit_on_domain_errors():
    """A domain error exits with its own code (services/errors.py: 2 for bad input, 1 for a
    failure), its message on stderr."""
    try:
        yield
    except LagtraceError as exc:
        word = "error" if exc.exit_code == 2 else "failed"
        click.echo(f"lagtrace: {word}: {exc}", err=True)
        sys.exit(exc.exit_code)


def _progress(message: str) -> None:
    click.echo(f"lagtrace: {message}", err=True)


def _unreachable(exc: BaseException) -> str | None:
    """What a connection failure could not reach, or None when `exc` is something else.

    Only failures to connect count: a query that fails on a reachable database (a missing
    table, say) keeps its traceback, since it is a bug rather than the environment."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, DBAPIError) and (exc.statement is None or exc.connection_invalidated):
        url = make_url(_load_settings().database_url).render_as_string(hide_password=True)
        return f"the database at {url}"
    try:
        from kombu.exceptions import OperationalError as BrokerError
        from redis.exceptions import ConnectionError as RedisConnectionError
    except ImportError:  # pragma: no cover - both come with celery[redis]
        return None
    if isinstance(exc, (BrokerError, RedisConnectionError)):
        broker = _load_settings().broker_url or "(LAGTRACE_BROKER_URL not set)"
        return f"the broker at {make_url(broker).render_as_string(hide_password=True) if '://' in broker else broker}"
    return None


class _Group(click.Group):
    """Turns "the database or the broker is down" into one line and exit 1, not a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except Exception as exc:
            what = _unreachable(exc)
            if what is None:
                raise
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise ServiceUnreachable(f"cannot reach {what}: {reason}") from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lagtrace", prog_name="lagtrace")
def cli() -> None:
    """lagtrace: find out why a test is slow on some CPU configurations and not others."""
    # Run directories are made under TMPDIR (tempfile.mkdtemp), which silently falls back to
    # /tmp when TMPDIR does not exist; the chart points it into a volume that starts empty.
    if os.environ.get("TMPDIR"):
        Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)


@cli.command(context_settings={"ignore_unknown_options": False})
@click.option(
    "--executor",
    type=click.Choice(["auto", "local", "docker"]),
    default="auto",
    show_default=True,
    help="Where the command runs: docker containers, the host (local), or docker when an "
    "engine answers and the runner image exists (auto).",
)
@click.option(
    "--image",
    default=None,
    metavar="IMG",
    help="Image for the docker executor (default: LAGTRACE_DOCKER_IMAGE, lagtrace-runner:latest).",
)
@click.option(
    "--config",
    "specs",
    multiple=True,
    metavar="SPEC",
    help="A CPU configuration, key=value[,key=value] with keys cpus (quota) and cpuset "
    "(e.g. cpuset=0, cpus=0.5). Repeatable. Default: one core, all cores, half a core.",
)
@click.option(
    "--repeat",
    type=int,
    default=5,
    show_default=True,
    help="Most timing runs per configuration (fewer when the verdict settles early); at most "
    "LAGTRACE_MAX_REPEAT (default 30).",
)
@click.option("--timeout", "timeout_s", type=float, default=None, help="Kill a run after this many seconds.")
@click.option(
    "--evidence",
    "evidence",
    default=None,
    metavar="PROBES",
    help="Evidence probes for the drill after the screen, comma-separated: strace, pyspy, core, "
    "faulthandler (or all, or none). Default: all of them, where the screen found a "
    "CPU-sensitive command or test or a run slower than --stall-after; naming probes "
    "drills the whole command whatever the screen found.",
)
@click.option(
    "--stall-after",
    "stall_after_s",
    type=float,
    default=None,
    metavar="S",
    help="Snapshot an evidence run (py-spy dump, core read by gdb, faulthandler) once it has run "
    "this long. Default: a multiple of the fast configuration's median "
    "(LAGTRACE_THRESHOLDS__STALL_MULTIPLE).",
)
@click.option(
    "--workdir",
    type=click.Path(path_type=Path),
    default=None,
    help="Directory the command runs in (default: the current one).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the lagtrace.report/v1 JSON here.",
)
@click.option("--project", default="local", show_default=True, help="Project the job is stored under.")
@click.option(
    "--budget",
    "budget_s",
    type=float,
    default=None,
    metavar="S",
    help="How long the job's runs may take in all, in seconds: the focused screen and the drill spend it on the "
    "most suspicious tests first; the report names what it left out. Default: "
    "LAGTRACE_THRESHOLDS__BUDGET_MULTIPLE (6) x the suite's own time, at least 300 s.",
)
@click.option(
    "--kind",
    type=click.Choice(["matrix", "gate"]),
    default="matrix",
    show_default=True,
    help="matrix: every configuration surveyed, focused and drilled, its runs the history later gates read; "
    "gate: the suite once in the gate configuration, each test compared with the project's stored runs, only "
    "the tests that moved or are new going on.",
)
@click.option(
    "--all", "all_tests", is_flag=True, help="List every test in the text report, not only the flagged and slowest."
)
@click.argument("command", nargs=-1, required=False, type=click.UNPROCESSED)
def run(
    executor,
    image,
    specs,
    repeat,
    timeout_s,
    evidence,
    stall_after_s,
    workdir,
    json_path,
    project,
    budget_s,
    kind,
    all_tests,
    command,
) -> None:
    """Screen COMMAND (given after --) under a matrix of CPU configurations."""
    from cli.run import JobFailed, run_job
    from services.jobs.report_schema import report_json
    from services.jobs.report_text import render_text

    settings = _load_settings()
    # `kill` (SIGTERM) cancels like Ctrl-C: the job is marked cancelled and the run's
    # container is removed on the way out, instead of the process vanishing mid-run.
    signal.signal(signal.SIGTERM, _cancel)
    with _exit_on_domain_errors():
        if repeat > settings.max_repeat:
            from services.jobs.spec import repeat_limit_message

            raise BadInput(f"--repeat: {repeat_limit_message(settings.max_repeat)}")
    try:
        with _exit_on_domain_errors():
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
                budget_s=budget_s,
                kind=kind,
                workdir=workdir,
                project=project,
                progress=_progress,
            )
    except Exception as exc:  # the job is marked failed; say why without a wall of traceback
        if os.environ.get("LAGTRACE_DEBUG"):
            raise
        if isinstance(exc, JobFailed) and exc.report is not None:
            # The failed job's report, which says first that it failed and why.
            if json_path is not None:
                json_path.write_text(json.dumps(report_json(exc.report), indent=2) + "\n")
            click.echo(render_text(exc.report, all_tests=all_tests), nl=False)
        why = str(exc) if isinstance(exc, JobFailed) else f"{type(exc).__name__}: {exc}"
        click.echo(f"lagtrace: failed: {why} (LAGTRACE_DEBUG=1 shows where)", err=True)
        sys.exit(1)

    if json_path is not None:
        json_path.write_text(json.dumps(report_json(report), indent=2) + "\n")
        _progress(f"report written to {json_path}")
    click.echo(render_text(report, all_tests=all_tests), nl=False)


@cli.command()
@click.option(
    "--check",
    is_flag=True,
    help="Change nothing: exit 0 when the schema is at head, 1 when it is not (or the database is unreachable).",
)
def migrate(check: bool) -> None:
    """Bring the database at LAGTRACE_DATABASE_URL to the newest schema."""
    from services import migrate as migrations

    settings = _load_settings()
    if check:
        from services.db import make_engine

        engine = make_engine(settings)
        try:
            current = migrations.current_revision(engine)
        except Exception as exc:  # any failure to read it means "not at head yet"
            click.echo(f"lagtrace: database not reachable: {type(exc).__name__}: {exc}", err=True)
            sys.exit(1)
        finally:
            engine.dispose()
        if current not in migrations.heads(settings):
            click.echo(f"lagtrace: database schema is at {current or 'none (empty)'}, not at head", err=True)
            sys.exit(1)
        _progress("database schema is at head")
        return
    with _exit_on_domain_errors():
        migrations.upgrade(settings)
    _progress("database schema is at head")


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="LAGTRACE_HOST")
@click.option("--port", type=int, default=8080, show_default=True, envvar="LAGTRACE_PORT")
@click.option(
    "--threads", type=int, default=8, show_default=True, help="Request threads per process.", envvar="LAGTRACE_THREADS"
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Serving processes (default: one per usable CPU). Only with LAGTRACE_BROKER_URL; without it, one.",
    envvar="LAGTRACE_WEB_PROCESSES",
)
def serve(host: str, port: int, threads: int, processes: int | None) -> None:
    """Serve the API (/api/v1) and the dashboard (/). Without LAGTRACE_BROKER_URL jobs run in
    this process, one at a time."""
    from cli.service import serve as serve_api

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with _exit_on_domain_errors():
        serve_api(_load_settings(), host, port, threads, processes)


@cli.command()
@click.option(
    "--concurrency",
    type=int,
    default=1,
    show_default=True,
    envvar="LAGTRACE_WORKER_CONCURRENCY",
    help="Tasks at once. Above 1 only with LAGTRACE_PACK_DISJOINT_CORES (runs then share the node).",
)
@click.option("--beat/--no-beat", default=False, help="Also run the periodic reconciler here (one per cluster).")
@click.option("--loglevel", default="INFO", show_default=True)
@click.option(
    "--light-only",
    is_flag=True,
    help="Serve only the light queue (reconciler, check runs). Every worker starts one of these "
    "beside itself; this option is for running more of them apart.",
)
@click.option(
    "--checks-only",
    is_flag=True,
    help="Serve only the check-run queue (GitHub check runs; LAGTRACE_CHECK_RUN_CONCURRENCY threads). "
    "Every worker starts one of these beside itself; this option is for running more of them apart.",
)
def worker(concurrency: int, beat: bool, loglevel: str, light_only: bool, checks_only: bool) -> None:
    """Run a Celery worker on LAGTRACE_BROKER_URL (measurement steps, and light and check-run pools beside it)."""
    from cli.service import worker as run_worker

    settings = _load_settings()
    if not settings.broker_url:
        raise click.UsageError("LAGTRACE_BROKER_URL is not set (e.g. redis://127.0.0.1:6379/0)")
    if (light_only or checks_only) and beat:
        raise click.UsageError("--beat goes with a measurement worker, not --light-only or --checks-only")
    if light_only and checks_only:
        raise click.UsageError("--light-only and --checks-only are two workers: start each apart")
    with _exit_on_domain_errors():
        run_worker(settings, concurrency, beat, loglevel, light_only=light_only, checks_only=checks_only)


@cli.command()
@click.option("--loglevel", default="INFO", show_default=True)
def beat(loglevel: str) -> None:
    """Run only the periodic reconciler's scheduler (one per cluster), for deployments
    whose workers run without --beat."""
    from cli.service import beat as run_beat

    settings = _load_settings()
    if not settings.broker_url:
        raise click.UsageError("LAGTRACE_BROKER_URL is not set (e.g. redis://127.0.0.1:6379/0)")
    try:
        run_beat(settings, loglevel)
    except LagtraceError as exc:
        click.echo(f"lagtrace: failed: {exc}", err=True)
        sys.exit(1)


@cli.command()
@click.argument("max_age_s", metavar="MAX_AGE", type=float, default=60.0)
@click.option(
    "--ready",
    is_flag=True,
    help="Also fail while the work directory has less free space than LAGTRACE_MIN_FREE_DISK_BYTES "
    "(the worker takes no step then): for a readiness probe, not a liveness one.",
)
def alive(max_age_s: float, ready: bool) -> None:
    """Liveness of a worker or beat: exit 0 when its heartbeat file
    (LAGTRACE_WORKER_HEARTBEAT_FILE) was touched within MAX_AGE seconds. The worker touches it
    from its main loop, so one stuck on a lost broker goes stale while one busy with a long
    measured run stays fresh."""
    import time

    name = os.environ.get("LAGTRACE_WORKER_HEARTBEAT_FILE")
    if not name:
        raise click.UsageError("LAGTRACE_WORKER_HEARTBEAT_FILE is not set")
    try:
        age = time.time() - Path(name).stat().st_mtime
    except FileNotFoundError:
        click.echo(f"lagtrace: no heartbeat file {name}", err=True)
        sys.exit(1)
    if age > max_age_s:
        click.echo(f"lagtrace: heartbeat {name} is {age:.0f} s old (limit {max_age_s:g} s)", err=True)
        sys.exit(1)
    if ready:
        from services.jobs.disk import short_of_space

        short = short_of_space(_load_settings())
        if short is not None:
            click.echo(f"lagtrace: not ready: {short}", err=True)
            sys.exit(1)


@cli.group()
def token() -> None:
    """API tokens (one project each)."""


@token.command("create")
@click.option("--project", required=True, help="The project the token may read and submit to.")
@click.option("--name", default="default", show_default=True, help="A label, shown as the actor in triage history.")
@click.option(
    "--days", type=click.FloatRange(min=0, min_open=True), help="Valid this many days (default LAGTRACE_TOKEN_DAYS)."
)
@click.option("--no-expiry", is_flag=True, help="Never expires (revoke it with `lagtrace token revoke`).")
def token_create(project: str, name: str, days: float | None, no_expiry: bool) -> None:
    """Print a new token. It is shown only this once; the database keeps its hash."""
    from cli.service import new_token

    settings = _load_settings()
    with _exit_on_domain_errors():
        click.echo(new_token(settings, project, name, None if no_expiry else (days or settings.token_days)))


@token.command("revoke")
@click.argument("prefix", required=False)
@click.option("--project", help="Revoke every token of this project instead.")
def token_revoke(prefix: str | None, project: str | None) -> None:
    """Revoke a token by its first characters (lt_...), or all of a project's."""
    from cli.service import revoke

    with _exit_on_domain_errors():
        revoked = revoke(_load_settings(), prefix, project)
    _progress(f"revoked {len(revoked)} token(s): {', '.join(revoked)}")


@token.command("list")
@click.option("--project", help="Only this project's tokens.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per token instead of a table.")
def token_list(project: str | None, as_json: bool) -> None:
    """Every token: its prefix (what `token revoke` takes), project, name, expiry, last use
    and state. The secret itself is never stored, so never shown."""
    from cli.service import tokens

    with _exit_on_domain_errors():
        listed = tokens(_load_settings(), project)
    if as_json:
        for token in listed:
            fields = {
                key: value.isoformat() if hasattr(value, "isoformat") else value for key, value in vars(token).items()
            }
            click.echo(json.dumps(fields))
        return
    if not listed:
        _progress(
            "no tokens" + (f" for project {project}" if project else "") + ": make one with `lagtrace token create`"
        )
        return
    rows = [
        [
            t.prefix,
            t.project,
            t.name,
            _when(t.created_at),
            _when(t.expires_at) if t.expires_at else "never",
            _when(t.last_used_at) if t.last_used_at else "never",
            t.state,
        ]
        for t in listed
    ]
    _echo_table(["prefix", "project", "name", "created", "expires", "last used", "state"], rows)


def _when(moment) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")


def _echo_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        click.echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip())


@cli.group()
def repo() -> None:
    """GitHub repositories whose webhooks start jobs."""


@repo.command("register")
@click.argument("full_name", metavar="OWNER/NAME")
@click.option("--project", help="The project its jobs go to (default: OWNER/NAME).")
@click.option("--url", help="Clone URL (default https://github.com/OWNER/NAME.git).")
@click.option("--secret-stdin", is_flag=True, help="Read the webhook secret from stdin (default: a new random one).")
@click.option("--allow-forks", is_flag=True, help="Run pull requests from forks (with the base branch's config).")
@click.option("--image", "images", multiple=True, help="A runner image its jobs may name. Repeatable.")
@click.option(
    "--rotate-secret",
    is_flag=True,
    help="Make a new webhook secret for a registered repository (default: keep the one GitHub signs with).",
)
def repo_register(
    full_name: str,
    project: str | None,
    url: str | None,
    secret_stdin: bool,
    allow_forks: bool,
    images: tuple[str, ...],
    rotate_secret: bool,
) -> None:
    """Register (or update) a repository; prints the webhook secret to give GitHub.

    Registering it again (to change --allow-forks or --image) keeps its secret unless
    --rotate-secret or --secret-stdin is given; stderr says which."""
    from cli.service import register

    if rotate_secret and secret_stdin:
        raise click.UsageError("give --rotate-secret or --secret-stdin, not both")
    secret = sys.stdin.readline().strip() if secret_stdin else None
    with _exit_on_domain_errors():
        made, state = register(
            _load_settings(), project or full_name, full_name, url, secret, allow_forks, list(images), rotate_secret
        )
    click.echo(made)
    _progress(
        {
            "new": f"{full_name}: a new webhook secret (above): give it to GitHub with the webhook",
            "kept": f"{full_name}: webhook secret kept (the one GitHub has); --rotate-secret makes a new one",
            "rotated": f"{full_name}: webhook secret rotated: GitHub's deliveries are refused (401) until the "
            "webhook's secret is the one above",
            "set": f"{full_name}: webhook secret set from stdin",
        }[state]
    )


@cli.group()
def user() -> None:
    """Dashboard accounts."""


@user.command("create")
@click.argument("username")
@click.option(
    "--project",
    "projects",
    multiple=True,
    metavar="NAME",
    help="A project the user may see and act on (made if new). Repeatable.",
)
@click.option("--admin", is_flag=True, help="May see every project.")
@click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from the first line of stdin instead of prompting (for scripts).",
)
def user_create(username: str, projects: tuple[str, ...], admin: bool, password_stdin: bool) -> None:
    """Create a dashboard account with a password (stored as a salted scrypt hash)."""
    from cli.service import new_user

    if not projects and not admin:
        raise click.UsageError("give --project NAME (repeatable) or --admin: a user who sees nothing cannot work")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    with _exit_on_domain_errors():
        new_user(_load_settings(), username, password, list(projects), admin)
    _progress(f"user {username} created" + (" (admin)" if admin else f" with access to {', '.join(projects)}"))


@user.command("list")
def user_list() -> None:
    """Every dashboard account: name, admin, projects, last sign-in (never the password hash)."""
    from cli.service import users

    with _exit_on_domain_errors():
        listed = users(_load_settings())
    if not listed:
        _progress("no users: make one with `lagtrace user create NAME --project P`")
        return
    rows = [
        [name, "yes" if admin else "no", ", ".join(projects) or "-", signed_in or "never"]
        for name, admin, projects, signed_in in listed
    ]
    _echo_table(["user", "admin", "projects", "last sign-in"], rows)


@cli.command()
@click.option(
    "--url",
    envvar="LAGTRACE_API_URL",
    default="http://127.0.0.1:8080",
    show_default=True,
    help="The API (env LAGTRACE_API_URL): https://, or http:// to this machine only (the token is sent with it).",
)
@click.option(
    "--token", "api_token", envvar="LAGTRACE_API_TOKEN", required=True, help="Bearer token (env LAGTRACE_API_TOKEN)."
)
@click.option("--repo", default=None, help="Git URL to screen (default: upload --dir).")
@click.option("--ref", default=None, help="Branch, tag or commit of --repo.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Directory to upload as a tarball (default: the current one).",
)
@click.option("--config", "specs", multiple=True, metavar="SPEC", help="A CPU configuration, as for `run`.")
@click.option(
    "--repeat",
    type=int,
    default=5,
    show_default=True,
    help="Most timing runs per configuration; at most the server's LAGTRACE_MAX_REPEAT (default 30).",
)
@click.option("--timeout", "timeout_s", type=float, default=None)
@click.option(
    "--evidence",
    default=None,
    metavar="PROBES",
    help="As for `run`: probes (comma-separated), all, or none. Default: every probe where the screen found something.",
)
@click.option("--stall-after", "stall_after_s", type=float, default=None, help="As for `run`.")
@click.option("--budget", "budget_s", type=float, default=None, metavar="S", help="As for `run`.")
@click.option("--kind", type=click.Choice(["matrix", "gate"]), default=None, help="As for `run` (default: matrix).")
@click.option("--all", "all_tests", is_flag=True, help="As for `run`: every test in the text report.")
@click.option("--executor", default="auto", show_default=True)
@click.option("--image", default=None)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the lagtrace.report/v1 JSON here.",
)
@click.option("--wait/--no-wait", default=True, show_default=True, help="Follow the job until it finishes.")
@click.option("--poll", "poll_s", type=float, default=1.0, show_default=True)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def submit(
    url,
    api_token,
    repo,
    ref,
    directory,
    specs,
    repeat,
    timeout_s,
    evidence,
    stall_after_s,
    budget_s,
    kind,
    all_tests,
    executor,
    image,
    json_path,
    wait,
    poll_s,
    command,
) -> None:
    """Submit COMMAND (after --) to a lagtrace server and print its report."""
    from cli.submit import ApiClient, ApiError, exit_status, submit_and_wait
    from services.jobs.report_schema import parse_report
    from services.jobs.report_text import render_text
    from services.measure.drill import parse_evidence

    if repo and directory:
        raise click.UsageError("give --repo or --dir, not both")
    with _exit_on_domain_errors():
        probes = parse_evidence(evidence)
    spec = {
        "command": list(command),
        "configs": list(specs),
        "repeat": repeat,
        "timeout_s": timeout_s,
        "evidence": probes,
        "stall_after_s": stall_after_s,
        "executor": executor,
        "image": image,
        # Only when given: a server from before budgets would refuse the field.
        **({"budget_s": budget_s} if budget_s is not None else {}),
        **({"kind": kind} if kind is not None else {}),
    }
    with _exit_on_domain_errors():
        client = ApiClient(url, api_token, progress=_progress)
    try:
        job = submit_and_wait(
            client,
            spec,
            repository={"url": repo, "ref": ref} if repo else None,
            directory=None if repo else (directory or Path.cwd()),
            wait=wait,
            poll_s=poll_s,
            progress=_progress,
        )
    except ApiError as exc:
        click.echo(f"lagtrace: error: {exc}", err=True)
        sys.exit(2 if 400 <= exc.status < 500 else 1)
    if not wait:
        click.echo(json.dumps({"id": job["id"], "status": job["status"], "url": client.page_url(job["id"])}))
        return
    # The server's JSON is written as it came; read, it is validated into the model here.
    if json_path is not None:
        json_path.write_text(json.dumps(job["report"], indent=2) + "\n")
        _progress(f"report written to {json_path}")
    report = parse_report(job["report"])
    click.echo(render_text(report, all_tests=all_tests), nl=False)
    status, said = exit_status(job, report)
    if said is not None:
        click.echo(said, err=True)
    if status:
        sys.exit(status)


cli.add_command(bisect)


def main() -> None:
    with _exit_on_domain_errors():
        cli(prog_name="lagtrace")


if __name__ == "__main__":
    main()
