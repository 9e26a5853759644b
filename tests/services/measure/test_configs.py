import pytest

from services.errors import BadInput
from services.measure.configs import default_matrix, format_cpulist, parse_cpulist, parse_spec, parse_specs

TWO = (0, 1)


@pytest.mark.parametrize(
    "spec, cpus, cpuset",
    [
        ("cpuset=0", None, (0,)),
        ("cpuset=0-1", None, (0, 1)),
        ("cpus=0.5", 0.5, None),
        ("cpus=2,cpuset=0-1", 2.0, (0, 1)),
        ("cpuset=0,1,cpus=1", 1.0, (0, 1)),
    ],
)
def test_valid_specs_keep_their_label(spec, cpus, cpuset):
    config = parse_spec(spec, TWO)
    assert (config.label, config.cpus, config.cpuset) == (spec, cpus, cpuset)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("cpuset=5", r"^cpuset=5: CPU 5 does not exist on this machine \(CPUs 0-1\)$"),
        ("cpuset=0-3", "CPU 2-3 does not exist"),
        ("cpus=0", "positive number"),
        ("cpus=-1", "positive number"),
        ("cpus=abc", "not a number"),
        ("cpus=nan", "positive number"),
        ("cpus=3", "more than the 2 CPUs"),
        ("cores=2", "unknown key 'cores'"),
        ("cpuset=a", "not a CPU number"),
        ("cpuset=1-0", "not a valid range"),
        ("cpus", "not key=value"),
        ("cpus=1,cpus=2", "given twice"),
        ("", "empty --config"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, message):
    with pytest.raises(BadInput, match=message):
        parse_spec(spec, TWO)


def test_the_same_configuration_twice_is_refused():
    with pytest.raises(BadInput, match="more than once"):
        parse_specs(["cpuset=0", "cpuset=0"], TWO)


def test_cpulists_round_trip():
    assert parse_cpulist("0,2-4,7") == (0, 2, 3, 4, 7)
    assert format_cpulist((0, 2, 3, 4, 7)) == "0,2-4,7"


def test_default_matrix_is_one_core_all_cores_and_half_a_core():
    assert [c.label for c in default_matrix(TWO, quota_supported=True)] == ["cpuset=0", "cpuset=0-1", "cpus=0.5"]
    assert [c.label for c in default_matrix(TWO, quota_supported=False)] == ["cpuset=0", "cpuset=0-1"]
    assert [c.label for c in default_matrix((3,), quota_supported=True)] == ["cpuset=3", "cpus=0.5"]
