"""The ``lagtrace.report/v1`` contract as models: every report passes through them, and
the JSON Schema published beside this module (``report-v1.schema.json``) is generated
from them, so the document and the code cannot drift apart (a test compares them).

Additive changes (a new optional field) keep v1; renaming or removing a field is v2.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services import evidence as evidence_models

# The findings and diagnoses are the diagnose layer's (it builds them, services/diagnose/diagnoses.py).
from services.diagnose.report_parts import Diagnosis, Number, ReportFinding
from services.evidence import EvidenceKind

SCHEMA_ID = "lagtrace.report/v1"
SCHEMA_FILE = Path(__file__).with_name("report-v1.schema.json")


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Interval(_Part):
    """A median with its order-statistic confidence interval."""

    median: Number
    ci_low: Number
    ci_high: Number
    n: int
    confidence: Number


class ReportJob(_Part):
    id: int
    project: str
    status: Literal["queued", "running", "done", "failed", "cancelled"]
    created_at: str
    finished_at: str | None
    error: str | None
    # Seed of the screen's run order within each round (replays the same order).
    screen_seed: int | None = None
    # matrix (every configuration) or gate (one run against stored history); reports
    # written before kinds existed were all matrices.
    kind: Literal["matrix", "gate"] = "matrix"
    # The node class its screen ran on (services/jobs/node_class.py): runs of one test
    # compare only within one class. None: measured before node classes were stored, or
    # sharded (its shards may run on different nodes).
    node_class: ReportNodeClass | None = None


class ReportNodeClass(_Part):
    cpu_model: str | None  # /proc/cpuinfo's model name
    engine_cpus: str | None  # the CPUs the executor could use, as a cpuset list ("0-1")
    runner_image: str | None  # None: the local executor, the host itself


class ReportRun(_Part):
    wall_s: Number
    user_s: Number
    sys_s: Number
    max_rss_kb: int
    voluntary_ctx_switches: int
    involuntary_ctx_switches: int
    exit_code: int
    timed_out: bool
    nr_periods: int | None
    nr_throttled: int | None
    throttled_s: Number | None
    foreign_cpus: Number
    # The command's main thread's wait for a CPU (the kernel's run-queue delay); None: not known.
    run_delay_s: Number | None = None
    read_syscalls: int | None
    read_bytes: int | None


class ReportConfig(_Part):
    label: str
    cpus: Number | None
    cpuset: str | None
    runs: list[ReportRun]
    # One per configuration before its timing runs: stored, in no statistic.
    warmup_runs: list[ReportRun] = []
    # A surveyed suite's focused screen: the suite narrowed to the tests the survey kept
    # (their durations are in tests[]; their wall times are a narrowed command's).
    focus_runs: list[ReportRun] = []
    # Timed runs a busy neighbour disturbed (Thresholds.retake_foreign_cpus), each taken
    # again: on record, in no statistic.
    disturbed_runs: list[ReportRun] = []
    # The survey's run that the census traced (services/measure/survey_census.py SurveyCensus):
    # its tracer's time is in its wall time and every duration, so it is evidence, in no
    # statistic, table or ratio (a suite heavy in reads ran 3x slower under it).
    traced_runs: list[ReportRun] = []
    wall_s: Interval | None


class TestConfig(_Part):
    """One test in one configuration: its durations, and the interval when there are any."""

    label: str
    runs: list[Number]
    median: Number | None = None
    ci_low: Number | None = None
    ci_high: Number | None = None
    n: int | None = None
    confidence: Number | None = None


class ReportTest(_Part):
    id: str
    configs: list[TestConfig]
    # The line that defines it (JUnit's line attribute, 1-based), where known.
    line: int | None = None
    # Cleared by a suite's survey: its one run per configuration is all there is.
    cleared: bool = False
    # Not cleared, but left out of the focused screen by the job's budget (its survey
    # runs are all there is: no verdict).
    left_out: bool = False


class FailedRun(_Part):
    config: str
    repetition: int
    exit_code: int
    timed_out: bool
    output_tail: str | None


class EvidenceRun(_Part):
    id: int
    config: str
    test: str | None
    probe: str | None
    wall_s: Number
    # The test's own duration in a narrowed pytest run (None: not in its JUnit file);
    # the command's wall time otherwise. This, not wall_s, is compared with the median.
    observed_s: Number | None = None
    timing_median_s: Number | None
    exit_code: int
    timed_out: bool


class EvidenceNote(_Part):
    """How to read a piece of evidence: the tracer changed the run's timing (observer effect)."""

    kind: Literal["observer_effect"]
    probe: str
    config: str
    test: str | None
    ratio: Number  # evidence run's wall time / the timing runs' median
    evidence_wall_s: Number
    timing_median_s: Number
    text: str


class ReportEvidence(_Part):
    id: int
    config: str | None
    test: str | None
    kind: EvidenceKind
    run: int | None
    content: dict[str, Any]  # the kind's model in services/evidence.py
    text: str | None
    artifacts: list[dict[str, Any]]
    notes: list[EvidenceNote] = []

    @model_validator(mode="after")
    def _content_fits_its_kind(self) -> ReportEvidence:
        evidence_models.parse(self.kind, self.content)
        return self


class BaseChange(_Part):
    """One test (None: the whole command) in one configuration, head against base."""

    test: str | None
    config: str
    base_median_s: Number | None  # None: a test new on the head (the base has none)
    head_median_s: Number
    base_n: int
    head_n: int
    # head median / base median with its 95 % bootstrap interval; None when a median is 0.
    ratio: Number | None
    ratio_low: Number | None
    ratio_high: Number | None
    p_value: Number | None  # rank test, base runs against head runs
    # new: the base commit does not have the test (and the whole command's row leaves it out)
    verdict: Literal["regressed", "improved", "unchanged", "too_noisy", "new"]


class BaseComparison(_Part):
    """A pull request's head against its base commit, screened interleaved on one node."""

    base_commit: str
    base_ref: str | None
    head_commit: str | None
    tests: list[BaseChange]
    counts: dict[str, int]


class ReportSurvey(_Part):
    """A suite of real size (services/measure/survey.py): the first round ran it whole once
    per configuration; ``cleared`` tests ended there, ``focused`` were rerun together."""

    tests: int
    cleared: int
    focused: list[str]
    # Tests the survey could not clear that the budget left out of the focused screen.
    left_out: list[str] = []


class BudgetLeftOut(_Part):
    """What the budget left out: tests of the focused screen (the least suspicious), its
    rounds, the census (the configuration it would have run in), drill targets with their
    probes."""

    tests: list[str] = []
    rounds: list[str] = []
    census: list[str] = []
    drill: list[str] = []


class ReportBudget(_Part):
    """The job's time budget (services/measure/budget.py): the wall time of all its runs."""

    # None: no run measured the suite, so no default could be set.
    limit_s: Number | None
    # Asked for (--budget, budget_s), or the default (a multiple of the suite's own time).
    given: bool
    spent_s: Number
    left_out: BudgetLeftOut
    # The suite's own time: the median of its untraced whole runs with the most CPUs
    # (services/measure/budget.py untraced_suite_s), the configuration it was taken in, and
    # whether only a traced run could stand in for it; what the job's runs cost against it:
    # the cost model's unit (docs/explanations/cost-model.md). None where no run measured
    # the suite.
    suite_s: Number | None = None
    suite_config: str | None = None
    suite_traced: bool = False
    cost_ratio: Number | None = None
    # The job's whole wall time, created to finished (so far, while it runs), against the
    # same unit: cloning, preparing, containers, calibration and storing are in it.
    job_wall_s: Number | None = None
    job_cost_ratio: Number | None = None
    # The job's wall time by what it went to: the command's runs, evidence runs (probes and
    # the census's traced survey run), a gate's calibration loop, and lagtrace's own time
    # outside any run (start-up, checkout, preparing, probes' set-up, storing).
    command_s: Number | None = None
    evidence_s: Number | None = None
    calibration_s: Number | None = None
    own_s: Number | None = None


class MeasuredOn(_Part):
    """Where a measuring phase ran and the node's measurement locks it held while it did."""

    phase: Literal["screen", "drill"]
    # The shard whose screen this was (services/jobs/shards.py); None: the job's own.
    shard: int | None = None
    # The Kubernetes node (LAGTRACE_NODE_NAME), else the host's name.
    node: str
    # The locks' names: ``node`` (the whole node) or, packing, ``cpuN`` per CPU; never
    # the worker's paths to them.
    locks: list[str]


class GateTestRow(_Part):
    """One test against its history (services/jobs/gate.py)."""

    test: str
    verdict: Literal["regressed", "improved", "unchanged", "too_noisy", "new", "failed"]
    stored: int  # the stored runs it was compared with
    jobs: list[int]  # the finished jobs they came from, newest first
    fresh_s: list[Number]  # the gate's run of the suite, then each look's
    stored_median_s: Number | None  # None: no stored run
    ratio: Number | None  # fresh over stored (Hodges-Lehmann), where judged on more runs
    ratio_low: Number | None
    ratio_high: Number | None
    p_slower: Number | None  # sequential p-values, valid at any look
    p_faster: Number | None
    went_on: bool  # measured further in every configuration
    # With findings in the previous job: its one run in each other configuration, and the
    # job whose findings it carries (each run inside its history there), else None.
    checked_s: dict[str, Number]
    carried_from: int | None


def judged_runs(fresh_s: Sequence[float]) -> list[float]:
    """The fresh runs a verdict rests on: the looks' (the gate's own run of the suite only
    sent the test on), or that one run where no look ran. The regression's detail (the
    check run's annotation) and the check run's table both count these."""
    return list(fresh_s[1:] or fresh_s)


class ReportGate(_Part):
    config: str  # the gate configuration: the widest without a quota
    branch: str | None  # the history's branch (None: `lagtrace run` jobs, which have none)
    min_stored: int  # fewer stored runs than this: new (one run cannot stand out)
    tests: list[GateTestRow]
    counts: dict[str, int]  # verdict -> tests


class Report(_Part):
    # "schema" would shadow a BaseModel attribute; the JSON key is still "schema".
    schema_: Literal["lagtrace.report/v1"] = Field(alias="schema")
    job: ReportJob
    command: list[str]
    executor: str
    workdir: str | None
    repeat: int
    notes: list[str]
    configs: list[ReportConfig]
    tests: list[ReportTest]
    failed_runs: list[FailedRun]
    evidence_runs: list[EvidenceRun]
    evidence: list[ReportEvidence]
    findings: list[ReportFinding]
    diagnoses: list[Diagnosis] = []
    base_comparison: BaseComparison | None = None
    survey: ReportSurvey | None = None
    budget: ReportBudget | None = None
    # Jobs measured before 0014 have none.
    measured_on: list[MeasuredOn] = []
    # The Thresholds fields the rules judged it with (services/thresholds.py, the settings
    # reference in docs/). None: diagnosed before they were stored.
    thresholds: dict[str, Number] | None = None
    # A gate job's verdicts against history; None for a matrix, or a gate that could not judge.
    gate: ReportGate | None = None


def parse_report(data: dict[str, Any]) -> Report:
    """A report read as JSON (stored, or an API's answer) as the model; raises
    pydantic.ValidationError if it breaks the contract."""
    return Report.model_validate(data)


def report_json(report: Report) -> dict[str, Any]:
    """The report as JSON, at the edges: the API's answers, ``--json``, the stored report, the
    check run. The keys are those it was built or read with: a field never set is left
    out (``exclude_unset``), as the dict it was built as before did; ``schema`` by its alias."""
    return report.model_dump(mode="json", by_alias=True, exclude_unset=True)


def json_schema() -> dict[str, Any]:
    schema = Report.model_json_schema(by_alias=True)
    schema["$id"] = SCHEMA_ID
    schema["title"] = "lagtrace report v1"
    return schema


def write_schema() -> None:
    """Regenerate the published schema: ``python -m services.jobs.report_schema``."""
    SCHEMA_FILE.write_text(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_schema()
