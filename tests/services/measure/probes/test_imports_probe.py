import sys
import textwrap

import pytest

from services.evidence import dump as stored
from services.measure.configs import CpuConfig
from services.measure.executors.base import RunRequest
from services.measure.executors.local import LocalExecutor
from services.measure.probes.base import ProbeContext
from services.measure.probes.imports import ImportTimeProbe, parse


def test_parse_sums_top_level_imports_only():
    text = textwrap.dedent("""\
        import time: self [us] | cumulative | imported package
        import time:       100 |        100 |   encodings.aliases
        import time:       500 |        600 | encodings
        import time:       300 |     900000 | plugins
        garbage line
    """)
    total, slowest = parse(text)
    assert total == pytest.approx(0.9006)
    assert [entry["module"] for entry in slowest] == ["plugins", "encodings"]


def test_probe_times_the_imports_of_a_real_program(settings, tmp_path):
    (tmp_path / "slowmod.py").write_text("import time\ntime.sleep(0.3)\n")
    (tmp_path / "main.py").write_text("import slowmod\nprint('done')\n")
    executor = LocalExecutor(settings)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    probe = ImportTimeProbe(ProbeContext(executor, run_dir, stall_after_s=10, timeout_s=30))
    assert probe.unavailable() is None
    result = executor.run(
        RunRequest(probe.command([sys.executable, "main.py"]), tmp_path, CpuConfig("all"), run_dir, 30, env=probe.env())
    )
    [draft] = probe.collect(result)
    assert draft.status == "ok"
    assert stored(draft.content)["slowest"][0]["module"] == "slowmod"
    assert stored(draft.content)["slowest"][0]["cumulative_s"] >= 0.3
    assert stored(draft.content)["total_import_s"] >= 0.3


def test_a_command_that_is_not_python_says_so(settings, tmp_path):
    executor = LocalExecutor(settings)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    probe = ImportTimeProbe(ProbeContext(executor, run_dir, stall_after_s=10, timeout_s=30))
    result = executor.run(RunRequest(probe.command(["true"]), tmp_path, CpuConfig("all"), run_dir, 30, env=probe.env()))
    [draft] = probe.collect(result)
    assert draft.status == "unavailable" and "does not look like Python" in stored(draft.content)["reason"]
