"""How the prepare step installs a tree (services/measure/install.py): `.lagtrace.yml`'s
`install:`, else the project itself and the requirement sets a test job needs, and the
prepared image's key over what that install reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.errors import BadInput
from services.jobs.sources import parse_repository_config
from services.measure.executors.docker_prepare import dependency_key
from services.measure.install import Install, parse_install, plan_install, project_target

BASE = b"image\0scope\0"
SETUPTOOLS = '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
# click 8.1.7's layout (its source distribution): setup.py, setup.cfg, src/click, and
# pip-compile-multi's sets in requirements/, dev.txt pinning an older click through docs.
CLICK = {
    "setup.py": 'from setuptools import setup\n\nsetup(name="click")\n',
    "setup.cfg": "[metadata]\nname = click\n\n[options]\npackage_dir = = src\n",
    "src/click/__init__.py": "__version__ = '8.1.7'\n",
    "requirements/build.txt": "build==0.10.0\n",
    "requirements/dev.txt": "-r docs.txt\n-r tests.txt\n-r typing.txt\nclick==8.1.3\n",
    "requirements/docs.txt": "sphinx==7.0.1\n",
    "requirements/tests.txt": "pytest==7.4.0\n",
    "requirements/typing.txt": "mypy==1.4.1\n",
}


def write(tree: Path, files: dict[str, str]) -> Path:
    for name, content in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(content)
    return tree


def plan(tree: Path) -> Install:
    found = plan_install(tree)
    assert found is not None
    return found


def key(tree: Path) -> str:
    return dependency_key(BASE, tree, plan(tree))


def test_clicks_layout_installs_its_test_set_and_names_the_rest(tmp_path):
    found = plan(write(tmp_path, CLICK))
    # Before, requirements/*.txt were found but none given to pip: `pip install` alone.
    assert found.command == "pip install -r requirements/tests.txt"
    assert found.left_out == (
        "requirements/build.txt",
        "requirements/dev.txt",
        "requirements/docs.txt",
        "requirements/typing.txt",
        "the project itself (setup.py)",
    )
    assert found.origin == "requirements/tests.txt"
    # The project's own CI line installs it too.
    write(tmp_path, {".lagtrace.yml": "command: pytest\ninstall: pip install -e . -r requirements/tests.txt\n"})
    assert plan(tmp_path).command == "pip install -e . -r requirements/tests.txt"


@pytest.mark.parametrize(
    ("files", "command"),
    [
        # A project's requirements, never the project itself unless `install:` asks.
        (
            {"pyproject.toml": SETUPTOOLS + "[project]\nname = 'p'\n", "requirements.txt": "a\n"},
            "pip install -r requirements.txt",
        ),
        # Tool settings only: no project to install, pip would build an UNKNOWN package.
        (
            {"pyproject.toml": "[tool.pytest.ini_options]\n", "requirements.txt": "attrs\n"},
            "pip install -r requirements.txt",
        ),
        # A dev set stands in for a missing test set; never beside one.
        ({"requirements/dev.txt": "x\n", "requirements/docs.txt": "y\n"}, "pip install -r requirements/dev.txt"),
        (
            {"requirements.txt": "a\n", "requirements-dev.txt": "b\n", "test-requirements.txt": "c\n"},
            "pip install -r requirements.txt -r test-requirements.txt",
        ),
        ({"requirements/base.txt": "a\n", "requirements/test.txt": "-r base.txt\n"}, None),
        # A requirements file that installs the project already: not given twice.
        ({"setup.py": "", "requirements.txt": "-e .\n"}, "pip install -r requirements.txt"),
        (
            {"requirements.txt": "a\n", "constraints.txt": "a<2\n"},
            "pip install -r requirements.txt -c constraints.txt",
        ),
    ],
)
def test_the_default_follows_the_trees_own_files(tmp_path, files, command):
    found = plan(write(tmp_path, files))
    expected = command or "pip install -r requirements/base.txt -r requirements/test.txt"
    assert found.command == expected


def test_the_project_itself_is_left_out_unless_install_names_it(tmp_path):
    # Building it may need an index (its dependencies, its build backend) and copies the tree.
    assert plan_install(write(tmp_path, {"pyproject.toml": SETUPTOOLS + "[project]\nname = 'p'\n"})) is None
    write(tmp_path, {".lagtrace.yml": "command: pytest\ninstall: pip install -e .[tests]\n"})
    assert plan(tmp_path).command == "pip install -e '.[tests]'"


@pytest.mark.parametrize(
    ("files", "target"),
    [
        ({"pyproject.toml": SETUPTOOLS + "[project]\nname = 'p'\n"}, "."),
        # Its test extra, as `pip install -e .[test]` in its CI.
        (
            {"pyproject.toml": "[project]\nname = 'p'\n[project.optional-dependencies]\ndocs = []\ntests = []\n"},
            ".[tests]",
        ),
        ({"setup.py": "", "setup.cfg": "[options.extras_require]\ntesting = pytest\n"}, ".[testing]"),
        # Tool settings only: no project to install, pip would build an UNKNOWN package.
        ({"pyproject.toml": "[tool.pytest.ini_options]\n"}, None),
    ],
)
def test_what_installs_the_project_itself(tmp_path, files, target):
    found = project_target(write(tmp_path, files))
    assert (found[0] if found is not None else None) == target


def test_nothing_to_install_is_no_install_not_pip_without_a_requirement(tmp_path):
    assert plan_install(tmp_path) is None
    # Constraints alone, or only sets a test job does not need: pip would refuse to run.
    assert plan_install(write(tmp_path, {"constraints.txt": "a<2\n", "requirements/docs.txt": "x\n"})) is None
    write(tmp_path, {".lagtrace.yml": "command: pytest\ninstall: false\n", "setup.py": ""})
    assert plan_install(tmp_path) is None


def test_lagtrace_yml_names_the_install(tmp_path):
    write(tmp_path, {**CLICK, ".lagtrace.yml": "command: pytest\ninstall: pip install . -r requirements/dev.txt\n"})
    found = plan(tmp_path)
    assert found.args == (".", "-r", "requirements/dev.txt") and found.configured
    assert found.files() == [("requirement", "requirements/dev.txt")]
    assert found.local() == [(".", False)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("poetry install", "is not a pip install command"),
        ("pip install", "names nothing to install"),
        ("pip install --upgrade", "names nothing to install"),
        ("pip install -e . && pytest", "run without a shell"),
        ("pip install --user -e .", "--user is not allowed"),
        ("pip install --target=/opt x", "--target is not allowed"),
        ("pip install -r", "-r needs a value"),
        ("pip install 'unclosed", "cannot be split"),
        (True, "false to install nothing"),
        (3, "false to install nothing"),
    ],
)
def test_a_bad_install_is_an_error_naming_the_field(value, message):
    with pytest.raises(ValueError, match=message):
        parse_install(value)


@pytest.mark.parametrize(
    "value", ["poetry install", "pip install", "true", "[pip, install, --user, x]", '"pip install -e . && pytest"']
)
def test_lagtrace_yml_names_the_field_that_is_wrong(tmp_path, value):
    text = f"command: pytest\ninstall: {value}\n"
    with pytest.raises(BadInput, match=r"^\.lagtrace\.yml: install: "):
        parse_repository_config(text)
    # The prepare step reads the checkout's again, and says the same.
    write(tmp_path, {".lagtrace.yml": text})
    with pytest.raises(BadInput, match=r"^\.lagtrace\.yml: install: "):
        plan_install(tmp_path)


def test_the_forms_of_install():
    assert parse_install("python3 -m pip install -e .[test]") == ["-e", ".[test]"]
    assert parse_install(["pip", "install", "-rrequirements.txt"]) == ["-rrequirements.txt"]
    assert parse_install(False) == [] and parse_install(None) is None
    assert parse_repository_config("command: pytest\n").install is None


def test_the_key_follows_the_command_and_what_it_reads(tmp_path):
    write(tmp_path, CLICK)
    write(tmp_path, {".lagtrace.yml": "command: pytest\ninstall: pip install -e . -r requirements/tests.txt\n"})
    before = key(tmp_path)
    # Sets the install does not read, and the project's code (read from /workspace at run
    # time by the editable install), leave the image as it is.
    (tmp_path / "requirements" / "docs.txt").write_text("sphinx==7.1\n")
    (tmp_path / "src" / "click" / "__init__.py").write_text("__version__ = '8.1.8'\n")
    assert key(tmp_path) == before
    # The test set, and the project's metadata, are read by the install.
    (tmp_path / "requirements" / "tests.txt").write_text("pytest==7.4.1\n")
    changed = key(tmp_path)
    assert changed != before
    (tmp_path / "setup.cfg").write_text("[metadata]\nname = click\n[options]\ninstall_requires = colorama\n")
    assert key(tmp_path) != changed
    # Another command over the same files is another image.
    again = key(tmp_path)
    (tmp_path / ".lagtrace.yml").write_text("command: pytest\ninstall: pip install . -r requirements/tests.txt\n")
    assert key(tmp_path) != again


def test_the_key_follows_files_named_in_turn(tmp_path):
    write(
        tmp_path, {"requirements/test.txt": "-r base.txt\n-c ../constraints/pins.txt\n", "requirements/base.txt": "a\n"}
    )
    write(tmp_path, {"constraints/pins.txt": "a<2\n", "requirements/docs.txt": "x\n"})
    before = key(tmp_path)
    (tmp_path / "requirements" / "docs.txt").write_text("y\n")
    assert key(tmp_path) == before
    (tmp_path / "constraints" / "pins.txt").write_text("a<3\n")
    assert key(tmp_path) != before


def test_a_non_editable_install_of_the_project_is_keyed_by_its_code(tmp_path):
    write(tmp_path, {"pyproject.toml": SETUPTOOLS, "src/p/__init__.py": "x = 1\n"})
    write(tmp_path, {".lagtrace.yml": "command: pytest\ninstall: pip install .\n"})
    before = key(tmp_path)
    # Copied into the image: a change must install it again, not run the stale copy.
    (tmp_path / "src" / "p" / "__init__.py").write_text("x = 2\n")
    assert key(tmp_path) != before


def test_a_tree_file_behind_a_link_is_not_read(tmp_path):
    outside = write(tmp_path / "outside", {"secret.txt": "s\n"})
    tree = write(tmp_path / "tree", {"requirements.txt": "a\n"})
    (tree / "requirements").mkdir()
    (tree / "requirements" / "tests.txt").symlink_to(outside / "secret.txt")
    (tree / "pyproject.toml").symlink_to(outside / "secret.txt")
    found = plan(tree)
    assert found.command == "pip install -r requirements.txt"
