"""Which evidence runs may use ptrace (Probe.ptrace): the probes whose tool attaches to
the command, and no other; the docker executor grants CAP_SYS_PTRACE from this alone
(tests/security/test_measurement_channel.py)."""

from services.measure.probes import PROBES


def test_the_probes_whose_tool_attaches_are_the_ones_granted_ptrace():
    granted = sorted(name for name, probe in PROBES.items() if probe.ptrace)
    # strace (-c, the read census), py-spy record and the core probe's py-spy/gcore/gdb;
    # faulthandler, the asyncio hook and -X importtime run inside the command itself.
    assert granted == ["core", "pyspy", "reads", "strace"], granted
