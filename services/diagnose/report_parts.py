"""The parts of the ``lagtrace.report/v1`` models the diagnose layer builds and reads: a
report's findings and its diagnoses (services/diagnose/diagnoses.py). The whole report
is assembled in services/jobs/report_schema.py, which publishes the JSON Schema of all
of them (tests/unit/services/jobs/test_report_schema.py compares it with the file)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, WithJsonSchema

from services.diagnose.findings import Severity

# A JSON number as given: an int stays an int, where ``float`` would turn the 5 of
# min_repetitions into 5.0 and change the JSON the report was serialised to before it
# was a model. Its JSON Schema is still {"type": "number"}.
Number = Annotated[int | float, WithJsonSchema({"type": "number"})]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReportFinding(_Part):
    id: int
    kind: str
    severity: Severity
    title: str
    detail: str
    config: str | None
    test: str | None
    metrics: dict[str, Any]
    evidence: list[int]
    fingerprint: str
    status: Literal["new", "acknowledged", "muted", "fixed"]
    regression: bool


class DiagnosisSymptom(_Part):
    kind: str
    configs: list[str]
    text: str
    ratio: Number | None
    finding: int | None = None


class DiagnosisCause(_Part):
    kind: str
    text: str
    finding: int
    evidence_backed: bool
    from_command: bool  # the cause was found on the whole command, in the test's slow configuration
    # Seconds of the slowdown the cause accounts for, from the slow configuration's evidence
    # against the fast one's, and that comparison in words; None where no pair was compared.
    accounts_s: Number | None = None
    slow_vs_fast: str | None = None


class DiagnosisEvidence(_Part):
    id: int
    kind: str


class Diagnosis(_Part):
    """One test's findings as one story (services/diagnose/diagnoses.py)."""

    test: str | None
    severity: Severity
    symptom: DiagnosisSymptom
    cause: DiagnosisCause | None
    # Why no cause is named where the evidence of both configurations was compared.
    not_established: str | None = None
    # The cause's knob turned (services/measure/confirm.py): the experiment in words,
    # whether it bore the cause out (if not, no cause is named), and its evidence entry.
    # None where the cause has no knob or none was turned.
    knob: str | None = None
    knob_confirmed: bool | None = None
    knob_evidence: int | None = None
    evidence: list[DiagnosisEvidence]
    advice: str
    findings: list[int]
    kinds: list[str]
