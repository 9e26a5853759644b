"""services/ stays framework-free: checked by the import-linter contract in pyproject.toml."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_import_contracts_hold():
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports, "import-linter is a test dependency: pip install -e '.[test]'"
    done = subprocess.run([lint_imports], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# A module a newcomer can hold: the hubs stay small (docs/explanations/design.md names the
# pieces), and no module of the domain grows past what one reading takes.
HUB_LIMIT = 500
MODULE_LIMIT = 700
HUBS = ("services/jobs/engine.py", "services/measure/executors/docker.py")


def test_the_hubs_and_every_domain_module_stay_small():
    sizes = {
        str(path.relative_to(REPO)): len(path.read_text().splitlines()) for path in (REPO / "services").rglob("*.py")
    }
    too_big = {name: n for name, n in sizes.items() if n > (HUB_LIMIT if name in HUBS else MODULE_LIMIT)}
    assert not too_big, f"split these (lines): {too_big}"
    assert all(name in sizes for name in HUBS)
