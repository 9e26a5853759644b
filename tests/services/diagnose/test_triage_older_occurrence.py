"""A triage decision is the problem's: muting any occurrence carries to the next job.

The bug: muting an older occurrence (job 1's finding, while job 2 already had the same
problem) did not carry to job 3, since job 3 takes its triage from the latest occurrence.
"""

from __future__ import annotations

from services.diagnose import triage
from services.models import TriageStatus
from tests.support.findings import the_finding, waiting_job


def test_muting_an_older_occurrence_carries_to_the_next_job(db_session):
    first = the_finding(db_session, waiting_job(db_session))
    second = the_finding(db_session, waiting_job(db_session))
    assert first.fingerprint == second.fingerprint and second.status is TriageStatus.new

    triage.triage(db_session, first, "ana", status="muted", note="known: the fixture sleeps", fields={"status", "note"})
    assert second.status is TriageStatus.muted and second.note == "known: the fixture sleeps"

    third = the_finding(db_session, waiting_job(db_session))
    assert third.status is TriageStatus.muted and third.note == "known: the fixture sleeps"


def test_a_decision_stays_in_its_project(db_session):
    ours = the_finding(db_session, waiting_job(db_session, "octo/demo"))
    theirs = the_finding(db_session, waiting_job(db_session, "other/project"))
    triage.triage(db_session, ours, "ana", status="acknowledged", fields={"status"})
    assert ours.status is TriageStatus.acknowledged and theirs.status is TriageStatus.new
