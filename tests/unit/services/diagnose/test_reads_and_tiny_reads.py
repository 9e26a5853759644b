"""tiny_reads judged on recorded strace output of every read (the reads probe)."""

from __future__ import annotations

import pytest

from services.diagnose import tiny_reads
from services.measure.probes import reads
from tests.support import jobs


def by_type(name: str) -> dict:
    return reads.parse(jobs.recorded(name).splitlines())


def test_socket_reads_of_one_byte_are_counted_with_their_size():
    # recv(1) from a socket: recorded with `strace -f -y -s 0 --seccomp-bpf -e trace=read,...`
    # (the first 3500 lines of 300,073, and the final EOF read).
    parsed = by_type("strace-reads-recv1.txt")
    socket = parsed["socket"]
    assert socket["syscalls"] == {"recvfrom": socket["calls"]}
    assert socket["reads_with_data"] > 3000
    assert socket["median_bytes"] == 1 and socket["mode_bytes"] == 1
    assert socket["eof"] == 1
    assert socket["histogram"] == {"<=1": socket["reads_with_data"]}
    # Start-up reads of the interpreter's own files are kept apart, and are not tiny.
    assert parsed["file"]["median_bytes"] > 64


def test_unfinished_and_resumed_reads_keep_their_descriptor_type():
    parsed = by_type("strace-reads-unfinished.txt")
    # 1659's pipe read was interrupted by 1668's, and resumed with 21 bytes.
    assert parsed["pipe"]["calls"] >= 2
    assert 21 in [parsed["pipe"]["median_bytes"], parsed["pipe"]["mode_bytes"]]
    assert parsed["pipe"]["eof"] >= 1


def test_median_of_a_histogram_is_the_middle_read():
    from collections import Counter

    assert reads._median(Counter({1: 3, 65536: 2})) == 1.0
    assert reads._median(Counter({1: 2, 100: 2})) == 50.5


def _job_with_reads(parsed: dict, wall_s: float = 2.0, read_s: float | None = 0.12):
    """A job whose drill read every read, and (unless ``read_s`` is None) took strace -c
    in the same configuration, with ``read_s`` of system time in recvfrom."""
    built = jobs.job()
    config = built.configs[1]
    jobs.timing_runs(config, [0.4, 0.41, 0.42], cpu_share=0.9)
    jobs.evidence(built, config, "reads", {"status": "ok", "by_fd_type": parsed, "wall_s": wall_s})
    if read_s is not None:
        row = {"name": "recvfrom", "pct_time": 90.0, "seconds": read_s, "usecs_per_call": 1, "calls": 100_000}
        jobs.evidence(built, config, "strace", {"status": "ok", "syscalls": [{**row, "errors": 0}]})
    return built


def test_tiny_socket_reads_are_a_finding_naming_the_typical_size():
    parsed = by_type("strace-reads-recv1.txt")
    [finding] = tiny_reads.check(jobs.context(_job_with_reads(parsed)))
    assert finding.kind == "tiny_reads" and finding.severity == "medium"
    assert finding.metrics.stored()["fd_type"] == "socket"
    assert finding.metrics.stored()["median_bytes"] == 1
    assert "recvfrom" in finding.detail and "median 1 bytes" in finding.detail
    assert "0.120 s of system time (strace -c), 29% of the 0.410 s untraced median" in finding.detail
    assert finding.metrics.stored()["accounts_s"] == pytest.approx(0.12)


def test_tiny_reads_that_cost_little_or_nothing_measured_are_a_low_note():
    # docs/reference/findings.md (tiny_reads): a client reading small messages as a peer sends them spends 2 % of its run
    # in the reads; a bigger buffer would save nothing.
    parsed = by_type("strace-reads-recv1.txt")
    [cheap] = tiny_reads.check(jobs.context(_job_with_reads(parsed, read_s=0.008)))
    assert cheap.severity == "low" and "too little to be worth a larger buffer" in cheap.detail
    [unmeasured] = tiny_reads.check(jobs.context(_job_with_reads(parsed, read_s=None)))
    assert unmeasured.severity == "low" and "not measured" in unmeasured.detail
    assert "accounts_s" not in unmeasured.metrics.stored()


def test_large_socket_reads_are_no_finding():
    parsed = by_type("strace-reads-recv65536.txt")
    assert parsed["socket"]["median_bytes"] > 1000
    assert tiny_reads.check(jobs.context(_job_with_reads(parsed))) == []


def test_a_few_large_reads_do_not_hide_many_tiny_ones():
    parsed = by_type("strace-reads-recv1.txt")
    socket = parsed["socket"]
    # Add reads that carry most of the bytes: the mean grows past any threshold, the
    # typical read stays 1 byte.
    socket["reads_with_data"] += 10
    socket["bytes"] += 10 * 1_000_000
    socket["mean_bytes"] = socket["bytes"] / socket["reads_with_data"]
    assert socket["mean_bytes"] > 512
    [finding] = tiny_reads.check(jobs.context(_job_with_reads(parsed)))
    assert finding.metrics.stored()["median_bytes"] == 1


def test_without_reads_evidence_the_proc_io_mean_is_only_a_pointer():
    built = jobs.job()
    for run in jobs.timing_runs(built.configs[0], [0.5, 0.5, 0.5]):
        run.read_syscalls, run.read_bytes = 60_000, 70_000
    [finding] = tiny_reads.check(jobs.context(built))
    assert finding.severity == "low"
    assert "60000 read syscalls" in finding.detail
