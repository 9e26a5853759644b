"""How the docker executor's prepare step installs a working tree: the `install:` of its
`.lagtrace.yml`, or what the tree's own files say (docs/guides/github.md, "How the project
is installed").

The default installs a project's base requirements and its test requirements; the project
itself (`pip install -e .`, so that `import pkg` works from a `src/` layout and the code is
read from /workspace at run time) where `install:` asks for it. Pure: no
Docker, no network; the prepare step (executors/docker_prepare.py) runs the result and
keys its image by what it reads (tests/unit/services/measure/test_install_plan.py).
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

import yaml

from services.errors import BadInput

CONFIG_FILE = ".lagtrace.yml"
MAX_PROJECT_FILE_BYTES = 1024 * 1024

# The forms `install:` may start with: the prepared virtualenv's pip runs the rest.
PIP_COMMANDS = (
    ("pip", "install"),
    ("pip3", "install"),
    ("python", "-m", "pip", "install"),
    ("python3", "-m", "pip", "install"),
)
# Not a shell: an operator would reach pip as an argument and fail there, far from the cause.
SHELL_WORDS = ("&&", "||", ";", "|", ">", ">>", "<", "&")
# Where pip would put the packages outside the virtualenv the image keeps (HOME is a
# tmpfs that the commit leaves out), or read options from the worker's own files.
REFUSED_OPTIONS = ("--user", "--target", "-t", "--prefix", "--root", "--src", "--isolated")
# pip install's options that take a value (pip's "pip install" reference): what follows
# them is that value, not a requirement.
VALUE_OPTIONS = {
    "-r": "requirement",
    "--requirement": "requirement",
    "-c": "constraint",
    "--constraint": "constraint",
    "-e": "editable",
    "--editable": "editable",
    **dict.fromkeys(
        (
            "-i",
            "--index-url",
            "--extra-index-url",
            "-f",
            "--find-links",
            "--no-binary",
            "--only-binary",
            "--platform",
            "--python-version",
            "--implementation",
            "--abi",
            "--upgrade-strategy",
            "--progress-bar",
            "-C",
            "--config-settings",
            "--global-option",
            "--install-option",
            "--trusted-host",
            "--cert",
            "--client-cert",
            "--cache-dir",
            "--log",
            "--proxy",
            "--retries",
            "--timeout",
            "--exists-action",
            "--report",
            "--python",
            "--keyring-provider",
            "--root-user-action",
            "-t",
            "--target",
            "--prefix",
            "--root",
            "--src",
        ),
        "value",
    ),
}

# Requirement sets by role, from the file's name (`requirements/tests.txt`,
# `requirements-tests.txt`, `test-requirements.txt`). A test job needs the project's
# base requirements and its test set, which pins what the suite imports (pallets'
# tox.ini: `deps = -r requirements/tests.txt`). Docs, build, typing and lint sets pin
# tools a test run never imports, and may pin versions that conflict with the project
# itself (click 8.1.7's requirements/dev.txt pins click==8.1.3 through its docs set), so
# they are left out. A dev set usually holds the test set and more: it is installed only
# where the tree has no test set.
BASE_ROLES = frozenset({"", "base", "common", "core", "default", "install", "main", "requirements", "runtime"})
TEST_ROLES = frozenset({"test", "tests", "testing"})
DEV_ROLES = frozenset({"dev", "develop", "development"})
# The extras a test job installs with the project (`pip install -e .[test]`).
TEST_EXTRAS = ("test", "tests", "testing")
REQUIREMENTS_DIR = "requirements"
ROOT_GLOBS = ("requirements*.txt", "*requirements.txt", "constraints*.txt")


@dataclass(frozen=True)
class Install:
    """One `pip install` of the tree, with paths relative to its root."""

    args: tuple[str, ...]
    # Where it came from: `.lagtrace.yml install:`, or the files it was found from.
    origin: str
    # Requirement files found and not installed (by their role), for the progress line.
    left_out: tuple[str, ...] = ()
    # True: `.lagtrace.yml` named it; False: found from the tree's files.
    configured: bool = False

    @property
    def command(self) -> str:
        return shlex.join(("pip", "install", *self.args))

    def files(self) -> list[tuple[str, str]]:
        """(kind, path) for each requirement or constraint file the command names."""
        return [(kind, value) for kind, value in _options(self.args) if kind in ("requirement", "constraint")]

    def local(self) -> list[tuple[str, bool]]:
        """(path, editable) for each thing the command installs from the tree itself."""
        found = []
        for kind, value in _options(self.args):
            if kind in ("editable", "positional"):
                path = local_path(value)
                if path is not None:
                    found.append((path, kind == "editable"))
        return found


def local_path(requirement: str) -> str | None:
    """The tree path a requirement installs from (`.`, `./pkg[extra]`, `file:./x.whl`), else None."""
    line = requirement.strip()
    if line.startswith("file:"):
        line = line.removeprefix("file://") if line.startswith("file://") else line.removeprefix("file:")
    line = line.split("#", 1)[0].split("[", 1)[0].strip()
    return line if line.startswith((".", "/")) else None


def _options(args: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """pip install's arguments as (kind, value): requirement, constraint, editable,
    positional (a requirement), value (another option's value) or flag."""
    found: list[tuple[str, str]] = []
    items = list(args)
    i = 0
    while i < len(items):
        item = items[i]
        name, equals, attached = item.partition("=")
        if item.startswith("--") and equals and name in VALUE_OPTIONS:
            found.append((VALUE_OPTIONS[name], attached))
        elif item in VALUE_OPTIONS:
            if i + 1 >= len(items):
                raise ValueError(f"{item} needs a value")
            found.append((VALUE_OPTIONS[item], items[i + 1]))
            i += 1
        elif len(item) > 2 and item[:2] in ("-r", "-c", "-e") and not item.startswith("--"):
            found.append((VALUE_OPTIONS[item[:2]], item[2:]))  # pip takes `-rfile` too
        elif item.startswith("-"):
            found.append(("flag", item))
        else:
            found.append(("positional", item))
        i += 1
    return found


def parse_install(value: object) -> list[str] | None:
    """`install:` as pip install's arguments ([]: install nothing); ValueError says why not.

    A string is split as a shell would (`pip install -e . -r requirements/tests.txt`), a
    list is the command's arguments, `false` installs nothing (the runner image as it is).
    """
    if value is None:
        return None
    if value is False:
        return []
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot be split into arguments ({exc})") from None
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        words = list(value)
    else:
        raise ValueError("a `pip install ...` command, or false to install nothing")
    if not words:
        return []
    prefix = next((form for form in PIP_COMMANDS if tuple(words[: len(form)]) == form), None)
    if prefix is None:
        raise ValueError(
            f"{shlex.join(words[:3])!r} is not a pip install command: write `pip install ARGS` "
            "(it runs in the prepared image's virtualenv)"
        )
    args = words[len(prefix) :]
    shell = [word for word in args if word in SHELL_WORDS]
    if shell:
        raise ValueError(f"one pip install command, run without a shell: {shell[0]!r} is not allowed")
    options = _options(args)
    refused = [name for name in REFUSED_OPTIONS if any(a == name or a.startswith(name + "=") for a in args)]
    if refused:
        raise ValueError(f"{refused[0].split('=', 1)[0]} is not allowed: the prepared image keeps only its virtualenv")
    if not any(kind in ("requirement", "editable", "positional") for kind, _ in options):
        raise ValueError("names nothing to install: give a requirement, -r FILE or -e PATH")
    return args


def configured_install(text: str) -> list[str] | None:
    """`install:` of a `.lagtrace.yml`'s text (None where it has none); BadInput names the field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadInput(f"{CONFIG_FILE} is not valid YAML: {exc}") from None
    if not isinstance(data, dict) or "install" not in data:
        return None
    try:
        return parse_install(data["install"])
    except ValueError as exc:
        raise BadInput(f"{CONFIG_FILE}: install: {exc}") from None


def role(path: str) -> tuple[str, str]:
    """("requirement" or "constraint", the set's role) of a requirements file's tree path."""
    name = Path(path).name.lower().removesuffix(".txt")
    if Path(path).parent.name == REQUIREMENTS_DIR and Path(path).parent.parent == Path("."):
        if name.startswith("constraint"):
            return "constraint", name
        return "requirement", name
    if name.startswith("constraint"):
        return "constraint", name
    stripped = re.sub(r"^requirements[-_.]?|[-_.]?requirements$", "", name)
    return "requirement", stripped


def choose(paths: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(requirements, constraints, left out) of the requirement files found, by role."""
    roles = {path: role(path) for path in paths}
    constraints = [path for path in paths if roles[path][0] == "constraint"]
    requirements = [path for path in paths if roles[path][0] == "requirement"]
    has_tests = any(roles[path][1] in TEST_ROLES for path in requirements)
    wanted = BASE_ROLES | TEST_ROLES | (frozenset() if has_tests else DEV_ROLES)
    chosen = [path for path in requirements if roles[path][1] in wanted]
    return chosen, constraints, [path for path in requirements if path not in chosen]


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """A regular file's content, not through a link and at most ``max_bytes``; else BadInput."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BadInput(f"{path.name}: cannot be read ({exc.strerror}; links are not followed)") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(f"{path.name}: not a regular file")
        if info.st_size > max_bytes:
            raise BadInput(f"{path.name}: {info.st_size} bytes, more than the {max_bytes} read")
        return handle.read(max_bytes + 1)[:max_bytes]


def inside_tree(path: Path, tree: Path) -> bool:
    """A regular file, reached without a link, that is really inside ``tree``."""
    if path.is_symlink() or not path.is_file():
        return False
    return path.resolve().is_relative_to(tree.resolve())


def read_text(path: Path, max_bytes: int = MAX_PROJECT_FILE_BYTES) -> str:
    """A regular file's text, not through a link and at most ``max_bytes``; else BadInput."""
    return read_regular_file(path, max_bytes).decode("utf-8", "replace")


def found_files(workdir: Path) -> list[str]:
    """The tree's requirement and constraint files, as tree paths: its root's and those in
    `requirements/` (not through links, not outside the tree)."""
    found = {path for pattern in ROOT_GLOBS for path in workdir.glob(pattern)}
    directory = workdir / REQUIREMENTS_DIR
    if directory.is_dir() and not directory.is_symlink():
        found |= set(directory.glob("*.txt"))
    return sorted(str(path.relative_to(workdir)) for path in found if inside_tree(path, workdir))


def _read(path: Path) -> str | None:
    return read_text(path) if inside_tree(path, path.parent) else None


def project_target(workdir: Path) -> tuple[str, list[str]] | None:
    """What installs the project itself (`.` or `.[test]`) and the files that say so; None
    where the tree is no installable project (a pyproject.toml of tool settings only)."""
    pyproject = _read(workdir / "pyproject.toml")
    setup_py = (workdir / "setup.py").is_file() and not (workdir / "setup.py").is_symlink()
    setup_cfg = _read(workdir / "setup.cfg")
    extras: list[str] = []
    installable = setup_py
    said = ["setup.py"] if setup_py else []
    if pyproject is not None:
        try:
            data = tomllib.loads(pyproject)
        except tomllib.TOMLDecodeError as exc:
            raise BadInput(f"pyproject.toml is not valid TOML ({exc}): pip could not install the project") from None
        if "build-system" in data or "project" in data:
            installable = True
            said.insert(0, "pyproject.toml")
        optional = (data.get("project") or {}).get("optional-dependencies") or {}
        extras += [name for name in optional if isinstance(name, str)]
    if setup_cfg is not None and setup_py:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(setup_cfg)
        except configparser.Error:
            pass  # setuptools reports it, naming the line, when pip runs setup.py
        else:
            if parser.has_section("options.extras_require"):
                extras += list(parser["options.extras_require"])
    if not installable:
        return None
    extra = next((name for name in TEST_EXTRAS if name in {e.lower() for e in extras}), None)
    return (f".[{extra}]" if extra else "."), said


def default_install(workdir: Path) -> Install | None:
    """What the tree's own files say a test job installs; None where they name nothing.

    Its requirement sets, not the project itself: building the project installs its
    dependencies and often its build backend (flit_core, hatchling) from an index, which
    the default install has not, and builds from a copy of the tree: a job that ran from
    the tree as it is would fail at its prepare step, or wait on a whole project's
    install (tests/services/measure/executors/test_docker.py runs lagtrace's own tree).
    It is named as left out; `install: pip install -e .` asks for it."""
    requirements, constraints, left_out = choose(found_files(workdir))
    args: list[str] = []
    project = project_target(workdir)
    # A requirements file that installs the tree's root already (`-e .`) says how: the
    # project is not given twice.
    root_named = any(
        path in (".", "./") for file in requirements for path, _ in local_references(_read(workdir / file) or "")
    )
    if project is not None and not root_named:
        left_out = [*left_out, f"the project itself ({', '.join(project[1])})"]
    for path in requirements:
        args += ["-r", path]
    if not args:
        return None  # constraints alone install nothing: pip would refuse to run
    for path in constraints:
        args += ["-c", path]
    return Install(tuple(args), ", ".join([*requirements, *constraints]), tuple(left_out))


def plan_install(workdir: Path) -> Install | None:
    """The tree's install: its `.lagtrace.yml`'s `install:` if it names one, else the
    default; None: nothing to install (runs start from the runner image as it is)."""
    config = workdir / CONFIG_FILE
    configured = None
    if config.exists() or config.is_symlink():
        configured = configured_install(read_text(config))
    if configured is None:
        return default_install(workdir)
    if not configured:
        return None
    return Install(tuple(configured), f"`install:` in {CONFIG_FILE}", configured=True)


# A requirements file's lines that install from the working tree: `-e PATH`, `--editable
# PATH`, and paths (`.`, `./pkg`, `file:./pkg`), which pip reads relative to its working
# directory, the tree's root here (pip's "Requirements File Format").
_EDITABLE_PREFIXES = ("-e ", "--editable ", "--editable=")
_NESTED_PREFIXES = ("-r", "--requirement", "-c", "--constraint")


def local_references(text: str) -> list[tuple[str, bool]]:
    """(path, editable) for each line of ``text`` that installs from the working tree."""
    found = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        editable = line.startswith(_EDITABLE_PREFIXES)
        if editable:
            line = line.split(" ", 1)[1] if line.startswith(("-e ", "--editable ")) else line.split("=", 1)[1]
            line = line.strip()
        elif line.startswith("-"):
            continue
        path = local_path(line)
        if path is not None:
            found.append((path, editable))
    return found


def nested_files(text: str) -> list[str]:
    """The files a requirements file reads in turn (`-r other.txt`, `-c constraints.txt`),
    as written: pip reads them relative to the file that names them."""
    found = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        for prefix in _NESTED_PREFIXES:
            if line.startswith(prefix + " ") or line.startswith(prefix + "="):
                found.append(line[len(prefix) + 1 :].strip())
            elif prefix in ("-r", "-c") and line.startswith(prefix) and len(line) > 2 and line[2] not in " =":
                found.append(line[2:].strip())
    return [name for name in found if name and "://" not in name]
