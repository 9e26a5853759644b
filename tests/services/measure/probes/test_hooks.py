"""The start-up hook every Python-level probe installs: it runs, then the user's own
sitecustomize still runs, and a Python without one starts normally."""

from __future__ import annotations

import os
import subprocess
import sys

from services.measure.probes.hooks import install_hook

HOOK = "import os\nimport sys\nprint('hook', end=' ')\n"


def run_python(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import sitecustomize; print('main')"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_hook_runs_then_hands_over_to_the_users_sitecustomize(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("print('theirs', end=' ')\n")
    monkeypatch.setenv("PYTHONPATH", str(theirs))
    env = install_hook(tmp_path / "hook", str(tmp_path / "hook"), HOOK, helper="VALUE = 1\n")
    assert env["PYTHONPATH"] == f"{tmp_path / 'hook'}{os.pathsep}{theirs}"
    assert (tmp_path / "hook" / "helper.py").read_text() == "VALUE = 1\n"
    done = run_python(env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hook", "theirs", "main"]


def test_without_a_users_sitecustomize_the_program_starts_normally(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    done = run_python(install_hook(tmp_path / "hook", str(tmp_path / "hook"), HOOK))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hook", "main"]
