"""A job's time budget as `.lagtrace.yml` gives it: seconds, positive, named when wrong."""

from __future__ import annotations

import pytest

from services.errors import BadInput
from services.jobs.sources import parse_repository_config


def test_a_budget_in_lagtrace_yml_is_read_in_seconds():
    assert parse_repository_config("command: python -m pytest\nbudget_s: 900\n").budget_s == 900
    assert parse_repository_config("command: python -m pytest\n").budget_s is None


@pytest.mark.parametrize("value", ["0", "-5", "soon", "1e12"])
def test_a_bad_budget_in_lagtrace_yml_names_the_field(value):
    with pytest.raises(BadInput, match="budget_s"):
        parse_repository_config(f"command: python -m pytest\nbudget_s: {value}\n")
