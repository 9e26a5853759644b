"""Every threshold the screen and the rules use, in one place, documented and configurable.

Override any of them through the environment, e.g.
``LAGTRACE_THRESHOLDS__CPU_SENSITIVITY_RATIO=3``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class Thresholds(BaseModel):
    # cpu_sensitivity: slowest vs fastest configuration median ratio that counts as a
    # finding (docs/reference/findings.md: >= 2x), when a rank test says the configurations
    # differ at all (cpu_sensitivity_fdr below).
    cpu_sensitivity_ratio: float = Field(2.0, gt=1.0)
    # Ratios from which a cpu_sensitivity finding is medium / high severity.
    severity_medium_ratio: float = Field(4.0, gt=1.0)
    severity_high_ratio: float = Field(10.0, gt=1.0)
    # Ratios from which a regression (a gate's or a pull request's `slower_than_base`) is
    # medium / high. Lower than a configuration's: a test that got 2x slower in one commit
    # costs every later run twice its time, a change worth a look, not a note.
    regression_medium_ratio: float = Field(1.5, gt=1.0)
    # A pull request's regressed tests profiled on its head and its base commit, the
    # largest regressions first (services/jobs/commit_profiles.py): two py-spy runs each.
    regression_profile_max_tests: int = Field(3, ge=0)
    regression_high_ratio: float = Field(3.0, gt=1.0)
    # ... and the slow median at least this many seconds above the fast one: a 2x of a
    # 3 ms test is a scheduler tick, not a finding.
    cpu_sensitivity_min_s: float = Field(0.01, ge=0)
    # False discovery rate over the tests of a job (Benjamini-Hochberg over the per-test
    # p-values of a k-sample rank test; services/measure/stats.py). At 0.01 the false
    # cpu_sensitivity rate per test stays under 1 % (tests/bench/bench_false_positives.py).
    cpu_sensitivity_fdr: float = Field(0.05, gt=0, lt=1)
    # No verdict (cpu_sensitivity, latency_flaky) from a configuration with fewer
    # successful runs than this, and the screen never stops a configuration before it:
    # at 3 runs a 75 % interval doubled the false cpu_sensitivity rate on bimodal tests.
    min_repetitions: int = Field(5, ge=3)
    # A pull request against its base: a test's head/base median ratio from which it
    # counts as regressed (or, inverted, improved), when a rank test and the ratio's
    # interval both say it moved; the cpu_sensitivity_min_s floor applies too.
    base_change_ratio: float = Field(1.2, gt=1.0)
    # ... and runs up to this many times a side where fewer cannot decide it: at 5 runs a
    # side the exact rank test's smallest p-value is 0.008, which Benjamini-Hochberg never
    # passes over ten or more comparisons with one regression (tests/bench/bench_pr_power.py:
    # 30 tests, 3 slowed 1.5x, 0 % found at 5 runs a side, 100 % at 7).
    base_min_repeat: int = Field(7, ge=1)
    # A timed run during which other processes kept more than retake_foreign_cpus CPUs busy
    # on its cores (Run.foreign_cpus: a job packed on other cores does not count; the
    # busy-machine note's threshold, services/measure/hostload.py)
    # is kept on record as `disturbed`, out of every statistic, and taken again, at most
    # retake_per_run times in a row and retake_max_per_job times a job; a run still
    # disturbed after its retakes means the neighbour stays, and no further run of the job
    # is taken again (it would only cost: beside a process busy 50 % of CPU 0 for the whole
    # job, 12 retakes a job changed no verdict of examples/handoff.py in 5 of 5 jobs).
    # Measured on this 2-core machine, quiet:
    # 0.00-0.26 in 54 runs of examples/handoff.py; a run pinned to CPU 0 beside a process
    # busy 50 % of CPU 0: 0.28-0.37 (it takes its share of the core), beside one busy all
    # the time there: about 0.5 (tests/cli/test_run.py).
    retake_foreign_cpus: float = Field(0.3, gt=0)
    retake_per_run: int = Field(2, ge=0)
    retake_max_per_job: int = Field(12, ge=0)
    # A test whose slowest and fastest configurations look apart on their own (the pair's
    # rank test under cpu_sensitivity_fdr, the ratio gates passed) but is no discovery yet
    # after --repeat runs gets up to this many more runs of that pair: at 5 runs a pair's
    # smallest p-value is 0.008, at 9 it is 4e-5 (docs/explanations/statistics.md: a websocket test fully apart
    # 5 against 5 was missed). The false positive rate with them: bench_false_positives.
    undecided_extra_runs: int = Field(4, ge=0)
    # A pytest suite of at least focus_min_tests tests is surveyed (services/measure/survey.py):
    # its first round, one whole-suite run per configuration, clears every test whose
    # configurations lie within survey_ratio of each other (beyond what a quota explains);
    # the rest are rerun together, narrowed, for the verdicts. Below it the whole suite is
    # screened: narrowing would save little.
    focus_min_tests: int = Field(20, ge=1)
    survey_ratio: float = Field(1.25, gt=1.0)
    # After this many focused rounds, a kept test that every round cleared by the survey's
    # own rule (and whose runs show no two modes) stops being rerun (0: never).
    focus_futility_runs: int = Field(2, ge=0)
    # A job's time budget (docs/explanations/cost-model.md) when none is given (`--budget`, budget_s): this many
    # times the wall time of its first run in the configuration with the most CPUs (a
    # surveyed suite's survey run there, else the command's warm-up), never below
    # budget_floor_s. It counts the wall time of every run of the job (survey, timing,
    # focused, census, evidence); the focused screen and the drill stop before the next
    # run would pass it, the most suspicious tests first.
    budget_multiple: float = Field(6.0, gt=1.0)
    budget_floor_s: float = Field(300.0, gt=0)

    # slower_since: change points in a test's latency across the pushes of a branch
    # (services/diagnose/change_points.py). E-Divisive means as Apache Otava runs it:
    # candidate splits in sliding windows of slower_since_window pushes, kept while a
    # Student's t-test between the neighbouring segments gives p < slower_since_max_pvalue.
    # Otava alone (its default 0.001) reports a slower change point in 2.8 % of flat
    # 60-push histories with 5 % noise, 14 % when one job in 30 ran on a busy machine: a
    # lone slow job is a segment of its own. So a step counts only with at least
    # slower_since_min_pushes pushes on each side, their medians slower_since_ratio apart
    # with disjoint 95 % intervals, and the cpu_sensitivity_min_s floor in seconds:
    # 0.0 % and 0.8 % false findings per test, searched after every push
    # (tests/bench/bench_change_points.py; 3 pushes a side gave 2.2 %).
    slower_since_max_pvalue: float = Field(0.001, gt=0, lt=1)
    slower_since_window: int = Field(50, ge=6)
    slower_since_ratio: float = Field(1.2, gt=1.0)
    slower_since_min_pushes: int = Field(4, ge=2)
    # The newest finished jobs of the branch searched after each of its jobs.
    slower_since_history: int = Field(60, ge=6)

    # A gate's reference: a test's newest stored runs in one configuration, on the base
    # branch, from finished jobs of the same command on the same node class (services/jobs/history.py),
    # at most this many and none older than this. 20 is the history the gate benchmark
    # simulates (tests/bench/bench_gate.py: against 20 stored runs two fresh runs all
    # slower give p = 1/C(22, 2) = 0.0043); older runs measured code and machines that
    # may have drifted since.
    gate_history_runs: int = Field(20, ge=1)
    gate_history_max_age_days: float = Field(30.0, gt=0)
    # ... and it holds only while the node does: every job times a fixed CPU-bound loop
    # (services/jobs/gate.py CALIBRATION), and where a gate's run of it took beyond this
    # ratio of the CPU time of its history's runs either way, the node is not the one its
    # history measured and the gate screens every configuration instead.
    gate_drift_ratio: float = Field(1.3, gt=1.0)

    # The confirm step (services/measure/confirm.py): each diagnosed cause with a knob is
    # rerun in its slow configuration with and without it, in pairs, until the sequential
    # rule decides, at most this many pairs. At the rule's 1 % level two arms of j runs can
    # decide from j = 5 (1 / C(10, 5) = 0.004): 8 pairs leave three more looks.
    confirm_max_pairs: int = Field(8, ge=1)
    # ... for at most this many causes a job, the worst diagnoses first.
    confirm_max_causes: int = Field(3, ge=0)
    # ... medium and high diagnoses, and a low one whose cause accounts for at least this
    # share of its subject's median time in the cause's configuration (the corpus's slow
    # plugin start-up: 0.64 s of a 0.67 s run, low by its seconds, 96 % by its share).
    confirm_low_share: float = Field(0.5, gt=0, le=1)

    # cpu_throttling: share of CFS periods in which the quota throttled the run.
    cpu_throttling_share: float = Field(0.2, gt=0, le=1)
    # ... and only when the median run lost at least this long to throttling (an
    # interpreter start-up that overshoots the first period by a few ms is not a finding).
    cpu_throttling_min_s: float = Field(0.05, ge=0)
    # ... and only when the program runs more CPUs in parallel than the quota (and than
    # one CPU) by this factor: a single thread under cpus=0.5 is slowed 2x by physics, and
    # resizing pools it does not have would not help.
    cpu_throttling_min_parallelism: float = Field(1.3, ge=1)
    # ... and only when what it costs beyond the quota's share of its useful work is at
    # least this share of the run: that share is a ratio of two configurations' medians,
    # and a healthy pytest -n 2 run's CPU time under cpus=0.5 was 11 % above its one-core
    # run's (tests/unit/services/diagnose/test_timing_rules.py, xdist workers).
    cpu_throttling_min_share: float = Field(0.1, ge=0, le=1)
    # Its severity: the seconds throttling costs beyond the quota's share, as a share of
    # the median run's wall time: from this share medium, from the next high.
    cpu_throttling_medium_share: float = Field(0.2, gt=0, le=1)
    cpu_throttling_high_share: float = Field(0.5, gt=0, le=1)

    # off_cpu_wait: CPU time (user + sys) at most this share of wall time, for a run of
    # at least off_cpu_min_wall_s (a shorter wait is not worth a finding).
    off_cpu_max_cpu_share: float = Field(0.25, gt=0, lt=1)
    off_cpu_min_wall_s: float = Field(1.0, ge=0)

    # latency_flaky: judged once a configuration has flaky_min_runs runs (a spread-out
    # configuration is never stopped early: it runs up to --repeat). Multi-modal: two groups
    # of runs, each at least flaky_min_group_share of them (and two), with an empty gap between them: the nearest
    # runs across it flaky_gap_ratio apart, and the gap wider (log scale) than either
    # group's own spread (a long tail fills that gap; services/diagnose/latency_flaky.py).
    # Widely dispersed: interquartile range at least flaky_dispersion x the median.
    # Either only counts when the slow runs lose at least flaky_min_spread_s.
    flaky_min_runs: int = Field(5, ge=4)
    flaky_gap_ratio: float = Field(2.0, gt=1)
    flaky_min_group_share: float = Field(0.2, gt=0, lt=0.5)
    flaky_dispersion: float = Field(0.5, gt=0)
    flaky_min_spread_s: float = Field(0.05, ge=0)

    # futex_storm: futex's share of traced syscall time (strace -c), in percent, with
    # at least futex_min_calls calls (a few futex waits at thread exit are normal).
    futex_storm_pct: float = Field(80.0, gt=0, le=100)
    futex_min_calls: int = Field(100, ge=1)
    # ... and above low only where the wake-ups cost: futex's system time at least this
    # share of the untraced median (a pool's workers sleeping between jobs make a few
    # hundred calls, which hold most of a quiet program's syscall time and none of its run).
    futex_min_share: float = Field(0.05, ge=0, le=1)
    # ... and high where futex holds at least this share of syscall time (story 1: 97-99 %).
    futex_storm_high_pct: float = Field(95.0, gt=0, le=100)

    # busy_polling: sleep and non-blocking wait syscalls (nanosleep, wait4 with WNOHANG;
    # strace) per second of a traced run of at least busy_polling_min_wall_s, at a CPU
    # share no higher than busy_polling_max_cpu_share (a loop that computes is not polling).
    # A slow poller counts: psutil 5.x's Process.wait(timeout) wakes ~28 times a second
    # (docs/explanations/design.md, story 4: 258 context switches in a 10 s wait, against 2 for a blocking one).
    # Selector waits (epoll_wait, poll, select) are not counted: an event loop blocks there.
    busy_polling_min_calls_per_s: float = Field(10.0, gt=0)
    busy_polling_min_calls: int = Field(20, ge=1)
    busy_polling_min_switches_per_s: float = Field(10.0, gt=0)
    busy_polling_max_cpu_share: float = Field(0.5, gt=0, le=1)
    busy_polling_min_wall_s: float = Field(0.5, ge=0)
    # Below this many wake-ups a second, sleeps alone do not make a poller (a peer that
    # trickles its answer every 50 ms sleeps 20 times a second and polls nothing): a slow
    # poller also checks between its sleeps, at least this many times per sleep.
    busy_polling_fast_per_s: float = Field(100.0, gt=0)
    busy_polling_min_checks_per_sleep: float = Field(0.5, ge=0)

    # tiny_reads: at least this many reads with data per run whose typical size (the
    # median, from the reads probe's strace of every read; the /proc io mean before a drill)
    # is at most tiny_reads_max_bytes. Socket reads are counted only by strace.
    tiny_reads_min_syscalls: int = Field(2000, ge=1)
    tiny_reads_max_bytes: float = Field(64.0, gt=0)
    # The /proc io screen (file and pipe reads only, start-up reads included in its mean).
    tiny_reads_max_avg_bytes: float = Field(512.0, gt=0)
    # ... and a medium finding only where the reads cost: their system time (strace -c, in
    # the same configuration) at least tiny_reads_min_cost_s and tiny_reads_min_share of the
    # untraced run. 2,000 reads of 38-byte messages paced by a peer over 4 s cost 2 %.
    tiny_reads_min_cost_s: float = Field(0.02, ge=0)
    tiny_reads_min_share: float = Field(0.1, ge=0, le=1)

    # event_loop_blocked: the time asyncio callbacks held the loop, each callback counted
    # from event_loop_blocked_floor_s (the asyncio_loop probe), adds up to this share of
    # the traced run and at least event_loop_blocked_min_s. What the loop lost is the sum:
    # 120 callbacks of 15 ms block it 1.8 s, though none is long.
    event_loop_blocked_share: float = Field(0.1, gt=0, le=1)
    event_loop_blocked_min_s: float = Field(0.1, ge=0)
    # A healthy loop's callbacks take microseconds to about 1 ms; 5 ms is five times that,
    # and one GIL switch interval (sys.getswitchinterval()): a short callback that waits
    # once for the GIL another thread holds grows by up to that much, no fault of its own.
    # Read by the probe when it runs (docs/explanations/evidence.md, asyncio_loop).
    event_loop_blocked_floor_s: float = Field(0.005, gt=0)

    # hot_path: the functions that hold a drilled command's or test's py-spy samples; a
    # function is named when it holds this share of the samples (own or cumulative).
    hot_path_min_share: float = Field(0.1, gt=0, le=1)
    # ... and the profiled run lasted at least this long (fewer than 50 samples at 100 Hz
    # are noise: a 0.3 s run shows its imports compiling).
    hot_path_min_wall_s: float = Field(0.5, ge=0)
    # A whole command is profiled for a hot path only when it kept at least this much of
    # a CPU busy (CPU time over wall time): a command that mostly waits has no hot path,
    # and off_cpu_wait, busy_polling or tiny_reads say where its time goes.
    hot_path_min_cpu_share: float = Field(0.5, gt=0, le=1)
    # A function whose cumulative share reaches this is an entry point (<module>, main,
    # the pytest runner): true of every program, no answer to "where".
    hot_path_entry_point_share: float = Field(0.95, gt=0, le=1)
    # Where functions grew between configurations, those whose growth is within this
    # share of the largest are all candidates, and the innermost is named: one that calls
    # no other candidate, the primitive a loop calls, not the loop
    # (tests/unit/services/diagnose/test_hot_path.py). Half: a call path's frames each
    # hold the growth of the frames below them, and the innermost frame that holds most of
    # it is the answer (starlette 0.37's websocket test: its route frames 18 ms, the
    # `_asgi_receive` loop they await 12 ms, the sleep it polls 6 ms).
    hot_path_nearly_the_most: float = Field(0.5, gt=0, le=1)

    # The drill also traces a whole command this slow in its fastest configuration even
    # when no timing rule flagged it: the causes that only a tracer sees (socket reads,
    # a hot Python path, a blocked event loop) leave no mark on the screen's numbers.
    drill_slow_command_s: float = Field(1.0, gt=0)
    # ... and a command that spends this share of its wall time, and at least
    # drill_syscall_heavy_min_s, in the kernel (300,000 recv(1) take 0.13-0.2 s here, a
    # third to a half of it system time: 0.045 s on a fast day; a healthy Python program
    # spends a few per cent there; under gevent's monkey-patched sockets the same reads
    # spend 0.2-0.27 of it there, the rest in gevent's hub). Drilling a program this short
    # costs little.
    drill_syscall_heavy_share: float = Field(0.2, gt=0, le=1)
    drill_syscall_heavy_min_s: float = Field(0.02, ge=0)
    # The most tests of one job the drill traces (each costs every probe in two
    # configurations): the most severe first; the report names the rest.
    drill_max_tests: int = Field(5, ge=1)

    # observer_effect: an evidence run's wall time this many times above (or below) the
    # timing median of the same configuration.
    observer_effect_ratio: float = Field(2.0, gt=1)
    # ... and at least this many seconds apart (a 50 ms program traced is always slower).
    observer_effect_min_s: float = Field(0.1, ge=0)

    # timing_disagrees: a run's JUnit durations are the job's own numbers (its conftest can
    # rewrite report.duration); lagtrace's timer (the run's wall and CPU time, measured
    # outside the job) is not. Their sum may exceed the wall time times the processes that
    # ran tests at once (Run.test_workers: pytest-xdist's -n) by this share, a margin for
    # clocks read at different instants (the half millisecond each case's rounding may add
    # is counted apart): workers busy from the first to the last instant of a run still
    # leave its start-up out of their sum (recorded -n 2 runs: 3.006 s in 2.16-2.20 s) ...
    timing_disagrees_over_share: float = Field(0.05, ge=0)
    # ... and by at least this many seconds, the floor of both checks. A test run alone
    # (one JUnit case, one process) takes its duration plus pytest's start-up and
    # teardown, which compute: in 8 runs here of a test sleeping 0.4 s alone (cpuset=0
    # and 0-1), the timer's wall time was the duration plus the run's CPU time within 3 ms
    # (0.65-0.81 s); with a conftest halving report.duration, 0.21-0.30 s more than that
    # (tests/unit/services/diagnose/test_timing_disagrees.py). Well above the noise, below
    # what halving a 0.4 s test hides.
    timing_disagrees_min_s: float = Field(0.15, ge=0)
    # ... and the timer's wall time at least this many times the duration plus the CPU
    # time (stretched by a quota, plus one throttling pause) plus its wait for a CPU (the
    # kernel's run-queue delay): the halved 0.4 s test gave
    # 1.37-1.53, the honest one 1.00-1.01. A start-up waiting off the CPU (a conftest's
    # pytest_sessionstart that sleeps) disagrees as well, and the finding says so.
    timing_disagrees_under_ratio: float = Field(1.25, gt=1)

    # slow_startup: start-up (imports, pytest plugin loading and collection) at least this
    # share of the run's wall time and at least slow_startup_min_s long, in the fastest
    # configuration (a quota slows start-up by its factor: that is physics). pytest with
    # only its own plugins starts in ~0.3 s here: a small healthy suite stays below.
    slow_startup_share: float = Field(0.5, gt=0, le=1)
    slow_startup_min_s: float = Field(0.5, ge=0)
    # ... medium from this share of the run (and, for a pytest run, this many seconds).
    slow_startup_medium_share: float = Field(0.75, gt=0, le=1)
    slow_startup_medium_s: float = Field(1.0, ge=0)
    # The least share of a pytest start-up that plugin and conftest imports must hold before
    # the finding blames them: 44 % in the corpus's 18-plugin case, 9 % in jsonschema's suite.
    slow_startup_plugin_share: float = Field(0.25, gt=0, le=1)
    # A start-up that imports do not explain is pytest's and collection's; below this it is
    # the ordinary price of a pytest run.
    slow_startup_collection_min_s: float = Field(1.0, ge=0)

    # gil_contention from the clock's looks at the threads before the stall deadline: a
    # thread waited for the GIL in at least this share of them in the slow configuration,
    # and the seconds spent so (share x median) exceed the fast configuration's by at
    # least gil_min_share_of_slowdown of the slowdown: waits the fast side has as well
    # (three threads on one core always queue a little) explain nothing.
    gil_wait_share: float = Field(0.5, gt=0, le=1)
    gil_min_share_of_slowdown: float = Field(0.25, ge=0, le=1)
    # ... high severity once they account for this share of the slowdown, medium below.
    gil_high_share_of_slowdown: float = Field(0.5, ge=0, le=1)
    # ... and where the waits are compared between the slow and the fast configuration and
    # account for that share of the slowdown, a smaller share of looks is enough (what they
    # cost decides, not how often they were seen): 9 of 20 looks in a 1.2 s hand-off run
    # are 0.5 s of waiting. Below this, the looks (forty, 5 ms apart) cannot tell a wait from noise.
    gil_compared_min_share: float = Field(0.25, gt=0, le=1)

    # The stall trigger of evidence runs, when --stall-after is not given: this many times
    # the fast configuration's median, but never sooner than stall_min_s (a snapshot of a
    # run that is merely starting up shows the start-up, not the stall).
    stall_multiple: float = Field(10.0, gt=1.0)
    stall_min_s: float = Field(0.5, ge=0.0)
    # How long before the hard timeout a stalled run gets its last snapshot (py-spy dump
    # and /proc I/O counters; a second core would not fit in the time left).
    last_snapshot_lead_s: float = Field(1.0, gt=0.0)
    # Evidence runs' hard timeout when --timeout is not given: tracers slow a command
    # down (strace up to 170x on syscall-heavy loops), so this many times the slowest
    # configuration's median, and at least evidence_timeout_min_s.
    evidence_timeout_multiple: float = Field(5.0, gt=1.0)
    evidence_timeout_min_s: float = Field(30.0, gt=0.0)
