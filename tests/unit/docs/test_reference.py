"""The docs' reference pages are rendered from the code (docs/hooks/reference.py, an MkDocs
hook): every field of Settings and Thresholds with the default the code has, its
environment variable and a description; every CLI command's --help; every path of the
OpenAPI document; every definition of the report's JSON Schema."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from pydantic import Field

from api.openapi import document
from services.settings import Settings
from services.thresholds import Thresholds
from tests.conftest import REPO

HOOK = REPO / "docs" / "hooks" / "reference.py"


def load_hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hook():
    return load_hook()


def table(markdown: str) -> dict[str, list[str]]:
    """The rendered settings table: environment variable -> its other cells."""
    rows = {}
    for line in markdown.splitlines():
        match = re.match(r"^\| `(LAGTRACE_[A-Z0-9_]+)` \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in re.split(r"(?<!\\)\|", match.group(2))]
    return rows


def expected_default(value) -> str:
    """A default written as in the environment, worked out here apart from the hook."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(value) or "(empty)"
    if isinstance(value, Path):
        return str(value).replace(str(Path.home()) + "/", "~/")
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    if isinstance(value, str) and "sqlite" in value:
        return value.replace(str(Path.home()) + "/", "~/")
    return str(value) if value != "" else '""'


@pytest.mark.parametrize(
    ("model", "prefix", "marker"),
    [(Settings, "LAGTRACE_", "settings"), (Thresholds, "LAGTRACE_THRESHOLDS__", "thresholds")],
)
def test_every_field_is_listed_with_the_codes_default(hook, model, prefix, marker):
    rendered = table(hook.expand(f"<!-- reference:{marker} -->"))
    fields = {name: field for name, field in model.model_fields.items() if name != "thresholds"}
    assert set(rendered) == {prefix + name.upper() for name in fields}
    for name, field in fields.items():
        default_cell = rendered[prefix + name.upper()][0]
        shown = default_cell.strip("`").split(" (")[0]  # "52428800 (50 MiB)" -> "52428800"
        assert shown == expected_default(field.get_default(call_default_factory=True)), name


def test_the_thresholds_table_shows_min_repetitions_as_the_code_has_it(hook):
    """The hand-written table once said 3 where the code said 5."""
    row = table(hook.expand("<!-- reference:thresholds -->"))["LAGTRACE_THRESHOLDS__MIN_REPETITIONS"]
    assert row[0] == f"`{Thresholds.model_fields['min_repetitions'].default}`"


def test_a_changed_default_changes_the_page(hook):
    """The table is read from the model, not written down: a default moved in the code moves."""

    class Moved(Thresholds):
        min_repetitions: int = Field(9, ge=3)

    rows = table(hook.render_model(Moved, "LAGTRACE_THRESHOLDS__"))
    assert rows["LAGTRACE_THRESHOLDS__MIN_REPETITIONS"][0] == "`9`"


@pytest.mark.parametrize("model", [Settings, Thresholds])
def test_every_field_has_a_description(hook, model):
    """A new setting without a comment in the code (or a line in the hook's
    EXTRA_DESCRIPTIONS) fails here rather than reaching the docs blank."""
    for row in hook.model_rows(model, "X_"):
        assert row["description"].strip(), f"{row['name']}: no comment above it in the code"


def test_the_cli_reference_is_every_commands_help(hook):
    from cli.main import cli

    rendered = hook.expand("<!-- reference:cli -->")
    for name, command in cli.commands.items():
        assert f"`lagtrace {name}`" in rendered, name
        for sub in getattr(command, "commands", {}):
            assert f"`lagtrace {name} {sub}`" in rendered, (name, sub)
    assert "Usage: lagtrace run [OPTIONS] [COMMAND]..." in rendered
    assert "--repeat" in rendered and "--budget" in rendered


@pytest.mark.parametrize("args", [["run"], ["token", "create"], []])
def test_a_commands_reference_is_what_its_help_prints(hook, args):
    from click.testing import CliRunner

    from cli.main import cli

    printed = CliRunner().invoke(
        cli, [*args, "--help"], prog_name="lagtrace", terminal_width=100, max_content_width=100
    )
    assert printed.exit_code == 0, printed.output
    rendered = hook.expand("<!-- reference:cli -->")
    assert f"`{' '.join(['lagtrace', *args])}`\n\n```text\n{printed.output.rstrip()}\n```" in rendered


def test_the_api_reference_lists_every_path_and_method(hook):
    rendered = hook.expand("<!-- reference:api -->")
    for path, operations in document()["paths"].items():
        for method in operations:
            assert f"### `{method.upper()} {path}`" in rendered, (method, path)
    for name in document()["components"]["schemas"]:
        assert f"### {name}\n" in rendered, name


def test_the_report_schema_reference_lists_every_definition(hook):
    schema = json.loads((REPO / "services/jobs/report-v1.schema.json").read_text())
    rendered = hook.expand("<!-- reference:report-schema -->")
    for name in schema["$defs"]:
        assert f"### {name}\n" in rendered, name
    for name in schema["properties"]:
        assert f"| `{name}` |" in rendered, name


def test_an_unknown_marker_fails_the_build(hook):
    with pytest.raises(ValueError, match="unknown reference marker"):
        hook.expand("<!-- reference:nothing -->")
