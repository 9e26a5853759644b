"""The dashboard's wording of advice that services/ words for the CLI.

A job's notes (services/measure/drill.py) and a diagnosis's advice (services/diagnose/
diagnoses.py) are stored once and read both by ``lagtrace`` (which prints them as they
are) and by these pages, where no flag can be passed: here they name the New job form's
Evidence options instead (web/templates/new_job.html; the rerun form sets no probes).
tests/web/test_pages.py shows a note and an advice both ways.
"""

from __future__ import annotations

import re

NEW_JOB = "the New job page"
# "pass --evidence" with no probe named: any probe the form offers will do.
_PASS = re.compile(r"\bpass --evidence\b")
# "rerun with --evidence a,b" and, after it, "--stall-after": the probes to tick and the snapshot time to set.
_RERUN = re.compile(r"\b([Rr])erun with --evidence ([\w,]+)( --stall-after)?")


def _probes(names: str) -> str:
    listed = [name for name in names.split(",") if name]
    return listed[0] if len(listed) == 1 else f"{', '.join(listed[:-1])} and {listed[-1]}"


def _rerun(found: re.Match[str]) -> str:
    submit = "Submit" if found.group(1) == "R" else "submit"
    said = f"{submit} it again from {NEW_JOB} with {_probes(found.group(2))} ticked under Evidence"
    if found.group(3):
        said += " and its snapshot time (seconds a run has run) set"
    return said


def on_dashboard(text: str | None) -> str:
    """``text`` with the CLI's ``--evidence`` advice said as what to do on the dashboard."""
    if not text:
        return text or ""
    return _PASS.sub(f"choose probes under Evidence on {NEW_JOB}", _RERUN.sub(_rerun, text))
