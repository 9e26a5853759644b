"""`lagtrace migrate --check`: what the chart's wait-for-schema init container polls."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.mark.postgres
def test_check_fails_on_an_empty_database_and_passes_after_migrate(postgres_url):
    for _ in range(2):  # a check changes nothing: the second finds the schema still missing
        before = run_cli(["migrate", "--check"], postgres_url)
        assert before.returncode == 1 and "not at head" in before.stderr
    assert run_cli(["migrate"], postgres_url).returncode == 0
    after = run_cli(["migrate", "--check"], postgres_url)
    assert after.returncode == 0, after.stderr


def test_check_fails_when_the_database_is_unreachable(tmp_path):
    result = run_cli(["migrate", "--check"], "postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert result.returncode == 1 and "not reachable" in result.stderr


@pytest.mark.parametrize("args", [["migrate"], ["token", "create", "--project", "demo"]])
def test_a_command_with_the_database_down_says_so_in_one_line(args):
    result = run_cli(args, "postgresql+psycopg://nobody:hunter2@127.0.0.1:1/none")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot reach the database at postgresql+psycopg://nobody:***@127.0.0.1:1/none" in lines[0]
    assert "hunter2" not in result.stderr and "Traceback" not in result.stderr


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    result = run_cli(["--version"], "sqlite://")
    assert result.returncode == 0 and result.stdout.strip() == f"lagtrace, version {version('lagtrace')}"


def test_a_command_whose_broker_is_down_says_so_in_one_line(monkeypatch):
    """No shipped command stops on the broker (the worker retries: Redis may come back), so a
    command of the same group that sends to a real, unreachable Redis stands for one."""
    import click
    from click.testing import CliRunner

    from cli.main import _Group
    from services.settings import Settings
    from worker import make_celery

    monkeypatch.setenv("LAGTRACE_BROKER_URL", "redis://:s3cret@127.0.0.1:1/0")

    @click.group(cls=_Group)
    def group() -> None:
        pass

    @group.command()
    def send() -> None:
        with make_celery(Settings()).connection_for_write() as connection:
            connection.ensure_connection(max_retries=1)

    result = CliRunner().invoke(group, ["send"])
    assert result.exit_code == 1 and type(result.exception).__name__ == "ServiceUnreachable"
    message = str(result.exception)
    assert message.startswith("cannot reach the broker at redis://:***@127.0.0.1:1/0") and "\n" not in message
    assert "s3cret" not in message
