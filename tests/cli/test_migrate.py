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
