"""Every threshold the screen and the rules use, in one place, documented and configurable.

Override any of them through the environment, e.g.
``LAGTRACE_THRESHOLDS__CPU_SENSITIVITY_RATIO=3``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class Thresholds(BaseModel):
    # cpu_sensitivity: slowest vs fastest configuration median ratio that counts as a
    # finding (DESIGN.md section 5: >= 2x with disjoint confidence intervals).
    cpu_sensitivity_ratio: float = Field(2.0, gt=1.0)
    # Ratios from which a cpu_sensitivity finding is medium / high severity.
    severity_medium_ratio: float = Field(4.0, gt=1.0)
    severity_high_ratio: float = Field(10.0, gt=1.0)
    # The screen never stops a configuration before this many repetitions: fewer
    # cannot give an interval at all.
    min_repetitions: int = Field(3, ge=2)
