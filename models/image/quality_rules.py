"""A quality-gate threshold and how a refusal explains itself (``models.image.quality`` applies them).

A ``Rule`` says what a gradable photograph satisfies (``measure >= threshold`` or ``<=``) and scores a value
(0.5 exactly at the threshold, a logistic of the margin); a ``Finding`` is a rule a photograph missed: the
issue, the measure, its value and the threshold, as the API's ``quality.details``, the clinician page and the
batch output's ``quality_details`` show it.

Example::

    rule = Rule("blurred", "sharpness", 1.45, ">=", 0.15)
    if not rule.holds(1.21):
        print(Finding(rule.issue, rule.measure, 1.21, rule.threshold, rule.relation).message)
        # blurred: sharpness 1.21, needs >= 1.45
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def margin_score(value: float, threshold: float, scale: float, *, higher_is_better: bool = True) -> float:
    """Logistic of (value - threshold) / scale: 0.5 at the threshold, -> 1 on the good side."""
    z = (value - threshold) / scale if higher_is_better else (threshold - value) / scale
    return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))


@dataclass(frozen=True)
class Rule:
    """One threshold: ``measure`` must be ``>=`` (or ``<=``) ``threshold``; ``scale`` spreads its score."""

    issue: str
    measure: str
    threshold: float
    relation: str  # ">=" or "<=": what a gradable photograph satisfies
    scale: float

    def holds(self, value: float) -> bool:
        return value >= self.threshold if self.relation == ">=" else value <= self.threshold

    def score(self, value: float) -> float:
        return margin_score(value, self.threshold, self.scale, higher_is_better=self.relation == ">=")


@dataclass(frozen=True)
class Finding:
    """Why a photograph was refused: the issue, the measure, its value and the threshold it missed."""

    issue: str
    measure: str
    value: float
    threshold: float
    relation: str  # what the measure must satisfy: ">=" or "<="
    condition: str = ""  # a second measure the rule applies under (the washed-out rule), in words

    @property
    def message(self) -> str:
        """One line, e.g. ``blurred: sharpness 1.21, needs >= 1.45``."""
        text = f"{self.issue}: {self.measure} {self.value:.3g}, needs {self.relation} {self.threshold:.3g}"
        return f"{text} ({self.condition})" if self.condition else text

    def as_dict(self) -> dict[str, str | float]:
        return {"issue": self.issue, "measure": self.measure, "value": round(self.value, 4),
                "threshold": self.threshold, "relation": self.relation, "message": self.message}
