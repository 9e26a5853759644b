"""How often `.lagtrace.yml` asks for a matrix job on the default branch: hours, above 0,
unset by default (never scheduled), named when wrong."""

from __future__ import annotations

import pytest

from services.errors import BadInput
from services.jobs.sources import parse_repository_config
from services.jobs.spec import JobSpec


def test_matrix_every_h_is_unset_unless_given_and_read_as_hours():
    assert parse_repository_config("command: python -m pytest\n").matrix_every_h is None
    assert parse_repository_config("command: python -m pytest\nmatrix_every_h: 24\n").matrix_every_h == 24.0
    assert parse_repository_config("command: python -m pytest\nmatrix_every_h: 0.5\n").matrix_every_h == 0.5


@pytest.mark.parametrize("value", ["0", "-6", "daily", "[24]", "{}"])
def test_a_bad_matrix_every_h_in_lagtrace_yml_names_the_field(value):
    with pytest.raises(BadInput, match="matrix_every_h"):
        parse_repository_config(f"command: python -m pytest\nmatrix_every_h: {value}\n")


def test_an_api_job_cannot_ask_for_a_schedule():
    # A schedule is the branch's, read from its pushes: a job submitted by the API has none.
    with pytest.raises(ValueError, match="matrix_every_h"):
        JobSpec.model_validate({"command": ["python", "-m", "pytest"], "matrix_every_h": 24})
