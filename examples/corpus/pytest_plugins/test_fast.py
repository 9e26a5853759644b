"""Ten fast tests in an environment with many pytest plugins installed.

pytest imports every installed plugin's entry point at start-up (autoload), so the
suite's milliseconds of work sit behind a second of imports; the healthy twin runs the
same suite with only pytest installed.
"""

import pytest


@pytest.mark.parametrize("n", range(10))
def test_square(n):
    assert n * n == n**2
