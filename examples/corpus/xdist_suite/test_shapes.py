import pytest
from shapes import collatz_longest, edit_distance, primes


@pytest.mark.parametrize("limit", [20_000, 40_000, 60_000, 80_000, 100_000, 120_000, 140_000, 160_000])
def test_primes(limit):
    found = primes(limit)
    assert found[:5] == [2, 3, 5, 7, 11] and all(p <= limit for p in found)


@pytest.mark.parametrize("limit", [2_000, 3_000, 4_000, 5_000, 6_000, 7_000, 8_000, 9_000])
def test_collatz(limit):
    assert 1 <= collatz_longest(limit) < limit


@pytest.mark.parametrize("size", [100, 140, 180, 220, 260, 300, 340, 380])
def test_edit_distance(size):
    a = "kitten" * (size // 6)
    b = "sitting" * (size // 7)
    assert 0 < edit_distance(a, b) <= max(len(a), len(b))


def test_release_notes_mention_the_version():
    # The suite's one genuinely failing test: unrelated to any other test's latency.
    assert "2.1" in "release 2.0"
