"""A pull request against its base, end to end: webhook, interleaved screen, check run, triage.

GitHub is the local server of tests/service_support.py (the check-runs API as GitHub
speaks it); everything else is real: PostgreSQL, the Docker executor, the job engine.
"""

from __future__ import annotations

import json
import math
import statistics
import time

import pytest

from services.models import Job, JobSource, Run, RunKind
from tests.service_support import SECRET, delivery_headers, push_payload, register
from tests.support.pull_requests import TARGET, TARGET_LINE, TEST_FILE, make_pull_request, pull_request_payload

# One configuration, no drill: what is judged is the comparison with the base.
LAGTRACE_YML = "command: python3 -m pytest -q tests\nconfigs: [cpuset=0]\nrepeat: 5\nevidence: []\n"


def deliver(api, payload, delivery, event):
    body = json.dumps(payload).encode()
    return api.client.post(
        "/api/v1/webhooks/github", data=body, headers=delivery_headers(body, delivery, event, SECRET)
    )


def completed_check_run(github_server, job_id: int, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for request in reversed(github_server.check_runs()):
            if request.body.get("external_id") == str(job_id) and request.body.get("status") == "completed":
                return request
        time.sleep(0.1)
    raise AssertionError(f"no completed check run for job {job_id}: {github_server.requests}")


def wait_for(found, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := found():
            return result
        time.sleep(0.1)
    raise AssertionError("not reached in time")


def opened(api, repository, delivery: str, timeout_s: float = 240) -> dict:
    """The job of a pull request opened on ``repository``, done."""
    response = deliver(api, pull_request_payload(repository), delivery, "pull_request")
    assert response.status_code == 202, response.get_json()
    job = api.wait(response.get_json()["job_id"], timeout_s=timeout_s)
    assert job["status"] == "done", job["error"]
    return job


def check_run_id(github_server, job_id: int) -> int:
    [created] = [r for r in github_server.check_runs() if r.method == "POST" and r.body["external_id"] == str(job_id)]
    patched = [r for r in github_server.check_runs() if r.method == "PATCH" and r.body["external_id"] == str(job_id)]
    return int(patched[0].path.rsplit("/", 1)[1]) if patched else created.body["id"]


@pytest.mark.latency
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_pull_request_that_slows_one_test_5x_fails_until_its_finding_is_muted(api, tmp_path, github_server):
    api.token = api.new_token("octo/demo")
    repository = make_pull_request(tmp_path / "repo", LAGTRACE_YML, base_s=0.03, head_s=0.15)
    register(api.settings, api.session_factory, repository.url)

    response = deliver(api, pull_request_payload(repository), "pr-1", "pull_request")
    assert response.status_code == 202, response.get_json()
    job = api.wait(response.get_json()["job_id"], timeout_s=240)
    assert job["status"] == "done", job["error"]
    assert job["trigger"] == "pull_request" and job["branch"] == "slower" and job["commit"] == repository.head
    assert job["pull_request"] == {
        "number": 7,
        "url": "https://github.com/octo/demo/pull/7",
        "base_ref": "main",
        "base_commit": repository.base,
    }

    # Base and head were screened in the same rounds, on one node.
    with api.session_factory() as session:
        kinds = [r.kind for r in session.query(Run).order_by(Run.id) if r.kind in (RunKind.timing, RunKind.base)]
    assert kinds.count(RunKind.base) >= 5 and kinds.count(RunKind.timing) >= 5
    assert kinds[: len(kinds) // 2].count(RunKind.base) >= 2, kinds  # interleaved, not one side after the other

    comparison = job["report"]["base_comparison"]
    assert comparison["base_commit"] == repository.base and comparison["head_commit"] == repository.head
    verdicts = {row["test"]: row for row in comparison["tests"]}
    target = verdicts[TARGET]
    assert target["verdict"] == "regressed", comparison
    assert 3 < target["ratio_low"] <= target["ratio"] <= target["ratio_high"] < 8
    assert verdicts[f"{TEST_FILE}::test_steady"]["verdict"] in ("unchanged", "too_noisy")
    [slower] = [f for f in job["report"]["findings"] if f["kind"] == "slower_than_base"]
    assert slower["test"] == TARGET and slower["status"] == "new"
    # Its severity follows its size (regression_high_ratio 3x): never a note.
    assert slower["severity"] == ("high" if slower["metrics"]["ratio"] >= 3 else "medium"), slower

    check = completed_check_run(github_server, job["id"])
    assert check.body["conclusion"] == "failure", check.body["output"]
    assert TARGET in check.body["output"]["summary"] and "**regressed**" in check.body["output"]["summary"]
    [annotation] = [a for a in check.body["output"]["annotations"] if a["title"].endswith(TARGET)]
    assert annotation["path"] == TEST_FILE and annotation["start_line"] == TARGET_LINE
    assert annotation["annotation_level"] == "failure"
    assert check.body["actions"][0]["identifier"] == "rerun_other_cpus"

    # Mute the finding through the API, then GitHub's "Re-run" rerequests the check run.
    muted = api.client.patch(
        f"/api/v1/findings/{slower['id']}", json={"status": "muted", "note": "intended: it now waits"}, headers=api.auth
    )
    assert muted.status_code == 200, muted.get_json()
    # The muting reaches the check run GitHub shows at once: it is updated, and passes.
    first_check = check_run_id(github_server, job["id"])
    updated = wait_for(
        lambda: [
            r
            for r in github_server.check_runs()
            if r.method == "PATCH" and r.path.endswith(f"/{first_check}") and r.body.get("conclusion") == "success"
        ]
    )
    assert "| muted |" in updated[0].body["output"]["summary"]
    rerequest = {
        "action": "rerequested",
        "check_run": {"id": first_check, "head_sha": repository.head},
        "repository": {"full_name": "octo/demo"},
    }
    response = deliver(api, rerequest, "rerun-1", "check_run")
    assert response.status_code == 202, response.get_json()
    rerun = api.wait(response.get_json()["job_id"], timeout_s=240)
    assert rerun["status"] == "done" and rerun["trigger"] == "rerun" and rerun["parent_id"] == job["id"]
    assert rerun["pull_request"]["base_commit"] == repository.base  # compared with the same base again
    [again] = [f for f in rerun["report"]["findings"] if f["kind"] == "slower_than_base"]
    assert again["status"] == "muted" and again["fingerprint"] == slower["fingerprint"]
    passed = completed_check_run(github_server, rerun["id"])
    assert passed.body["conclusion"] == "success", passed.body["output"]
    assert "annotations" not in passed.body["output"] or not any(
        a["title"].endswith(TARGET) for a in passed.body["output"]["annotations"]
    )


# The head adds a CPU loop to one test: the regression's cause is that frame, found by
# profiling the test on the head and on the base commit in the configuration that showed it.
LOOP_TESTS = """import time


def test_steady():
    time.sleep(0.04)


def added_loop(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_target():
    time.sleep(0.03)
    {target}
"""


@pytest.mark.latency
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_pull_request_that_adds_a_cpu_loop_to_a_test_names_the_added_frame_as_its_cause(api, tmp_path):
    api.token = api.new_token("octo/demo")
    yml = "command: python3 -m pytest -q tests\nconfigs: [cpuset=0]\nrepeat: 5\nevidence: [pyspy]\n"
    repository = make_pull_request(
        tmp_path / "repo", yml, base_s="pass", head_s="added_loop(0.1)", speed_tests=LOOP_TESTS
    )
    register(api.settings, api.session_factory, repository.url)
    report = opened(api, repository, "pr-loop", timeout_s=300)["report"]
    verdicts = {row["test"]: row for row in report["base_comparison"]["tests"]}
    assert verdicts[TARGET]["verdict"] == "regressed", verdicts[TARGET]
    # One profile of the test on each commit, in the configuration that showed it.
    sides = sorted(
        e["content"]["side"] for e in report["evidence"] if e["kind"] == "pyspy" and e["content"].get("side")
    )
    assert sides == ["base", "head"], [e["content"].get("side") for e in report["evidence"]]
    [grown] = [f for f in report["findings"] if f["kind"] == "hot_path" and f["test"] == TARGET]
    assert "added_loop" in grown["title"] and "than on the base commit" in grown["title"], grown["title"]
    # About the 0.1 s the loop takes per run (the profile's runs, under py-spy).
    assert 0.05 <= grown["metrics"]["accounts_s"] <= 0.2, grown["metrics"]
    [diagnosis] = [d for d in report["diagnoses"] if d["test"] == TARGET]
    assert diagnosis["symptom"]["kind"] == "slower_than_base", diagnosis
    assert diagnosis["cause"]["kind"] == "hot_path" and "added_loop" in diagnosis["cause"]["text"], diagnosis
    assert diagnosis["severity"] in ("medium", "high"), diagnosis


@pytest.mark.latency
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_pull_request_on_a_suite_of_real_size_compares_only_what_the_survey_kept(api, tmp_path):
    api.token = api.new_token("octo/demo")
    repository = make_pull_request(tmp_path / "repo", LAGTRACE_YML, base_s=0.03, head_s=0.15, filler=28)
    register(api.settings, api.session_factory, repository.url)
    response = deliver(api, pull_request_payload(repository), "pr-big", "pull_request")
    assert response.status_code == 202, response.get_json()
    job = api.wait(response.get_json()["job_id"], timeout_s=240)
    assert job["status"] == "done", job["error"]
    report = job["report"]
    # Head and base surveyed side by side: the test the head slowed differs, so it goes on.
    assert report["survey"]["tests"] == 30 and TARGET in report["survey"]["focused"]
    assert report["survey"]["cleared"] >= 25, report["survey"]
    with api.session_factory() as session:
        kinds = [r.kind for r in session.query(Run).order_by(Run.id)]
    assert kinds.count(RunKind.base_focus) >= 5 and kinds.count(RunKind.focus) >= 5
    assert RunKind.timing not in kinds and RunKind.base not in kinds  # no whole-suite rounds after the survey
    verdicts = {row["test"]: row for row in report["base_comparison"]["tests"]}
    assert verdicts[TARGET]["verdict"] == "regressed", verdicts
    assert not [test for test in verdicts if test and "test_filler" in test and test not in report["survey"]["focused"]]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_pull_request_whose_base_has_a_0_ms_test_gets_its_whole_report(api, tmp_path):
    # Most real suites have tests under the JUnit XML's millisecond: their medians are 0 or
    # 1 ms, and a ratio to 0 has no number (JSON and PostgreSQL have no Infinity).
    api.token = api.new_token("octo/demo")
    quick = {"tests/test_quick.py": 'def test_parse():\n    assert int("42") == 42\n'}
    repository = make_pull_request(tmp_path / "repo", LAGTRACE_YML, base_s=0.03, head_s=0.15, files=quick)
    register(api.settings, api.session_factory, repository.url)
    response = deliver(api, pull_request_payload(repository), "pr-0ms", "pull_request")
    assert response.status_code == 202, response.get_json()
    job = api.wait(response.get_json()["job_id"], timeout_s=240)
    assert job["status"] == "done", job["error"]
    verdicts = {row["test"]: row for row in job["report"]["base_comparison"]["tests"]}
    assert set(verdicts) >= {None, TARGET, f"{TEST_FILE}::test_steady", "tests/test_quick.py::test_parse"}
    assert all(row["verdict"] in ("regressed", "improved", "unchanged", "too_noisy") for row in verdicts.values())
    parse = verdicts["tests/test_quick.py::test_parse"]
    # Its runs read 0.000 or 0.001 s: no change worth a verdict, and a ratio only where
    # both medians and the interval's ends are numbers.
    assert parse["verdict"] == "unchanged", parse
    assert all(parse[key] is None or math.isfinite(parse[key]) for key in ("ratio", "ratio_low", "ratio_high")), parse


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_test_new_in_the_pull_request_is_new_and_left_out_of_the_whole_command(api, tmp_path):
    # The head leaves test_target as it was and adds a 0.5 s test: the whole command takes
    # 0.5 s longer, which is the new test, not a regression of the command.
    api.token = api.new_token("octo/demo")
    added = {"tests/test_added.py": "import time\n\n\ndef test_added():\n    time.sleep(0.5)\n"}
    repository = make_pull_request(tmp_path / "repo", LAGTRACE_YML, base_s=0.03, head_s=0.03, head_files=added)
    register(api.settings, api.session_factory, repository.url)
    job = opened(api, repository, "pr-new-test")
    report = job["report"]
    verdicts = {row["test"]: row for row in report["base_comparison"]["tests"]}
    new = verdicts["tests/test_added.py::test_added"]
    assert new["verdict"] == "new" and new["base_median_s"] is None and new["head_median_s"] >= 0.5, new
    # The whole command is compared with the new test's time taken out of each head run: its
    # head median is the head runs' median less the new test's 0.5 s, within noise far below
    # 0.5 s. Neither the verdict nor the gap to the base is asserted: beside other tests
    # pinned to the same core (CI's parallel tier) the rest of a head run took 0.43-0.60 s
    # against the base's 0.18-0.36 s, and five runs a side once stopped on a 0.55 s gap.
    whole = verdicts[None]
    [config] = report["configs"]
    raw = statistics.median(run["wall_s"] for run in config["runs"] if run["exit_code"] == 0 and not run["timed_out"])
    assert abs(raw - new["head_median_s"] - whole["head_median_s"]) < 0.1, (raw, new, whole)
    assert report["base_comparison"]["counts"]["new"] == 1
    assert not [f for f in report["findings"] if f["kind"] == "slower_than_base" and f["test"]], report["findings"]
    assert any("new on the head" in note for note in report["notes"]), report["notes"]


def test_the_rerun_with_other_cpus_action_reruns_on_more_configurations(sqlite_api, tmp_path):
    api = sqlite_api
    repository = make_pull_request(tmp_path / "repo", LAGTRACE_YML, base_s=0.03, head_s=0.15)
    register(api.settings, api.session_factory, repository.url)
    parent_id = deliver(api, pull_request_payload(repository), "pr-2", "pull_request").get_json()["job_id"]
    with api.session_factory() as session:  # as if prepare had read .lagtrace.yml and notify made the check run
        parent = session.get(Job, parent_id)
        parent.command = ["python3", "-m", "pytest", "-q", "tests"]
        session.get(JobSource, parent_id).github_check_run_id = 4242
        session.commit()

    def action(identifier: str, delivery: str):
        payload = {
            "action": "requested_action",
            "check_run": {"id": 4242, "head_sha": repository.head},
            "requested_action": {"identifier": identifier},
            "repository": {"full_name": "octo/demo"},
        }
        return deliver(api, payload, delivery, "check_run")

    response = action("rerun_other_cpus", "action-1")
    assert response.status_code == 202, response.get_json()
    with api.session_factory() as session:
        child = session.get(Job, response.get_json()["job_id"])
        assert child.parent_id == parent_id and child.trigger == "rerun"
        assert [c.label for c in child.configs] == ["cpuset=0", "cpuset=0-1", "cpus=0.5", "cpus=1", "cpus=2"]
        source = session.get(JobSource, child.id)
        assert source.base_commit_sha == repository.base and source.pull_request_number == 7
    ignored = action("something_else", "action-2").get_json()
    assert ignored["outcome"] == "ignored: requested action something_else" and ignored["job_id"] is None


def test_a_pull_request_with_a_base_that_is_no_commit_id_is_refused(sqlite_api, tmp_path):
    repository = make_pull_request(tmp_path / "repo", LAGTRACE_YML, base_s=0.03, head_s=0.15)
    register(sqlite_api.settings, sqlite_api.session_factory, repository.url)
    payload = pull_request_payload(repository)
    payload["pull_request"]["base"]["sha"] = "--upload-pack=evil"
    response = deliver(sqlite_api, payload, "pr-bad-base", "pull_request")
    assert response.status_code == 422 and "base commit" in response.get_json()["error"]
    assert sqlite_api.count(Job) == 0


# Latency: it asserts a 2x slower test `regressed` with cpuset=0, a core the parallel
# tier's workers share; beside them its gate once found it `unchanged` (a clean clone,
# 29 Nov 2026). Serially, in the latency tier.
@pytest.mark.latency
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_gates_pull_request_is_judged_against_the_base_branchs_history(api, tmp_path, github_server):
    # kind: gate everywhere. The pushes to main measure their new tests in every
    # configuration, which is main's history from then on; the pull request that makes
    # test_target 2x slower is then judged against that history, and its base commit is
    # never screened.
    api.token = api.new_token("octo/demo")
    repository = make_pull_request(tmp_path / "repo", LAGTRACE_YML + "kind: gate\n", base_s=0.1, head_s=0.2)
    register(api.settings, api.session_factory, repository.url)
    pushed = []
    for n in range(2):
        # Pushed twice (after a force-push away and back): two deliveries, two bodies.
        payload = {**push_payload(repository.url, repository.base), "before": f"{n:040d}"}
        response = deliver(api, payload, f"main-{n}", "push")
        assert response.status_code == 202, response.get_json()
        pushed.append(api.wait(response.get_json()["job_id"], timeout_s=240))
    first, second = (job["report"]["gate"] for job in pushed)
    assert first["branch"] == "main" and {t["verdict"] for t in first["tests"]} == {"new"}, first
    # After the first push each test has 6 runs of history (the gate's run of the suite,
    # then 5 in the matrix), fewer than one run can stand out of: measured again.
    assert all(t["stored"] == 6 and t["verdict"] == "new" and t["went_on"] for t in second["tests"]), second

    response = deliver(api, pull_request_payload(repository), "pr-gate", "pull_request")
    assert response.status_code == 202, response.get_json()
    job = api.wait(response.get_json()["job_id"], timeout_s=240)
    assert job["status"] == "done", job["error"]
    gate = job["report"]["gate"]
    verdicts = {test["test"]: test for test in gate["tests"]}
    assert gate["branch"] == "main" and gate["config"] == "cpuset=0"
    target, steady = verdicts[TARGET], verdicts[f"{TEST_FILE}::test_steady"]
    assert target["verdict"] == "regressed" and target["stored"] == 12, target
    assert target["jobs"] == [pushed[1]["id"], pushed[0]["id"]], target
    assert steady["verdict"] == "unchanged" and not steady["went_on"], steady
    assert job["report"]["base_comparison"] is None
    with api.session_factory() as session:
        assert not session.query(Run).filter(Run.kind.in_([RunKind.base, RunKind.base_warmup])).count()
    [slower] = [f for f in job["report"]["findings"] if f["kind"] == "slower_than_base"]
    assert slower["test"] == TARGET
    check = completed_check_run(github_server, job["id"])
    assert check.body["conclusion"] == "failure"
    assert check.body["output"]["title"].startswith("1 test slower than history"), check.body["output"]
    summary = check.body["output"]["summary"]
    assert "Against the `main` branch's history" in summary
    # The regressed row names the stored runs and the jobs they came from, and the
    # change with the interval the rule stopped on.
    [row] = [line for line in summary.splitlines() if line.startswith(f"| `{TARGET}` |")]
    assert f"12 (#{pushed[1]['id']}, #{pushed[0]['id']})" in row, row
    low, high = target["ratio_low"], target["ratio_high"]
    assert 1.2 < low <= target["ratio"] <= high, target
    assert f"{target['ratio']:.2f}x ({low:.2f}x to {high:.2f}x)" in row, row
