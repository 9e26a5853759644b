"""A suite whose environment forgot one of its dependencies (humanize): every run fails
at collection, and lagtrace must say so rather than report a healthy suite."""

import humanize
import pytest


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 Bytes"), (1, "1 Byte"), (1000, "1.0 kB"), (1536, "1.5 kB"), (10**6, "1.0 MB"), (3 * 10**9, "3.0 GB")],
)
def test_natural_size(size, text):
    assert humanize.naturalsize(size) == text


def test_binary_size():
    assert humanize.naturalsize(1024, binary=True) == "1.0 KiB"
