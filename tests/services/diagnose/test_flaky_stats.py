from services.diagnose.latency_flaky import dispersed, modes
from services.thresholds import Thresholds

LIMITS = Thresholds()


def test_two_groups_are_found_with_their_members():
    fast, slow = modes([0.10, 0.11, 0.50, 0.10, 0.52, 0.12], LIMITS)
    assert fast == [0.10, 0.10, 0.11, 0.12] and slow == [0.50, 0.52]


def test_a_single_outlier_is_not_a_mode():
    assert modes([0.10, 0.11, 0.10, 0.12, 0.90], LIMITS) is None


def test_groups_too_close_in_absolute_terms_are_noise():
    # 3x apart, but only 4 ms: not worth a finding
    assert modes([0.002, 0.002, 0.006, 0.002, 0.006, 0.002], LIMITS) is None


def test_steady_samples_are_neither_multimodal_nor_dispersed():
    steady = [0.31, 0.30, 0.32, 0.31, 0.30]
    assert modes(steady, LIMITS) is None
    assert not dispersed(steady, LIMITS)


def test_wide_scatter_is_dispersed():
    assert dispersed([0.1, 0.3, 0.5, 0.7, 0.9, 0.2, 0.6], LIMITS)
