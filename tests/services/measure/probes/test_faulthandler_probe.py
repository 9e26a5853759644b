from services.evidence import dump as stored
from tests.services.measure.probes.probe_helpers import python_program, run_probe

TWO_SLEEPERS = """
import threading, time
def background_sleeper():
    time.sleep(3)
t = threading.Thread(target=background_sleeper)
t.start()
def main_sleeper():
    time.sleep(3)
main_sleeper()
t.join()
"""


def test_tracebacks_of_every_thread_at_the_stall(executor, tmp_path):
    _, result, drafts = run_probe(
        executor, "faulthandler", python_program(tmp_path, TWO_SLEEPERS), tmp_path / "run", stall_after_s=0.5
    )
    content = stored(drafts["faulthandler"].content)
    assert content["status"] == "ok", content
    assert content["trigger"] == "stall"
    assert len(content["threads"]) == 2
    functions = {frame["function"] for thread in content["threads"] for frame in thread["frames"]}
    assert {"main_sleeper", "background_sleeper"} <= functions
    assert sum(thread["current"] for thread in content["threads"]) <= 1
    assert "Timeout (0:00:00.500000)!" in drafts["faulthandler"].text
    # The hook is in-process and cheap: the run is not held up by it.
    assert result.wall_s < 6


def test_quick_run_has_no_traceback(executor, tmp_path):
    _, _result, drafts = run_probe(
        executor, "faulthandler", python_program(tmp_path, "pass"), tmp_path / "run", stall_after_s=5.0
    )
    assert stored(drafts["faulthandler"].content)["status"] == "no_stall"


def test_the_users_own_sitecustomize_still_runs(executor, tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    marker = tmp_path / "their-sitecustomize-ran"
    (theirs / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("PYTHONPATH", str(theirs))
    _, result, drafts = run_probe(
        executor,
        "faulthandler",
        python_program(tmp_path, "import time; time.sleep(1)"),
        tmp_path / "run",
        stall_after_s=0.3,
    )
    assert result.exit_code == 0
    assert marker.exists()
    assert stored(drafts["faulthandler"].content)["status"] == "ok"


def test_a_command_that_is_not_python_says_so(executor, tmp_path):
    _, _result, drafts = run_probe(executor, "faulthandler", ["sleep", "0.1"], tmp_path / "run", stall_after_s=5.0)
    assert stored(drafts["faulthandler"].content)["status"] == "unavailable"
    assert "no Python process loaded the faulthandler hook" in stored(drafts["faulthandler"].content)["reason"]
