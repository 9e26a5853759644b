"""Python start-up hooks of evidence runs: a directory lagtrace puts first on PYTHONPATH,
whose sitecustomize.py every Python process of the run imports at start-up. Each hook
then hands over to the sitecustomize it shadows (a virtualenv's, a distribution's), so
the program starts as it would without lagtrace."""

from __future__ import annotations

import os
from pathlib import Path

# Appended to every hook's sitecustomize.py.
HANDOVER = """
# Hand over to the sitecustomize this one shadows, as if lagtrace were not there.
_here = os.path.dirname(os.path.abspath(__file__))
_me = sys.modules.pop("sitecustomize")
_saved = list(sys.path)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
try:
    import sitecustomize  # noqa: F401
except ImportError:
    pass
finally:
    sys.path[:] = _saved
    # Without a shadowed sitecustomize (pyenv builds ship none), the import system still
    # expects this module under its name when it finishes loading it.
    sys.modules.setdefault("sitecustomize", _me)
"""


def install_hook(hook_dir: Path, visible_dir: str, sitecustomize: str, **modules: str) -> dict[str, str]:
    """Write ``sitecustomize`` (which must import os and sys) and any other ``modules``
    (name → source) into hook_dir; the environment that loads them, visible_dir being
    hook_dir as the command sees it. The user's own PYTHONPATH still applies, behind it."""
    hook_dir.mkdir(exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(sitecustomize + HANDOVER)
    for name, source in modules.items():
        (hook_dir / f"{name}.py").write_text(source)
    python_path = visible_dir
    if os.environ.get("PYTHONPATH"):
        python_path += os.pathsep + os.environ["PYTHONPATH"]
    return {"PYTHONPATH": python_path}
