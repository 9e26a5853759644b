"""One diagnosis per test: a test's findings told as one story.

A user reading five findings on one test (cpu_sensitivity, latency_flaky, futex_storm,
gil_contention, stall) has to assemble the story alone. A diagnosis does it: the
symptom (which configurations, how much slower, or how it varies), the cause (the
evidence-backed kind that explains it), the evidence, and what to do. It is built from
the report's findings (services/diagnose/report_parts.py), so the report, the API and
the dashboard tell the same story.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.diagnose.findings import SEVERITY_ORDER, format_seconds
from services.diagnose.metrics import CpuSensitivityMetrics, accounts_s_of, metrics_of, ratio_of, slow_vs_fast_of
from services.diagnose.report_parts import Diagnosis, DiagnosisCause, DiagnosisEvidence, DiagnosisSymptom, ReportFinding
from services.evidence import ConfirmContent
from services.measure import confirm

# What a user sees first: how the latency misbehaves.
SYMPTOMS = ("cpu_sensitivity", "slower_since", "slower_than_base", "latency_flaky", "stall", "command_failed")
# Why. Every cause kind states the seconds of a run its mechanism accounts for
# (``accounts_s``: a blocked loop's blocked seconds, a syscall's system time per run, a
# wait's wall minus CPU, what differs between the slow and the fast configuration where a
# pair was compared); the largest is the cause. This order, most specific first, only
# breaks ties and ranks findings stored before they said.
CAUSES = (
    "command_failed",
    "gil_contention",
    "futex_storm",
    "event_loop_blocked",
    "busy_polling",
    "tiny_reads",
    "cpu_throttling",
    "slow_startup",
    "hot_path",
    "off_cpu_wait",
    "stall",
)
# Causes that act on the whole process in one configuration, each of its tests alike: a
# test slower there shares the cause found on the whole command (build_diagnoses).
CONFIGURATION_CAUSES = ("cpu_throttling",)
# Causes whose evidence is the timing runs' own measurements (cgroup cpu.stat, exit
# codes and output) rather than a probe's evidence entry.
MEASURED_CAUSES = ("cpu_throttling", "command_failed")

ADVICE = {
    "command_failed": "Make the command pass first: the output tail shows why it failed; no latency was measured.",
    "gil_contention": (
        "Threads queue for the GIL while one computes: move the CPU-bound work to a process pool (or C code "
        "that releases the GIL), or hand off fewer, larger pieces of work between threads."
    ),
    "futex_storm": (
        "Threads spend their time waking each other through a lock or queue: batch the work per hand-off, "
        "use fewer threads, or keep the exchange in one thread."
    ),
    "event_loop_blocked": (
        "Synchronous work blocks the event loop: move the blocking call off it (asyncio.to_thread, "
        "loop.run_in_executor, an async library; for logging a QueueHandler)."
    ),
    "busy_polling": (
        "It waits by waking up to check: replace the poll loop with a blocking wait (an Event or Condition, "
        "select/poll without a short timeout, Popen.wait() or a psutil that waits on the process itself)."
    ),
    "tiny_reads": (
        "It reads a few bytes per system call: read in larger chunks (buffered I/O, socket.makefile, "
        "iter_content(chunk_size=65536))."
    ),
    "cpu_throttling": (
        "More threads or processes than the CPU quota pays for: size pools to the quota, not to os.cpu_count()."
    ),
    "slow_startup": (
        "Start-up is most of the run: import lazily, and disable plugins it does not need "
        "(PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 with -p for the ones it does, or -p no:NAME)."
    ),
    "hot_path": "Most of the time sits in the functions named: make them cheaper, call them less, or cache them.",
    "off_cpu_wait": (
        "It mostly waits off the CPU: find what for (I/O in tiny pieces, a lock, a sleep, a slow peer); "
        "rerun with --evidence strace,pyspy to see where."
    ),
    "stall": "Read the stacks taken at the stall: the frames show where it stood still.",
}
UNEXPLAINED = {
    "timing_disagrees": (
        "Read the suite's conftest.py files and plugins for hooks that change report.duration "
        "(pytest_runtest_logreport, a pytest_runtest_makereport hookwrapper) or wait outside any test; until "
        "then, the verdicts on this test rest on durations lagtrace's timer does not bear out."
    ),
    "slower_since": (
        "Screen the last fast and the first slow commit interleaved on one machine (a pull request of the "
        "first slow commit against the last fast one) to confirm the step, then read the diff between them."
    ),
    "slower_than_base": (
        "No profile of the head against the base commit named what grew (py-spy was not among the evidence, or "
        "the budget left it out): read the pull request's diff of this test and what it calls."
    ),
    "cpu_sensitivity": (
        "No evidence names the cause yet: rerun with --evidence strace,pyspy,core to trace the slow and the "
        "fast configuration."
    ),
    "latency_flaky": (
        "Something varies between runs under the same conditions: a lock or file left by a previous run, a "
        "cache, a retry, a timer. Rerun with --evidence core --stall-after just above the fast runs' time to "
        "catch a slow run in the act."
    ),
}


def _symptom(finding: ReportFinding) -> str:
    measured = metrics_of(finding.kind, finding.metrics)
    if isinstance(measured, CpuSensitivityMetrics) and measured.slow.config != measured.fast.config:
        # Never a configuration against itself: the finding's own title says its symptom.
        slow, fast = measured.slow, measured.fast
        return (
            f"{measured.ratio:.1f}x slower with {slow.config} than with {fast.config} "
            f"({format_seconds(slow.median)} vs {format_seconds(fast.median)} median)"
        )
    return finding.title


# Causes a finding of another kind explains: the GIL is a futex, so threads queueing for it
# are a futex storm too; naming the futex would name the mechanism, not the cause.
EXPLAINED_BY = {"futex_storm": "gil_contention"}
# Named as the cause only where no other cause is (choose_cause), in CAUSES order.
FALLBACKS = ("hot_path", "off_cpu_wait", "stall")


def accounts_s(finding: ReportFinding) -> float | None:
    """The seconds a cause's mechanism accounts for: what differs between the slow and the
    fast configuration's evidence where the rule compared a pair (zero or less: nothing
    differs), else what the mechanism takes of one run; None where it was not measured."""
    return accounts_s_of(metrics_of(finding.kind, finding.metrics))


def choose_cause(causes: list[ReportFinding]) -> tuple[ReportFinding | None, str | None]:
    """The cause, and why none is named when evidence was compared and nothing differed.

    A forensic expert weighs what each mechanism costs: the cause is what accounts for
    the most time (3 s of a blocked event loop, not 0.06 s of throttling). So causes rank
    by the seconds they account for, CAUSES' order breaking ties; one compared between the
    slow and the fast configuration that accounts for nothing is no cause. Causes that
    state no seconds come after, evidence first, in CAUSES' order.
    """
    kinds = {f.kind for f in causes}
    causes = [f for f in causes if EXPLAINED_BY.get(f.kind) not in kinds]
    # Where the CPU time goes (and that it waits, or stood still) is the answer only when
    # no mechanism (a lock, a wait, a poll, a quota) is found: a thread that computes for
    # as long as the others queue behind the GIL grows in the profile too, as a consequence.
    for group in (
        [f for f in causes if f.kind not in FALLBACKS],
        [f for f in causes if f.kind in FALLBACKS],
    ):
        cause, _ = _choose(group)
        if cause is not None:
            return cause, None
    return None, _choose(causes)[1]


def _choose(causes: list[ReportFinding]) -> tuple[ReportFinding | None, str | None]:
    measured = [f for f in causes if accounts_s(f) is not None]
    differing = [f for f in measured if (accounts_s(f) or 0.0) > 0.0]
    if differing:
        return max(differing, key=lambda f: (accounts_s(f) or 0.0, bool(f.evidence), -CAUSES.index(f.kind))), None
    unmeasured = sorted(
        (f for f in causes if accounts_s(f) is None),
        key=lambda f: (not f.evidence, CAUSES.index(f.kind)),
    )
    if unmeasured:
        return unmeasured[0], None
    if measured:
        compared = ", ".join(sorted({f.kind for f in measured}))
        return None, f"the slow and the fast configuration's evidence do not differ ({compared})"
    return None, None


def build_diagnoses(
    findings: Sequence[ReportFinding],
    evidence_kinds: Mapping[int, str],
    confirmations: Sequence[tuple[int, ConfirmContent]] = (),
) -> list[Diagnosis]:
    """Group report findings by test (None: the whole command) into diagnoses, worst first;
    ``evidence_kinds``: each evidence entry's kind by its id; ``confirmations``: the
    confirm step's experiments (evidence id, content), each on its test, cause and
    configuration."""
    groups: dict[str | None, list[ReportFinding]] = {}
    for finding in findings:
        groups.setdefault(finding.test, []).append(finding)
    # Only a cause that acts on every test of a configuration's runs is a test's cause by
    # being found on the whole command in that configuration: a quota that throttles the
    # process throttles each of its tests. Another finding of the command (a failing
    # test, a hot path, a wait) says nothing of this test's latency unless its evidence
    # names the test, and then the rule attributed it to the test already.
    command_causes = [f for f in groups.get(None, []) if f.kind in CONFIGURATION_CAUSES and f.config]
    diagnoses = []
    for test, members in groups.items():
        # The symptom a user recognises first: a CPU-configuration slowdown before a spread.
        symptoms = sorted((f for f in members if f.kind in SYMPTOMS), key=lambda f: SYMPTOMS.index(f.kind))
        cause, not_established = choose_cause([f for f in members if f.kind in CAUSES])
        inherited = False
        if cause is None and not_established is None and test is not None and symptoms:
            # A test slower in a configuration where the whole command is throttled (or
            # otherwise diagnosed) most likely shares that cause.
            slow_configs = {f.config for f in symptoms}
            matching = [f for f in command_causes if f.config in slow_configs]
            if matching:
                cause, inherited = matching[0], True
        tried = [
            (i, c)
            for i, c in confirmations
            if cause is not None and not inherited and (c.test, c.cause, c.config) == (test, cause.kind, cause.config)
        ]
        confirmed = next(((i, c) for i, c in tried if c.verdict == confirm.CONFIRMED), None)
        knob = "; ".join(confirm.describe(c) for _, c in tried) if confirmed is None else confirm.describe(confirmed[1])
        if cause is not None and tried and confirmed is None:
            # Its knob, turned, did not make it faster: the evidence named a mechanism
            # that the experiment does not bear out, and no other is named in its place.
            not_established = f"{cause.kind}'s knob, turned, did not make it faster"
            cause = None
        symptom = symptoms[0] if symptoms else cause or members[0]
        evidence_ids = list(dict.fromkeys(i for f in members for i in f.evidence))
        evidence_ids += [i for i, _ in tried if i not in evidence_ids]
        advice = ADVICE.get(cause.kind, "") if cause is not None else UNEXPLAINED.get(symptom.kind, "")
        worst = min(members, key=lambda f: SEVERITY_ORDER.get(f.severity, 9))
        compared = slow_vs_fast_of(metrics_of(cause.kind, cause.metrics)) if cause is not None else None
        # Every field is given, defaults too: the JSON holds each key (services/jobs/report_schema.py
        # report_json leaves out what was never set).
        diagnoses.append(
            Diagnosis(
                test=test,
                severity=worst.severity,
                symptom=DiagnosisSymptom(
                    kind=symptom.kind,
                    configs=sorted({f.config for f in symptoms if f.config}),
                    text=_symptom(symptom),
                    ratio=ratio_of(metrics_of(symptom.kind, symptom.metrics)),
                    finding=symptom.id,
                ),
                cause=(
                    DiagnosisCause(
                        kind=cause.kind,
                        text=cause.title,
                        finding=cause.id,
                        evidence_backed=bool(cause.evidence) or cause.kind in MEASURED_CAUSES,
                        from_command=inherited,
                        accounts_s=accounts_s(cause),
                        slow_vs_fast=compared if isinstance(compared, str) else None,
                    )
                    if cause is not None
                    else None
                ),
                not_established=not_established,
                knob=knob or None,
                knob_confirmed=(confirmed is not None) if tried else None,
                knob_evidence=(confirmed or tried[-1])[0] if tried else None,
                evidence=[DiagnosisEvidence(id=i, kind=evidence_kinds.get(i, "evidence")) for i in evidence_ids],
                advice=advice,
                findings=[f.id for f in members],
                kinds=[f.kind for f in members],
            )
        )
    diagnoses.sort(key=lambda d: (SEVERITY_ORDER.get(d.severity, 9), -float(d.symptom.ratio or 0)))
    return diagnoses


def render(diagnoses: list[Diagnosis]) -> list[str]:
    """The text report's section: one block per test."""
    if not diagnoses:
        return []
    out = [f"Diagnoses ({len(diagnoses)}: one per test with findings)"]
    for d in diagnoses:
        cause = d.cause
        out.append(f"  {d.severity.upper():6} {d.test or 'the whole command'}")
        if cause and cause.finding == d.symptom.finding:
            # One finding is both what is wrong and why (a failing command): say it once.
            out.append(f"         found:    {cause.kind}: {cause.text}")
        else:
            out.append(f"         symptom:  {d.symptom.text}")
            if cause:
                origin = " (found on the whole command)" if cause.from_command else ""
                out.append(f"         cause:    {cause.kind}{origin}: {cause.text}")
            elif d.not_established:
                out.append(f"         cause:    not established: {d.not_established}")
            else:
                out.append("         cause:    not established by evidence")
        if cause and cause.slow_vs_fast:
            share = f" (accounts for {format_seconds(cause.accounts_s)})" if cause.accounts_s else ""
            out.append(f"         compared: {cause.slow_vs_fast}{share}")
        if d.knob:
            out.append(f"         knob:     {d.knob}")
        if d.evidence:
            out.append("         evidence: " + ", ".join(f"{e.kind} #{e.id}" for e in d.evidence))
        if d.advice:
            out.append(f"         do:       {d.advice}")
    out.append("")
    return out
