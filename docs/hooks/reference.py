"""The reference pages, rendered from the code at build time (an MkDocs hook, mkdocs.yml).

A page holds a marker such as ``<!-- reference:settings -->``; the hook replaces it with
what the code says today: every field of ``Settings`` and ``Thresholds`` with its default,
its environment variable and its comment; the CLI's own ``--help``; the OpenAPI document;
the report's JSON Schema. So the pages cannot drift from the code
(tests/unit/docs/test_reference.py renders them and compares them with the models).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import sys
import textwrap
from enum import Enum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The docs describe the tree they are built from, not whatever lagtrace is installed.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SHARED = "As above (the comment in the code covers this field too)."
MARKER = re.compile(r"<!--\s*reference:([a-z_-]+)\s*-->")
ENV_PREFIX = "LAGTRACE_"

# Fields whose comment in the code covers the field above them, not them; their meaning,
# said once here. A field with neither a comment nor an entry here fails the reference
# test (tests/unit/docs/test_reference.py::test_every_field_has_a_description).
EXTRA_DESCRIPTIONS = {
    "artifact_dir": "Large evidence files (cores, flame graphs), zstd-compressed, where no S3 bucket is set.",
    "github_webhook_secret": "The shared webhook secret tried for deliveries to "
    "`/api/v1/webhooks/github` when no registered repository's secret matches (`repo register` "
    "gives each repository its own).",
    "github_api_url": "GitHub's API; set it for GitHub Enterprise.",
    "github_check_name": "The name of the check run lagtrace posts on each commit.",
    "max_archive_bytes": "An uploaded tarball's size as sent (the request body); larger is refused with 413.",
    "clone_timeout_s": "How long a clone of a job's repository may take.",
    "max_stall_after_s": "The largest `stall_after` a job may ask for.",
    "task_time_limit_s": "The task's hard time limit (see the soft limit above).",
    "broker_visibility_timeout_s": "The broker hands an unacknowledged message to another "
    "worker after this long; it must outlive the hard time limit.",
    "task_max_attempts": "A step started this many times without finishing fails the job and says why.",
    "heartbeat_interval_s": "How often the process running a step renews its lease (at most half the lease).",
    "reconcile_interval_s": "How often the reconciler resends steps whose lease lapsed.",
    "session_hours": "A dashboard session ends this long after its cookie was last signed "
    "(a request signs it again once it is a minute old).",
}


# --- settings and thresholds -------------------------------------------------------


def _comments(model: type) -> tuple[dict[str, str], set[str]]:
    """Each field's comment in the model's source: the comment block right above it. A field
    with none, in a run of fields under one comment (no blank line between), shares that
    comment: those are returned apart, so the table can say "as above"."""
    source = textwrap.dedent(inspect.getsource(model))
    lines = source.splitlines()
    cls = ast.parse(source).body[0]
    assert isinstance(cls, ast.ClassDef)
    own: dict[str, str] = {}
    shared: set[str] = set()
    previous: str | None = None
    previous_end = -1
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            previous = None
            continue
        name = node.target.id
        row = node.lineno - 2  # the line above, 0-based
        block: list[str] = []
        while row >= 0 and lines[row].strip().startswith("#") and not lines[row].strip().startswith("# ---"):
            block.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        if block:
            own[name] = " ".join(block)
        elif previous is not None and lines[node.lineno - 2].strip() and node.lineno - 2 == previous_end:
            shared.add(name)
        previous, previous_end = name, (node.end_lineno or node.lineno) - 1
    return own, shared


def _env_default(value: Any) -> str:
    """A default as it would be written in the environment."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value) or "(empty)"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}" if abs(value) < 1e15 else str(value)
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"{value} ({value >> 30} GiB)" if value % (1 << 30) == 0 else f"{value} ({value >> 20} MiB)"
    text = str(value)
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        text = text.replace(home + os.sep, "~" + os.sep)
    return text or '""'


def field_default(model: type, name: str) -> str:
    """A field's default as the code has it, written as in the environment."""
    field = model.model_fields[name]  # type: ignore[attr-defined]
    return _env_default(field.get_default(call_default_factory=True))


def _constraints(field: Any) -> str:
    words = []
    for item in field.metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            bound = getattr(item, attr, None)
            if bound is not None:
                words.append(f"{sign} {bound:g}" if isinstance(bound, (int, float)) else f"{sign} {bound}")
        pattern = getattr(item, "pattern", None)
        if pattern:
            words.append(f"matches `{pattern}`")
    return ", ".join(words)


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation)
    text = re.sub(r"typing\.Annotated\[(.*?), .*\]$", r"\1", text)
    text = text.replace("typing.", "").replace("pathlib.", "").replace("pydantic.types.", "")
    return text.replace("NoneType", "None")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def model_rows(model: type, prefix: str) -> list[dict[str, str]]:
    """One row per field of a pydantic model: name, environment variable, default, type,
    constraints, description. Nested models (Settings.thresholds) are left to their own table."""
    own, shared = _comments(model)
    rows = []
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        if isinstance(field.annotation, type) and hasattr(field.annotation, "model_fields"):
            continue
        description = field.description or own.get(name) or EXTRA_DESCRIPTIONS.get(name, "")
        if not description and name in shared:
            description = SHARED
        rows.append(
            {
                "name": name,
                "env": f"{prefix}{name.upper()}",
                "default": field_default(model, name),
                "type": _type_name(field.annotation),
                "constraints": _constraints(field),
                "description": description,
            }
        )
    return rows


def render_model(model: type, prefix: str) -> str:
    out = ["| environment variable | default | type | description |", "|---|---|---|---|"]
    for row in model_rows(model, prefix):
        kind = row["type"] + (f" ({row['constraints']})" if row["constraints"] else "")
        out.append(f"| `{row['env']}` | `{_cell(row['default'])}` | {_cell(kind)} | {_cell(row['description'])} |")
    return "\n".join(out) + "\n"


def render_settings() -> str:
    from services.settings import Settings

    return render_model(Settings, ENV_PREFIX)


def render_thresholds() -> str:
    from services.thresholds import Thresholds

    return render_model(Thresholds, f"{ENV_PREFIX}THRESHOLDS__")


# --- the CLI ------------------------------------------------------------------------


def _commands(group: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    import click

    found = [(path, group)]
    if isinstance(group, click.Group):
        for name in sorted(group.commands):
            found.extend(_commands(group.commands[name], [*path, name]))
    return found


def render_cli() -> str:
    """Every command's own ``--help``, as a terminal 100 columns wide shows it."""
    import click

    from cli.main import cli

    out = []
    for path, command in _commands(cli, ["lagtrace"]):
        if getattr(command, "hidden", False):
            continue
        parent = None
        for depth, name in enumerate(path):
            current = cli if depth == 0 else parent.command.commands[name]  # type: ignore[union-attr]
            # As the command line makes it: each command's own context settings (-h too).
            settings = {**current.context_settings, "max_content_width": 100, "terminal_width": 100}
            parent = click.Context(current, info_name=name, parent=parent, **settings)
        assert parent is not None
        heading = "#" * min(len(path) + 1, 4)
        out.append(f"{heading} `{' '.join(path)}`\n\n```text\n{parent.get_help()}\n```\n")
    return "\n".join(out)


def render_cli_env() -> str:
    """The command-line options that an environment variable also sets (click's envvar)."""
    from cli.main import cli

    out = ["| environment variable | option | default | help |", "|---|---|---|---|"]
    for path, command in _commands(cli, ["lagtrace"]):
        for param in getattr(command, "params", []):
            names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or [])
            for name in names:
                if param.required:
                    default = "required"
                elif isinstance(param.default, (str, int, float, bool, type(None))):
                    default = _env_default(param.default)
                else:
                    default = "unset"  # click's sentinel for "no default"
                option = f"`{' '.join(path)} {param.opts[0]}`"
                out.append(f"| `{name}` | {option} | `{default}` | {_cell(getattr(param, 'help', '') or '')} |")
    return "\n".join(out) + "\n"


# --- the API ------------------------------------------------------------------------


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(_schema_type(item) for item in schema.get("anyOf", schema.get("oneOf", [])))
    if "enum" in schema:
        return " / ".join(f"`{value}`" for value in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    if isinstance(kind, list):
        return " or ".join(kind)
    return str(kind)


def _properties_table(schema: dict[str, Any]) -> str:
    properties = schema.get("properties", {})
    if not properties:
        return ""
    required = set(schema.get("required", []))
    out = ["| field | type | required | description |", "|---|---|---|---|"]
    for name, prop in properties.items():
        description = prop.get("description") or prop.get("title", "")
        if "default" in prop and prop["default"] is not None:
            description = f"{description} (default `{json.dumps(prop['default'])}`)".strip()
        out.append(
            f"| `{name}` | {_cell(_schema_type(prop))} | {'yes' if name in required else ''} | {_cell(description)} |"
        )
    return "\n".join(out) + "\n"


def render_api() -> str:
    """Every path and method of the OpenAPI document the server serves, with its parameters,
    body and answers, then the schemas the bodies name."""
    from markdown.extensions.toc import slugify

    from api.openapi import document

    doc = document()
    out = [f"OpenAPI {doc['openapi']}, *{doc['info']['title']}* {doc['info'].get('version', '')}.\n"]
    out.append("| method | path | what |\n|---|---|---|")
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            anchor = slugify(f"{method.upper()} {path}", "-")  # the heading's anchor, as toc makes it
            out.append(f"| `{method.upper()}` | [`{path}`](#{anchor}) | {_cell(operation.get('summary', ''))} |")
    out.append("")
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            out.append(f"### `{method.upper()} {path}`\n\n{operation.get('summary', '')}\n")
            parameters = operation.get("parameters", [])
            if parameters:
                out.append("| parameter | in | type | required | description |\n|---|---|---|---|---|")
                for parameter in parameters:
                    kind = _cell(_schema_type(parameter.get("schema", {})))
                    required = "yes" if parameter.get("required") else ""
                    description = _cell(parameter.get("description", ""))
                    out.append(f"| `{parameter['name']}` | {parameter['in']} | {kind} | {required} | {description} |")
                out.append("")
            body = operation.get("requestBody")
            if body:
                kinds = [f"`{kind}` {_schema_type(media.get('schema', {}))}" for kind, media in body["content"].items()]
                out.append("Body: " + "; ".join(kinds) + "\n")
            answers = []
            for code, response in operation.get("responses", {}).items():
                media = response.get("content", {}).get("application/json", {})
                schema = f" ({_schema_type(media['schema'])})" if "schema" in media else ""
                answers.append(f"`{code}` {response.get('description', '')}{schema}")
            out.append("Answers: " + "; ".join(answers) + "\n")
    out.append("## Schemas\n")
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out.append(f"### {name}\n\n{schema.get('description', '')}\n")
        out.append(_properties_table(schema) or f"`{json.dumps(schema)}`\n")
    return "\n".join(out)


# --- the report's JSON Schema ---------------------------------------------------------


def render_report_schema() -> str:
    schema = json.loads((ROOT / "services/jobs/report-v1.schema.json").read_text())
    out = [f"`{schema.get('$id', '')}`: the top-level object, *{schema.get('title', '')}*.\n"]
    out.append(_properties_table(schema))
    for name, definition in schema.get("$defs", {}).items():
        out.append(f"### {name}\n\n{definition.get('description', '')}\n")
        if "enum" in definition:
            out.append("One of " + ", ".join(f"`{value}`" for value in definition["enum"]) + ".\n")
        else:
            out.append(_properties_table(definition))
    return "\n".join(out)


RENDERERS = {
    "settings": render_settings,
    "thresholds": render_thresholds,
    "cli": render_cli,
    "cli-env": render_cli_env,
    "api": render_api,
    "report-schema": render_report_schema,
}


def expand(markdown: str) -> str:
    """The page with each marker replaced by its rendering; an unknown marker fails the build."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise ValueError(f"unknown reference marker {name!r} (known: {', '.join(RENDERERS)})")
        return RENDERERS[name]()

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return expand(markdown)
