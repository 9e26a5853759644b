"""The README stays an introduction: short, and every link it gives leads to a file of the
repository (the docs site checks its own links: make docs)."""

from __future__ import annotations

import re

from tests.conftest import REPO

README = REPO / "README.md"


def test_the_readme_is_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200


def test_every_relative_link_of_the_readme_leads_to_a_file_here():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    relative = [link for link in links if "://" not in link]
    assert relative, "the README links into docs/"
    for link in relative:
        target = (REPO / link).resolve()
        assert target.is_relative_to(REPO), f"{link} leads outside the repository"
        assert target.exists(), f"{link} does not exist"
