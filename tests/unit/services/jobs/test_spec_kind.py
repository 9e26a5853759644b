"""A job's kind as `.lagtrace.yml` gives it: a matrix unless it says gate, named when wrong."""

from __future__ import annotations

import pytest

from services.errors import BadInput
from services.jobs.sources import parse_repository_config


def test_a_repository_config_is_a_matrix_unless_it_says_gate():
    assert parse_repository_config("command: python -m pytest\n").kind == "matrix"
    assert parse_repository_config("command: python -m pytest\nkind: gate\n").kind == "gate"
    assert parse_repository_config("command: python -m pytest\nkind: matrix\n").kind == "matrix"


@pytest.mark.parametrize("value", ["nightly", "Gate", "1", "[gate]"])
def test_a_bad_kind_in_lagtrace_yml_names_the_field(value):
    with pytest.raises(BadInput, match="kind"):
        parse_repository_config(f"command: python -m pytest\nkind: {value}\n")
