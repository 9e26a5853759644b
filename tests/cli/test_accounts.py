"""`lagtrace token list` and `lagtrace user list`: what an operator needs to tell tokens
and accounts apart, never a secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sqlalchemy import select

from services.accounts.tokens import authenticate
from services.db import make_engine, make_session_factory
from services.models import ApiToken, Project, User
from services.settings import Settings
from tests.conftest import REPO, run_cli


def _ok(args: list[str], database_url: str, stdin: str | None = None) -> str:
    if stdin is None:
        result = run_cli(args, database_url)
        code, out, err = result.returncode, result.stdout, result.stderr
    else:
        done = subprocess.run(
            [sys.executable, "-m", "cli.main", *args],
            cwd=REPO,
            env={**os.environ, "LAGTRACE_DATABASE_URL": database_url},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        code, out, err = done.returncode, done.stdout, done.stderr
    assert code == 0, err
    return out


def test_token_list_shows_prefix_project_name_expiry_use_and_state_but_no_secret(database_url):
    _ok(["migrate"], database_url)
    used = _ok(["token", "create", "--project", "octo/demo", "--name", "ci"], database_url).strip()
    unused = _ok(["token", "create", "--project", "octo/other", "--no-expiry"], database_url).strip()
    revoked = _ok(["token", "create", "--project", "octo/demo", "--name", "old", "--days", "7"], database_url).strip()
    _ok(["token", "revoke", revoked[:10]], database_url)
    engine = make_engine(Settings(database_url=database_url))
    with make_session_factory(engine)() as session:
        authenticate(session, f"Bearer {used}")
        session.commit()
        hashes = list(session.scalars(select(ApiToken.token_hash)))
    engine.dispose()

    table = _ok(["token", "list"], database_url)
    lines = table.strip().splitlines()
    assert lines[0].split() == ["prefix", "project", "name", "created", "expires", "last", "used", "state"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {used[:10], unused[:10], revoked[:10]}
    assert "octo/demo" in rows[used[:10]] and " ci " in rows[used[:10]] and rows[used[:10]].endswith("active")
    assert rows[used[:10]].count("never") == 0  # it expires (90 days) and it was used
    assert "octo/other" in rows[unused[:10]] and rows[unused[:10]].count("never") == 2  # no expiry, never used
    assert rows[revoked[:10]].endswith("revoked")
    for secret in [used, unused, revoked, *hashes]:
        assert secret not in table

    listed = [
        json.loads(line)
        for line in _ok(["token", "list", "--json", "--project", "octo/demo"], database_url).splitlines()
    ]
    assert [(t["prefix"], t["name"], t["state"]) for t in listed] == [
        (used[:10], "ci", "active"),
        (revoked[:10], "old", "revoked"),
    ]
    assert listed[0]["last_used_at"] is not None and listed[1]["expires_at"] is not None
    assert "token_hash" not in listed[0]


def test_user_list_shows_names_projects_and_admins_but_no_password_hash(database_url):
    _ok(["migrate"], database_url)
    assert "no users" in run_cli(["user", "list"], database_url).stderr
    for args in (["alice", "--project", "octo/demo", "--project", "octo/web"], ["ops", "--admin"]):
        _ok(["user", "create", *args, "--password-stdin"], database_url, stdin="correct horse battery\n")
    table = _ok(["user", "list"], database_url)
    lines = table.strip().splitlines()
    assert lines[0].split() == ["user", "admin", "projects", "last", "sign-in"]
    assert lines[1].split() == ["alice", "no", "octo/demo,", "octo/web", "never"]
    assert lines[2].split() == ["ops", "yes", "-", "never"]
    engine = make_engine(Settings(database_url=database_url))
    with make_session_factory(engine)() as session:
        assert all(stored not in table for stored in session.scalars(select(User.password_hash)))
    engine.dispose()


def test_registering_a_repository_again_keeps_its_webhook_secret_unless_asked_to_rotate(sqlite_url):
    """`repo register OWNER/NAME --allow-forks` on a registered repository (an opt-in added
    later) used to make a new secret: GitHub's deliveries, signed with the old, got 401."""
    assert run_cli(["migrate"], sqlite_url).returncode == 0

    def register(*options: str) -> tuple[str, str]:
        done = run_cli(["repo", "register", "octo/demo", *options], sqlite_url)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip(), done.stderr.strip()

    first, said = register()
    assert said == "lagtrace: octo/demo: a new webhook secret (above): give it to GitHub with the webhook"
    again, said = register("--allow-forks", "--image", "my-runner:3.12")
    assert again == first
    assert said == "lagtrace: octo/demo: webhook secret kept (the one GitHub has); --rotate-secret makes a new one"
    rotated, said = register("--allow-forks", "--rotate-secret")
    assert rotated != first and len(rotated) >= 32
    assert said.startswith("lagtrace: octo/demo: webhook secret rotated: GitHub's deliveries are refused (401)")
    engine = make_engine(Settings(database_url=sqlite_url))
    with make_session_factory(engine)() as session:
        project = session.scalar(select(Project).where(Project.github_repository == "octo/demo"))
        assert project.webhook_secret == rotated and project.allow_fork_pull_requests
    engine.dispose()
    both = run_cli(["repo", "register", "octo/demo", "--rotate-secret", "--secret-stdin"], sqlite_url)
    assert both.returncode == 2 and "not both" in both.stderr


def test_a_bad_setting_is_named_by_its_variable_without_pydantics_wording(sqlite_url):
    done = run_cli(["token", "list"], sqlite_url, env={"LAGTRACE_THRESHOLDS__BUDGET_MULTIPLE": "-1"})
    assert done.returncode == 2
    assert "invalid setting: LAGTRACE_THRESHOLDS__BUDGET_MULTIPLE: Input should be greater than 1" in done.stderr
    done = run_cli(["token", "list"], sqlite_url, env={"LAGTRACE_ALLOWED_EXECUTORS": "kubernetes"})
    assert done.returncode == 2
    assert "LAGTRACE_ALLOWED_EXECUTORS: LAGTRACE_ALLOWED_EXECUTORS: a comma-separated list" not in done.stderr
    assert "Value error" not in done.stderr and "LAGTRACE_ALLOWED_EXECUTORS" in done.stderr
