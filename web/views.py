"""Dashboard pages. Thin: read the request, call services/, render a template."""

from __future__ import annotations

import json
import math
import shlex
from typing import Any, TypedDict
from urllib.parse import quote_plus

from flask import (
    Blueprint,
    Response,
    flash,
    g,
    jsonify,
    redirect,
    render_template,
    request,
    send_file,
    session,
    url_for,
)
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from services.accounts.ratelimit import TooManyRequests, client_key
from services.accounts.users import SignInFailed, end_sessions, require_project, sign_in
from services.context import ctx, db
from services.diagnose import inbox as dashboard
from services.diagnose import triage
from services.diagnose.findings import Severity
from services.diagnose.metrics import SlowerSinceMetrics, metrics_of
from services.errors import BadInput, Conflict, LagtraceError, NotFound
from services.evidence import EvidenceKind
from services.jobs import bisect_jobs, check_runs, lifecycle, summaries
from services.jobs import submit as submissions
from services.jobs.sources import check_ref, check_repository_url, validation_problems
from services.jobs.spec import JobSpec, RerunSpec, validation_context
from services.measure.artifacts import make_artifact_store
from services.measure.probes import PROBES, flamegraph
from services.measure.samples import collect
from services.models import Evidence, JobKind, JobStatus, TriageStatus
from web import auth, catalogue, story
from web.matrix import build_matrix
from web.plots import bisect_plot, percentile_trend_plot, strip_plot, trend_plot
from web.wording import on_dashboard

bp = Blueprint("web", __name__, template_folder="templates", static_folder="static", static_url_path="/static")
# Notes and advice worded for the CLI, said as what to do on these pages (web/wording.py).
bp.add_app_template_filter(on_dashboard)
bp.before_request(auth.load_user)

# What url_for leaves unquoted in a query string (werkzeug: the URL standard's safe bytes).
QUERY_SAFE = "!$'()*,/:;?@"
# The configurations this deployment's forms offer as checkboxes; others are typed in.
COMMON_CONFIGS = ("cpuset=0", "cpuset=0-1", "cpus=0.5", "cpus=1", "cpus=2")
SEVERITIES = tuple(severity.value for severity in Severity)
# Syscalls that mean waiting or polling: the strace table highlights them.
WAIT_SYSCALLS = {
    "futex",
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "nanosleep",
    "clock_nanosleep",
    "wait4",
    "waitid",
    "sched_yield",
}
STRACE_SORTS = {"pct_time", "seconds", "usecs_per_call", "calls", "errors", "name"}
# The dashboard's own pages may load only same-origin scripts, styles and images; the
# inline SVG plots need no script. Flame graphs are same-origin <object>s (see artifact()).
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'self'; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)
# Served artifacts (a flame graph SVG opened directly or embedded) run nothing: no
# script, no external load, sandboxed; the SVG's own inline styles are allowed.
ARTIFACT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox"


@bp.app_template_global()
def evidence_kinds() -> type[EvidenceKind]:
    """Templates compare kinds with the enum's members, never with bare strings."""
    return EvidenceKind


@bp.app_template_global()
def max_repeat() -> int:
    """The server's repeat limit (LAGTRACE_MAX_REPEAT), as the API checks it."""
    return ctx().settings.max_repeat


@bp.app_template_global()
def csrf_token() -> str:
    return auth.csrf_token()


@bp.app_template_global()
def path_to(endpoint: str, key: str) -> str:
    """The path of ``endpoint`` without its last part, an integer ``key``: a list appends each
    row's id to it. One url_for a page, not one a row (25 µs each: a 50-row list's links
    cost more than the rest of its rendering)."""
    values: dict[str, Any] = {key: 0}  # typed as url_for's values, not its _anchor/_external options
    path = url_for(endpoint, **values)
    if not path.endswith("/0"):
        raise ValueError(f"{endpoint}: {key} is not the last part of its path ({path})")
    return path[:-1]


# A value no route is given: it marks where a row's key goes in a path made once a page.
_ROW_KEY = 987654321987


@bp.app_template_global()
def path_around(endpoint: str, key: str, **values: Any) -> tuple[str, str]:
    """The path of ``endpoint`` cut where its integer ``key`` goes, for a row's key
    between the two parts (path_to's case when the key is not last: `/jobs/<id>/test?id=`)."""
    values[key] = _ROW_KEY
    before, marker, after = url_for(endpoint, **values).partition(str(_ROW_KEY))
    if not marker or str(_ROW_KEY) in after:
        raise ValueError(f"{endpoint}: {key} is not in its path once")
    return before, after


@bp.app_template_filter()
def query_value(value: Any) -> str:
    """A value for a link's query string, quoted as url_for quotes it (a row's link built
    from one path a page: see path_to)."""
    return quote_plus(str(value), safe=QUERY_SAFE)


@bp.app_template_filter()
def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 0.001:
        return f"{value * 1000:.1f} ms"
    return f"{value * 1e6:.0f} µs"


@bp.app_template_filter()
def number(value: Any) -> str:
    """Metrics as people read them: 4 significant digits, nested numbers too."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{key} {number(item)}" for key, item in value.items())
    if isinstance(value, list):
        return ", ".join(number(item) for item in value)
    return str(value)


# Metric keys that hold seconds though they do not end in _s.
SECOND_KEYS = {"median", "mean", "p50", "p95", "min", "max", "seconds", "futex_seconds"}


@bp.app_template_filter()
def metric(value: Any, key: str = "") -> str:
    """A finding's metric with its unit, read from its name (``_s`` seconds, ``ratio`` x,
    ``pct`` and ``share`` percent, ``bytes``, ``per_s`` a rate); nested metrics too."""
    if isinstance(value, dict):
        return ", ".join(f"{name} {metric(item, name)}" for name, item in value.items())
    if isinstance(value, list):
        return ", ".join(metric(item, key) for item in value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if key.endswith("_s") or key in SECOND_KEYS:
        return seconds(float(value))
    if "ratio" in key:
        return f"{value:.1f}×"
    if key.endswith("pct") or key.endswith("pct_time"):
        return f"{value:.1f} %"
    if key.endswith("share"):
        return f"{value * 100:.0f} %" if value <= 1 else f"{value:.0f} %"
    if "bytes" in key:
        return f"{value:.4g} B"
    if key.endswith("per_s"):
        return f"{value:.4g} /s"
    return number(value)


@bp.app_template_filter()
def fixed(value: float | None, digits: int = 1) -> str:
    """A number with fixed decimals; a missing one (a test that failed to collect) as a dash."""
    if value is None:
        return "–"
    return f"{value:.{digits}f}"


@bp.app_template_filter()
def when(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "–"


@bp.after_request
def _headers(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", PAGE_CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    if getattr(g, "user", None) is not None:
        response.headers["Cache-Control"] = "private, no-store"  # pages show project data
    return response


def _error_page(status: int, message: str):
    back = request.referrer
    if request.method == "POST" and status in (409, 422) and back and back.startswith(request.host_url):
        # A form that cannot be run as filled in: back to it, saying what to change.
        flash(message, "error")
        return redirect(back)
    return render_template("error.html", status=status, message=message), status


@bp.errorhandler(LagtraceError)
def _domain_error(exc: LagtraceError):
    # The status each domain error carries (services/errors.py), rendered as a page.
    if isinstance(exc, TooManyRequests):
        retry_after = str(max(1, math.ceil(exc.retry_after_s)))
        return render_template("error.html", status=429, message=str(exc)), 429, {"Retry-After": retry_after}
    return _error_page(exc.http_status, str(exc))


@bp.errorhandler(ValidationError)
def _invalid(exc: ValidationError):
    # A JobSpec built inside services/ (a rerun's) names the field as the API does.
    return _error_page(422, "; ".join(f"{p['field']}: {p['message']}" for p in validation_problems(exc)))


@bp.errorhandler(HTTPException)
def _http_error(exc: HTTPException):
    # A 503's Retry-After (werkzeug's ServiceUnavailable carries it) goes out with the page.
    retry_after = getattr(exc, "retry_after", None)
    headers = {"Retry-After": str(retry_after)} if isinstance(retry_after, int) else {}
    return render_template("error.html", status=exc.code, message=exc.description), exc.code or 500, headers


def error_page(exc: HTTPException) -> Response:
    """An error no dashboard view raised (no route matched the path: /jobs/abc) as the
    dashboard's page, with its headers; the nav shows when the visitor is signed in."""
    try:
        auth.identify()
    except Exception:  # the page about the error must render whatever else is wrong
        g.user = None
    message = exc.description or exc.name
    if exc.code == 404:
        kind, _, key = request.path.strip("/").partition("/")
        # /jobs/abc: a page of an object whose id is not a number (no route takes it).
        named = {"jobs": "job", "findings": "finding", "evidence": "evidence"}.get(kind)
        key = key.split("/")[0]
        message = f"{named} {key!r} does not exist: ids are numbers" if named and key else f"no page at {request.path}"
    response = Response(render_template("error.html", status=exc.code, message=message), exc.code or 500)
    if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
        response.headers["Allow"] = ", ".join(exc.valid_methods)
    return _headers(response)


def _int_arg(name: str) -> int | None:
    value = request.args.get(name, "")
    return int(value) if value.isdigit() else None


# --- Signing in ---------------------------------------------------------------------


@bp.route("/sign-in", methods=["GET", "POST"], endpoint="sign_in")
def sign_in_page():
    next_url = auth.safe_next(request.values.get("next"))
    if request.method == "GET":
        return render_template("sign_in.html", next_url=next_url, error=None)
    session_ = db()
    username = request.form.get("username", "")
    # Failed attempts are counted per account and client, and per client: guessing one
    # user's password stops at LAGTRACE_SIGN_IN_FAILURES_PER_MINUTE, spraying guesses over
    # many names at LAGTRACE_SIGN_IN_CLIENT_FAILURES_PER_MINUTE (a right password included,
    # until the window has passed). Never per account alone, nor globally: a stranger's
    # guesses do not lock the user out. The client is the address the nearest trusted proxy
    # saw (LAGTRACE_TRUSTED_PROXIES, cli/wsgi.py); an IPv6 client is its /64 (client_key).
    client = client_key(request.remote_addr)
    limits = (
        (ctx().sign_in_failures, f"{username.strip().lower()}|{client}"),
        (ctx().sign_in_client_failures, client),
    )
    try:
        for window, key in limits:
            window.check(key, "failed sign-ins")
    except TooManyRequests as exc:
        response = render_template("sign_in.html", next_url=next_url, error=str(exc)), 429
        return (*response, {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))})
    try:
        user = sign_in(session_, username, request.form.get("password", ""))
    except SignInFailed as exc:
        for window, key in limits:
            window.hit(key)
        return render_template("sign_in.html", next_url=next_url, error=str(exc)), 401
    session_.commit()
    auth.start_session(user)
    return redirect(next_url)


@bp.post("/sign-out")
def sign_out():
    # Server-side too: clearing the cookie alone leaves any copy of it signed in.
    if g.user is not None:
        end_sessions(g.user)
        db().commit()
    session.clear()
    return redirect(url_for("web.sign_in"))


# --- Inbox and jobs -------------------------------------------------------------------


INBOX_PER_PAGE = 50


class InboxFilters(TypedDict):
    """The inbox's filters (services/diagnose/inbox.py inbox), as the page shows them too."""

    project_id: int | None
    kind: str | None
    status: str | None
    severity: str | None


@bp.get("/")
def inbox():
    ids = auth.project_ids()
    filters: InboxFilters = {
        "project_id": _int_arg("project"),
        "kind": request.args.get("kind") or None,
        "status": request.args.get("status") or None,
        "severity": request.args.get("severity") or None,
    }
    if filters["status"] and filters["status"] not in TriageStatus.__members__:
        raise BadInput(f"status: one of {', '.join(TriageStatus.__members__)}")
    page = _int_arg("page") or 0
    # One more than a page: whether there is a next one.
    groups = dashboard.inbox(db(), ids, **filters, limit=INBOX_PER_PAGE + 1, offset=page * INBOX_PER_PAGE)
    return render_template(
        "inbox.html",
        groups=groups[:INBOX_PER_PAGE],
        more=len(groups) > INBOX_PER_PAGE,
        page=page,
        args=request.args.to_dict(),
        filters=filters,
        projects=auth.projects(),
        kinds=dashboard.finding_kinds(db(), ids),
        statuses=list(TriageStatus.__members__),
        severities=SEVERITIES,
    )


@bp.get("/jobs")
def jobs():
    status = request.args.get("status") or None
    if status and status not in JobStatus.__members__:
        raise BadInput(f"status: one of {', '.join(JobStatus.__members__)}")
    project_id = _int_arg("project")
    rows = dashboard.job_list(
        db(), auth.project_ids(), project_id=project_id, status=status, before_id=_int_arg("before")
    )
    return render_template(
        "jobs.html",
        rows=rows,
        status=status,
        project_id=project_id,
        projects=auth.projects(),
        statuses=list(JobStatus.__members__),
        next_before=rows[-1].id if len(rows) == 50 else None,
    )


def _spec_from_form(form, *, command: list[str] | None = None) -> dict[str, Any]:
    """The configurations, repetitions and probes a job or rerun form asks for."""
    # Free text: one SPEC per line or space (a comma joins keys within one SPEC, cpus=1,cpuset=0).
    configs = list(dict.fromkeys(form.getlist("config") + form.get("other_configs", "").split()))
    evidence_choice = form.get("evidence", "default")
    probes = (
        None
        if evidence_choice == "default"
        else []
        if evidence_choice == "none"
        else [p for p in form.getlist("probe") if p in PROBES]
    )
    return {
        "configs": configs,
        "repeat": form.get("repeat", "5"),
        "evidence": probes,
        "stall_after_s": form.get("stall_after") or None,
        **({"command": command} if command is not None else {}),
    }


def _typed(form) -> dict[str, Any]:
    """What a job form holds, as typed, to fill the form in again."""
    return {
        "project": form.get("project", ""),
        "repository": form.get("repository", ""),
        "ref": form.get("ref", ""),
        "command": form.get("command", ""),
        "configs": form.getlist("config"),
        "other_configs": form.get("other_configs", ""),
        "repeat": form.get("repeat", ""),
        "evidence": form.get("evidence", "default"),
        "probes": form.getlist("probe"),
        "stall_after": form.get("stall_after", ""),
        "executor": form.get("executor", "auto"),
    }


def _form_problems(exc: ValidationError | LagtraceError) -> list[dict[str, str]]:
    """A rejected form's problems, each naming its field, as the page lists them."""
    if isinstance(exc, ValidationError):
        return [{"field": p["field"], "message": f"{p['field']}: {p['message']}"} for p in validation_problems(exc)]
    return [_problem(exc)]


def _problem(exc: LagtraceError) -> dict[str, str]:
    """A domain error as a form's problem: the field it names (BadInput), and the message."""
    return {"field": getattr(exc, "field", None) or "", "message": str(exc)}


def _new_job_form(typed: dict[str, Any] | None = None, problems: list[dict[str, str]] | None = None, status=200):
    return render_template(
        "new_job.html",
        projects=auth.projects(),
        common_configs=COMMON_CONFIGS,
        probes=PROBES,
        executors=ctx().settings.allowed_executors,  # the server refuses the others anyway
        typed=typed or {"repeat": "5", "evidence": "default", "executor": "auto"},
        problems=problems or [],
    ), status


@bp.route("/jobs/new", methods=["GET", "POST"])
def new_job():
    if request.method == "GET":
        return _new_job_form()
    form = request.form
    settings = ctx().settings
    _count_submission()
    # Every problem at once, and the form filled in again as typed (a redirect to an
    # empty form lost the command, the repository and the configurations).
    problems: list[dict[str, str]] = []
    project = None
    try:
        project = require_project(db(), g.user, int(form.get("project", "")))
    except (ValueError, NotFound):
        problems.append({"field": "project", "message": "project: choose one of yours"})
    command: list[str] = []
    try:
        command = shlex.split(form.get("command", ""))
    except ValueError as exc:
        problems.append({"field": "command", "message": f"command: {exc}"})
    else:
        if not command:
            problems.append({"field": "command", "message": "command: give the test command (python3 -m pytest ...)"})
    spec = None
    try:
        spec = JobSpec.model_validate(
            {**_spec_from_form(form, command=command), "executor": form.get("executor", "auto")},
            context=validation_context(settings),
        )
    except ValidationError as exc:
        problems += [
            {"field": p["field"], "message": f"{p['field']}: {p['message']}"}
            for p in validation_problems(exc)
            if not (p["field"] == "command" and any(q["field"] == "command" for q in problems))
        ]
    archive = request.files.get("archive")
    has_archive = bool(archive and archive.filename)
    url = form.get("repository", "").strip()
    ref = form.get("ref", "").strip() or None
    if has_archive and url:
        problems.append({"field": "repository", "message": "repository: give a git URL or upload an archive, not both"})
    elif not has_archive:
        if not url:
            problems.append({"field": "repository", "message": "repository: give a git URL or upload an archive"})
        else:
            for check in (lambda: check_repository_url(url, settings), lambda: ref and check_ref(ref)):
                try:
                    check()
                except BadInput as exc:
                    problems.append(_problem(exc))
    job = None
    if not problems and project is not None and spec is not None:
        session_ = db()
        try:
            job = submissions.submit_job(
                session_,
                settings,
                project,
                spec,
                **({"archive": archive.read()} if has_archive and archive else {"repository_url": url, "ref": ref}),
                origin="web",
            )
        except (BadInput, Conflict) as exc:
            session_.rollback()
            problems.append(_problem(exc))
        else:
            session_.commit()  # the outbox sends the job's first step now
    if job is None:
        if has_archive:
            # A browser never fills a file input in again.
            problems.append({"field": "archive", "message": "archive: choose the file again"})
        return _new_job_form(_typed(form), problems, 422)
    return redirect(url_for("web.job", job_id=job.id))


@bp.get("/jobs/<int:job_id>")
def job(job_id: int):
    return _job_page(auth.visible_job(job_id))


def _job_page(found, rerun: dict[str, Any] | None = None, status: int = 200):
    """A job's page; ``rerun``: its rerun form as typed, with its problems (422)."""
    # The digest stored when the job finished: flagged, widest and slowest tests, the rest counted.
    detail = submissions.job_detail(db(), found, ctx().settings.thresholds, page=True, settings=ctx().settings)
    report = detail["report"]
    labels, rows = build_matrix(summaries.read_page(report)) if report else ([], [])
    bisect: dict[str, Any] | None = detail.get("bisect")
    result = bisect["result"] if bisect else None
    plot = bisect_plot(result, f"{bisect['test']}: runs and median by commit") if bisect and result else ""
    return render_template(
        "job.html",
        bisect=bisect,
        bisect_plot=plot,
        busy=story.busy_machine(found, session=db()),
        job=found,
        detail=detail,
        report=report,
        labels=labels,
        rows=rows,
        common_configs=COMMON_CONFIGS,
        probes=PROBES,
        finished=found.status in lifecycle.FINISHED,
        rerun=rerun,
    ), status


TESTS_PER_PAGE = 100


@bp.get("/jobs/<int:job_id>/tests")
def job_tests(job_id: int):
    """Every test of a finished job, widest spread first, a page at a time."""
    found = auth.visible_job(job_id)
    if found.kind is JobKind.bisect:
        raise NotFound(f"job {job_id} is a bisect of one test: its commits are on its page")
    if found.status not in lifecycle.FINISHED:
        raise NotFound(f"job {job_id} has not finished: its tests are on its page as they run")
    labels, rows = build_matrix(submissions.finished_report(db(), found, ctx().settings.thresholds))
    tests = rows[1:]  # the whole command is on the job's page
    page = _int_arg("page") or 0
    shown = tests[page * TESTS_PER_PAGE : (page + 1) * TESTS_PER_PAGE]
    return render_template(
        "job_tests.html",
        job=found,
        labels=labels,
        rows=shown,
        page=page,
        total=len(tests),
        first=page * TESTS_PER_PAGE + 1,
        more=(page + 1) * TESTS_PER_PAGE < len(tests),
    )


@bp.get("/jobs/<int:job_id>/progress")
def job_progress(job_id: int):
    """For the page's script: the progress bar without a reload (the page itself also refreshes)."""
    found = auth.visible_job(job_id)
    return jsonify({"status": found.status.value, **submissions.progress(db(), found, ctx().settings)})


@bp.get("/jobs/<int:job_id>/test")
def test(job_id: int):
    return _test_page(auth.visible_job(job_id), request.args.get("id") or None)


def _test_page(found, test_id: str | None, rerun: dict[str, Any] | None = None, status: int = 200):
    """A test's page in a job; ``rerun``: its rerun form as typed, with its problems (422)."""
    job_id = found.id
    samples = collect(found)
    if test_id is None:
        per_config = samples.wall
    elif test_id in samples.tests:
        per_config = samples.tests[test_id]
    else:
        raise NotFound(f"test {test_id!r} did not run in job {job_id}")
    runs = [(config.label, run) for config in found.configs for run in config.runs]
    if test_id is not None:
        runs = [(label, run) for label, run in runs if run.test_id in (None, test_id)]
    durations = {}
    if test_id is not None:
        for config in found.configs:
            for run in config.runs:
                for result in run.test_results:
                    if result.test_id == test_id:
                        durations[run.id] = result
    history = dashboard.latency_history(db(), found, test_id)
    labels = [c.label for c in found.configs]
    title = f"{test_id or 'the whole command'}: latency per configuration"
    return render_template(
        "test.html",
        job=found,
        test_id=test_id,
        plot=strip_plot(per_config, title),
        runs=runs,
        durations=durations,
        history=history,
        labels=labels,
        trend=trend_plot(history, labels, f"{test_id or 'command'}: median per job"),
        common_configs=COMMON_CONFIGS,
        probes=PROBES,
        rerun=rerun,
    ), status


# --- Test catalogue ----------------------------------------------------------------------


NO_BRANCH = "(none)"  # the filter's name for jobs without a branch (an uploaded archive)


class CatalogueFilters(TypedDict):
    """The catalogue's filters (web/catalogue.py catalogue), as the page shows them too."""

    project_id: int | None
    branch: str | None
    config: str | None
    open_only: bool
    search: str | None


def _branch_arg() -> str | None:
    value = request.args.get("branch") or None
    return "" if value == NO_BRANCH else value


@bp.get("/tests")
def tests():
    # Read only: each job brings the catalogue up to date when it finishes (services/jobs/summaries.py).
    ids = auth.project_ids()
    filters: CatalogueFilters = {
        "project_id": _int_arg("project"),
        "branch": _branch_arg(),
        "config": request.args.get("config") or None,
        "open_only": request.args.get("open") == "1",
        "search": request.args.get("q", "").strip()[:200] or None,
    }
    page = _int_arg("page") or 0
    names = {project.id: project.name for project in auth.projects()}
    rows, more = catalogue.catalogue(db(), ids, page=page, names=names, **filters)
    return render_template(
        "tests.html",
        rows=rows,
        more=more,
        page=page,
        filters=filters,
        args=request.args.to_dict(),
        projects=auth.projects(),
        choices=catalogue.choices(db(), ids),
        no_branch=NO_BRANCH,
    )


@bp.get("/tests/entry")
def test_entry():
    project_id = _int_arg("project")
    test_id = request.args.get("id") or ""
    if project_id is None or not test_id:
        # The catalogue links here with both: a bare /tests/entry names no test at all.
        raise NotFound("a test's page needs ?project=ID&id=TEST: open a test from the Tests list")
    return _test_entry_page(project_id, test_id)


def _test_entry_page(project_id: int, test_id: str, bisect: dict[str, Any] | None = None, status: int = 200):
    """A test's page across jobs; ``bisect``: its bisect form as typed, with its problems (422)."""
    if project_id not in auth.project_ids():
        raise NotFound(f"project {project_id} does not exist or you cannot see it")
    project = require_project(db(), g.user, project_id)
    entry = catalogue.test_entry(db(), project, test_id)
    bisects = bisect_jobs.bisects_of_test(db(), project, test_id)
    if not entry.points and not entry.findings and not bisects:
        raise NotFound(f"test {test_id!r} has no finished job in {project.name}")
    plots = [
        (
            branch,
            percentile_trend_plot(
                entry.for_branch(branch),
                entry.labels,
                f"{test_id} on {branch or 'no branch'}",
                [
                    (f.job_id, label, f.title, url_for("web.finding", finding_id=f.id))
                    for f, label in entry.change_points(branch)
                ],
            ),
        )
        for branch in entry.branches
    ]
    return render_template(
        "test_entry.html",
        entry=entry,
        plots=plots,
        bisects=bisects,
        can_bisect=bool(project.repository_url),
        bisect_form=bisect or _bisect_form_of(entry),
    ), status


def _bisect_form_of(entry: catalogue.TestEntry) -> dict[str, Any]:
    """The bisect form as the page offers it: filled from the newest step the test's
    history shows (slower_since: between its last fast and its first slow commit, in the
    configuration that showed it), so that one click asks which commit of that push did it;
    empty where there is none."""
    steps = [
        (finding, step)
        for branch in entry.branches
        for finding, _ in entry.change_points(branch)
        if isinstance(step := metrics_of(finding.kind, finding.metrics), SlowerSinceMetrics)
        and step.first_slow.commit
        and step.last_fast.commit
    ]
    if not steps:
        return {"config": "cpuset=0", "good": "", "bad": "", "problems": [], "from_step": None}
    finding, step = max(steps, key=lambda pair: pair[0].id)
    return {
        "config": finding.config_label or "cpuset=0",
        "good": step.last_fast.commit,
        "bad": step.first_slow.commit,
        "problems": [],
        "from_step": finding,
    }


@bp.post("/tests/bisect")
def bisect_test():
    """The test page's bisect form: stored as the API stores it (services/jobs/bisect_jobs.py)."""
    form = request.form
    try:
        project_id = int(form.get("project", ""))
    except ValueError:
        raise NotFound("project: choose one of yours") from None
    test_id = form.get("test_id", "")
    project = require_project(db(), g.user, project_id)
    _count_submission()
    typed = {name: form.get(name, "").strip() for name in ("config", "good", "bad")}
    session_ = db()
    try:
        wanted = bisect_jobs.BisectSpec.model_validate({"project": project.name, "test": test_id, **typed})
        job = bisect_jobs.submit_bisect(session_, ctx().settings, project, wanted, origin="web")
    except (ValidationError, BadInput, Conflict) as exc:
        session_.rollback()
        return _test_entry_page(project_id, test_id, {**typed, "problems": _form_problems(exc)}, 422)
    session_.commit()  # the outbox sends the bisect step now
    flash(f"Bisect of {test_id} queued as job {job.id}.")
    return redirect(url_for("web.job", job_id=job.id))


def _count_submission() -> None:
    ctx().submissions.take(f"user:{g.user.id}", "job submissions by this user")


@bp.post("/jobs/<int:job_id>/rerun")
def rerun(job_id: int):
    parent = auth.visible_job(job_id)
    # A rerun queues a whole job: it spends the same allowance as the new-job form.
    _count_submission()
    asked = _spec_from_form(request.form)
    test_id = request.form.get("test_id") or None
    session_ = db()
    try:
        wanted = RerunSpec.model_validate(
            {"configs": asked["configs"], "repeat": asked["repeat"]}, context=validation_context(ctx().settings)
        )
        child = submissions.rerun_job(
            session_,
            ctx().settings,
            parent,
            configs=wanted.configs,
            repeat=wanted.repeat,
            origin="web",
            test_id=test_id,
        )
    except (ValidationError, BadInput, Conflict) as exc:
        # Back on the page the form was on, filled in as typed, every problem listed.
        session_.rollback()
        typed = {**_typed(request.form), "problems": _form_problems(exc)}
        if test_id is not None:
            return _test_page(parent, test_id, rerun=typed, status=422)
        return _job_page(parent, rerun=typed, status=422)
    session_.commit()
    flash(f"Rerun of job {parent.id} queued as job {child.id}.")
    return redirect(url_for("web.job", job_id=child.id))


@bp.post("/jobs/<int:job_id>/cancel")
def cancel(job_id: int):
    found = auth.visible_job(job_id)
    session_ = db()
    lifecycle.cancel_job(session_, ctx().settings, found, g.user.username)
    session_.commit()
    return redirect(url_for("web.job", job_id=job_id))


# --- Findings, evidence, artifacts -------------------------------------------------------


def _sort_arg() -> str:
    key = request.args.get("sort", "pct_time")
    return key if key in STRACE_SORTS else "pct_time"


@bp.get("/findings/<int:finding_id>")
def finding(finding_id: int):
    found = auth.visible_finding(finding_id)
    told = story.finding_story(db(), found, auth.project_ids(), sort=_sort_arg(), thresholds=ctx().settings.thresholds)
    return render_template(
        "finding.html",
        finding=found,
        story=told,
        view=triage.finding_view(db(), found, history=True),
        plot=strip_plot(told.samples, f"{found.test_id or 'the whole command'}: every timing run"),
        statuses=list(TriageStatus.__members__),
        wait_syscalls=WAIT_SYSCALLS,
    )


@bp.post("/findings/<int:finding_id>/triage")
def triage_finding(finding_id: int):
    found = auth.visible_finding(finding_id)
    status = request.form.get("status") or None
    if status is not None and status not in TriageStatus.__members__:
        raise BadInput(f"status: one of {', '.join(TriageStatus.__members__)}")
    assignee = request.form.get("assignee", "").strip()[:200] or None
    note = request.form.get("note", "").strip() or None
    session_ = db()
    triage.triage(
        session_,
        found,
        g.user.username,
        status=status,
        assignee=assignee,
        note=note,
        fields={"status", "assignee", "note"},
    )
    check_runs.refresh_after_triage(session_, ctx().settings, found)
    session_.commit()
    flash(f"Finding {found.id} is now {found.status.value}.")
    return redirect(url_for("web.finding", finding_id=finding_id))


@bp.post("/findings/<int:finding_id>/confirm")
def confirm_finding(finding_id: int):
    """One click on a slower_since finding: its last fast and first slow commits screened
    interleaved, base against head, as a pull request's are."""
    found = auth.visible_finding(finding_id)
    # It queues a whole job: it spends the same allowance as the new-job form.
    _count_submission()
    session_ = db()
    job = submissions.confirm_slower_since(session_, ctx().settings, found, origin="web")
    session_.commit()
    # confirm_slower_since read both commits from the same metrics, or refused.
    step = metrics_of(found.kind, found.metrics)
    fast, slow = (
        (step.last_fast.commit or "", step.first_slow.commit or "")
        if isinstance(step, SlowerSinceMetrics)
        else ("", "")
    )
    flash(f"Job {job.id} screens {fast[:12]} (last fast, the base) and {slow[:12]} (first slow, the head) interleaved.")
    return redirect(url_for("web.job", job_id=job.id))


@bp.get("/evidence/<int:evidence_id>")
def evidence(evidence_id: int):
    entry = db().get(Evidence, evidence_id)
    if entry is None or entry.job.project_id not in auth.project_ids():
        raise NotFound(f"evidence {evidence_id} does not exist or is in a project you cannot see")
    return render_template(
        "evidence.html", entry=story.evidence_view(entry, _sort_arg()), job=entry.job, wait_syscalls=WAIT_SYSCALLS
    )


# A py-spy profile larger than this is not drawn in the browser (the download stays).
FLAME_PROFILE_MAX_BYTES = 64 * 1024 * 1024


def _flame_json(node: flamegraph.Node) -> dict[str, Any]:
    # d3-flame-graph's input: name, value (samples), children.
    return {"name": node.name, "value": node.samples, "children": [_flame_json(c) for c in node.children.values()]}


@bp.get("/evidence/<int:evidence_id>/flame.json")
def flame_data(evidence_id: int):
    """The py-spy profile of a pyspy evidence entry as the interactive flame graph reads it."""
    entry = db().get(Evidence, evidence_id)
    if entry is None or entry.job.project_id not in auth.project_ids():
        raise NotFound(f"evidence {evidence_id} does not exist or is in a project you cannot see")
    keys = [a["key"] for a in entry.artifacts or [] if a.get("key") and a.get("media_type") == "application/json"]
    if entry.kind != EvidenceKind.pyspy or not keys:
        raise NotFound(f"evidence {evidence_id} has no py-spy profile")
    try:
        with make_artifact_store(ctx().settings).open(keys[0]) as reader:
            chunks, size = [], 0
            while size <= FLAME_PROFILE_MAX_BYTES and (chunk := reader.read(1 << 20)):
                chunks.append(chunk)
                size += len(chunk)
            raw = b"".join(chunks)
    except FileNotFoundError:
        raise NotFound("the profile is gone (past LAGTRACE_ARTIFACT_RETENTION_DAYS)") from None
    if len(raw) > FLAME_PROFILE_MAX_BYTES:
        raise BadInput(f"the profile is larger than {FLAME_PROFILE_MAX_BYTES // 2**20} MiB: download it instead")
    try:
        tree = flamegraph.tree_from_speedscope(json.loads(raw))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BadInput(f"the stored profile is not a speedscope file py-spy writes: {exc}") from None
    return jsonify(_flame_json(tree))


@bp.get("/artifacts/<path:key>")
def artifact(key: str):
    """A stored artifact, decompressed: inline for the flame graph, as a download otherwise."""
    job_part = key.split("/", 1)[0]
    if not job_part.startswith("job-") or not job_part[4:].isdigit():
        raise NotFound(f"artifact {key!r} does not exist")
    found = auth.visible_job(int(job_part[4:]))
    reference = submissions.find_artifact(db(), found.project, key)
    try:
        reader = make_artifact_store(ctx().settings).open(key)
    except FileNotFoundError:
        raise NotFound(f"artifact {key!r} is gone (past LAGTRACE_ARTIFACT_RETENTION_DAYS)") from None
    inline = reference["media_type"] == "image/svg+xml" and not request.args.get("download")
    response = send_file(
        reader, mimetype=reference["media_type"], as_attachment=not inline, download_name=reference["name"]
    )
    response.headers["Content-Security-Policy"] = ARTIFACT_CSP
    return response
