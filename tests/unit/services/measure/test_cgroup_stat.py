"""cpu.stat as cgroup v1 and v2 write it (throttled time in ns vs us), read into one CpuStat."""

from __future__ import annotations

from pathlib import Path

from services.measure.cgroups import Hierarchy, QuotaGroup


def _group(tmp_path: Path, version: int, text: str) -> QuotaGroup:
    group = QuotaGroup(Hierarchy(version, tmp_path), 0.5)
    group.path.mkdir()
    (group.path / "cpu.stat").write_text(text)
    return group


def test_v1_throttled_time_is_nanoseconds(tmp_path):
    # The shape of a 2 s run under cpus=0.5 (61 of 62 periods throttled, as in the demo).
    stat = _group(tmp_path, 1, "nr_periods 62\nnr_throttled 61\nthrottled_time 3021847512\n").cpu_stat()
    assert (stat.nr_periods, stat.nr_throttled) == (62, 61)
    assert abs(stat.throttled_s - 3.0218) < 1e-3


def test_v2_throttled_usec_is_microseconds(tmp_path):
    text = "usage_usec 1000\nuser_usec 900\nsystem_usec 100\nnr_periods 10\nnr_throttled 4\nthrottled_usec 250000\n"
    stat = _group(tmp_path, 2, text).cpu_stat()
    assert (stat.nr_periods, stat.nr_throttled, stat.throttled_s) == (10, 4, 0.25)
