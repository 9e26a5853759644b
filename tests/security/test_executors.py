"""Host code execution: a job asking for the local executor, from every entry point, and
`auto` with no usable engine. The attack: a command that leaves a marker on the host."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from services.models import Job, Run
from tests.conftest import REPO
from tests.security.conftest import GITHUB_TOKEN_CANARY, PASSWORD, SECRET_KEY_CANARY
from tests.service_support import SECRET, make_repository, push_payload, register

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def marker_command(marker) -> list[str]:
    # Creates a host file if it runs on the host; inside a container the path does not exist.
    return ["python3", "-c", f"open({str(marker)!r}, 'w').write('ran on the host')"]


def test_executor_local_through_the_api_is_refused(service, tmp_path):
    url, _ = make_repository(tmp_path / "repo", None)
    marker = tmp_path / "pwned-api"
    response = service.submit({"repository": {"url": url}, "command": marker_command(marker), "executor": "local"})
    assert response.status_code == 422, response.get_json()
    assert "executor" in response.get_json()["error"] and "not allowed" in response.get_json()["error"]
    assert service.count(Job) == 0 and not marker.exists()


def test_executor_local_through_the_dashboard_form_is_refused(service, tmp_path):
    url, _ = make_repository(tmp_path / "repo", None)
    marker = tmp_path / "pwned-form"
    service.add_user("mallory", ["octo/demo"])
    client = service.client

    def csrf(path):
        return CSRF.search(client.get(path).get_data(as_text=True)).group(1)

    client.post("/sign-in", data={"username": "mallory", "password": PASSWORD, "csrf_token": csrf("/sign-in")})
    form = client.get("/jobs/new").get_data(as_text=True)
    assert "<option>local</option>" not in form  # not offered...
    project_id = re.search(r'<option value="(\d+)">octo/demo</option>', form).group(1)
    response = client.post(
        "/jobs/new",
        data={
            "project": project_id,
            "repository": url,
            "command": " ".join(marker_command(marker)[:2]) + f' "{marker_command(marker)[2]}"',
            "config": ["cpuset=0"],
            "repeat": "1",
            "evidence": "none",
            "executor": "local",  # ...and refused when posted anyway
            "csrf_token": csrf("/jobs/new"),
        },
    )
    assert response.status_code == 422, response.get_data(as_text=True)[:500]
    assert "not allowed" in response.get_data(as_text=True)
    assert service.count(Job) == 0 and not marker.exists()


def test_executor_local_through_a_webhooks_lagtrace_yml_fails_the_job(service, tmp_path, github_server):
    marker = tmp_path / "pwned-webhook"
    command = json.dumps(marker_command(marker))
    url, head = make_repository(tmp_path / "repo", f"command: {command}\nexecutor: local\nrepeat: 1\n")
    register(service.settings, service.session_factory, url)
    response = service.deliver(push_payload(url, head), "d-local")
    assert response.status_code == 202, response.get_json()
    job = service.wait(response.get_json()["job_id"])
    assert job["status"] == "failed" and "not allowed" in job["error"], job["error"]
    assert service.count(Run) == 0 and not marker.exists()


def test_auto_fails_closed_when_docker_cannot_run_the_job(make_service, tmp_path):
    # The engine answers but the runner image is missing: `auto` used to fall back to local.
    service = make_service()
    service.settings.docker_image = "lagtrace-runner:does-not-exist"
    url, _ = make_repository(tmp_path / "repo", None)
    marker = tmp_path / "pwned-auto"
    response = service.submit(
        {"repository": {"url": url}, "command": marker_command(marker), "configs": ["cpuset=0"], "repeat": 1}
    )
    assert response.status_code == 201, response.get_json()
    job = service.wait(response.get_json()["id"])
    assert job["status"] == "failed" and "only in containers" in job["error"], job["error"]
    assert service.count(Run) == 0 and not marker.exists()


PRINT_ENV = "import os, sys; print(sorted(os.environ.items())); sys.exit(3)"


def test_a_service_job_sees_none_of_the_workers_secrets(service, tmp_path):
    url, _ = make_repository(tmp_path / "repo", None)
    response = service.submit(
        {
            "repository": {"url": url},
            "command": ["python3", "-c", PRINT_ENV],
            "configs": ["cpuset=0"],
            "repeat": 1,
            "evidence": [],
        }
    )
    job = service.wait(response.get_json()["id"])
    tail = job["report"]["failed_runs"][0]["output_tail"]
    assert "PATH" in tail  # the environment was printed...
    text = json.dumps(job)
    for secret in (SECRET, SECRET_KEY_CANARY, GITHUB_TOKEN_CANARY, service.settings.database_url, "LAGTRACE_"):
        assert secret not in text  # ...and none of the worker's settings are in it


def test_the_local_executors_child_gets_an_environment_built_from_scratch(tmp_path):
    # `lagtrace run` keeps the local executor (the user runs their own code), but a
    # command still does not inherit the caller's credentials.
    report = tmp_path / "report.json"
    env = {
        **os.environ,
        "LAGTRACE_SECRET_KEY": SECRET_KEY_CANARY,
        "LAGTRACE_GITHUB_TOKEN": GITHUB_TOKEN_CANARY,
        "AWS_SECRET_ACCESS_KEY": "aws-canary-55e0",
        "LC_ALL": "C.UTF-8",
        # Its own database: never the user's default one under ~/.local/share.
        "LAGTRACE_DATABASE_URL": f"sqlite:///{tmp_path / 'lagtrace.db'}",
        "LAGTRACE_ARTIFACT_DIR": str(tmp_path / "artifacts"),
    }
    options = ["--executor", "local", "--config", "cpuset=0", "--repeat", "1", "--evidence", "none"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "run",
            *options,
            "--json",
            str(report),
            "--",
            sys.executable,
            "-c",
            PRINT_ENV,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    tail = json.loads(report.read_text())["failed_runs"][0]["output_tail"]
    assert "'PATH'" in tail and "'LC_ALL', 'C.UTF-8'" in tail
    for secret in (SECRET_KEY_CANARY, GITHUB_TOKEN_CANARY, "aws-canary-55e0", "LAGTRACE_"):
        assert secret not in tail
