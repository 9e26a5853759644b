"""The prepared image's cache key (docker_prepare.dependency_key): the lock files, and
what they install from the working tree itself, so a changed local package is installed
again instead of being served stale from the cache."""

from __future__ import annotations

from pathlib import Path

from services.measure.executors.docker_prepare import dependency_key, local_references
from services.measure.install import plan_install

BASE = b"image\0scope\0"


def key(tree: Path) -> str:
    plan = plan_install(tree)
    assert plan is not None
    return dependency_key(BASE, tree, plan)


def write(tree: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(content)


def test_the_lines_that_install_from_the_tree():
    text = (
        "-e .\n--editable=./lib[extra]  # ours\nrequests==2.31\n./vendor/pkg\nfile:./wheels/x-1.0-py3-none-any.whl\n"
        "-r other.txt\n# ./commented\n-e git+https://example.com/r.git#egg=r\n"
    )
    assert local_references(text) == [
        (".", True),
        ("./lib", True),
        ("./vendor/pkg", False),
        ("./wheels/x-1.0-py3-none-any.whl", False),
    ]


def test_an_editable_project_is_keyed_by_its_metadata_not_its_code(tmp_path):
    write(tmp_path, {"requirements.txt": "-e .\n", "pyproject.toml": "[project]\nname = 'p'\n", "p/code.py": "x = 1\n"})
    before = key(tmp_path)
    (tmp_path / "p" / "code.py").write_text("x = 2\n")  # read from /workspace at run time
    assert key(tmp_path) == before
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\ndependencies = ['attrs']\n")
    assert key(tmp_path) != before


def test_a_local_package_is_keyed_by_every_file_it_holds(tmp_path):
    write(tmp_path, {"requirements.txt": "./vendor/pkg\n", "vendor/pkg/setup.py": "", "vendor/pkg/pkg/a.py": "1\n"})
    before = key(tmp_path)
    (tmp_path / "tests.py").write_text("changed elsewhere\n")
    assert key(tmp_path) == before
    (tmp_path / "vendor" / "pkg" / "pkg" / "a.py").write_text("2\n")
    assert key(tmp_path) != before


def test_links_and_paths_outside_the_tree_are_not_read(tmp_path):
    tree = tmp_path / "tree"
    write(tree, {"requirements.txt": "../outside\n./pkg\n", "pkg/setup.py": ""})
    write(tmp_path, {"outside/setup.py": "secret = 1\n", "secret.txt": "secret\n"})
    (tree / "pkg" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    before = key(tree)
    (tmp_path / "outside" / "setup.py").write_text("secret = 2\n")
    (tmp_path / "secret.txt").write_text("changed\n")
    assert key(tree) == before
