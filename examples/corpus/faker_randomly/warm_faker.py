"""The fix, as a plugin that replaces Faker's (``-p no:faker -p warm_faker``): build the
session's Faker instance when the plugin loads, before collection, instead of in the
set-up of whichever test runs first.

Warming Faker up is not enough: a second instance for the same six locales still costs
60 ms here (the providers' modules are cached, building their objects is not), so the
one instance the tests share must be the one built early. The ``faker`` fixture below
does what Faker's own does (seeded by pytest-randomly, unique values cleared per test).
"""

import pytest
from faker import Faker
from signup import SUPPORTED_LOCALES

FAKER = Faker(SUPPORTED_LOCALES)


@pytest.fixture()
def faker(faker_seed):
    FAKER.seed_instance(seed=faker_seed)
    FAKER.unique.clear()
    return FAKER
