"""The signup form's tests, written the way Faker's documentation suggests: Faker's own
pytest plugin hands each test a ``faker`` whose session instance speaks every supported
locale, and pytest-randomly shuffles the order on every run to catch hidden coupling.

Faker's plugin builds that session instance in an autouse fixture, lazily: whichever test
runs first pays for loading six locales' providers in its set-up, and pytest-randomly
changes which test that is on every run. So each test takes either a few milliseconds or
a tenth of a second or more, under the very same conditions.
"""

import re

import pytest
from signup import SUPPORTED_LOCALES, display_name, normalise_email

SIGNUPS = 2000


@pytest.fixture(scope="session", autouse=True)
def faker_session_locale():
    return SUPPORTED_LOCALES


def test_email_domain_is_lowercased(faker):
    address = faker.email()
    assert normalise_email(address.upper()).endswith(address.split("@")[1].lower())


def test_display_name_collapses_spaces(faker):
    name = faker.name()
    assert display_name(f"  {name}  ") == " ".join(name.split())


def test_blank_local_part_is_kept():
    assert normalise_email("  @Example.org") == "@example.org"


def test_username_pattern():
    assert re.fullmatch(r"[a-z][a-z0-9_]{2,15}", "ada_lovelace")


def test_a_day_of_signups(faker):
    # The suite's real work: a day's worth of generated signups through the form.
    for _ in range(SIGNUPS):
        profile = faker.simple_profile()
        assert "@" in normalise_email(profile["mail"])
        assert display_name(profile["name"])
