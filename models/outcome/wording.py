"""One photograph's result in words, written once: the outcome, the probability against the decision threshold,
and the uncertainty against the grader-review threshold.

Every surface words a result with :func:`result_words` (the API's ``outcome_reason`` and ``words``, FHIR's
conclusion, the DICOM SR's text items, the batch CSV, the single-image and exam pages, which show the words the
service sent); none restates it. What the words promise:

- **The probability is set beside the threshold it was compared with**, never called "likely" on its own: a
  referral at p̄ 8.1 % with a threshold of 5.6 % reads "8.1 % — above the referral threshold of 5.6 %". The
  threshold is set low so that few referable eyes are missed, so most referrals are far below 50 %: "referable
  DR likely" is added only when p̄ is at least 50 %.
- **An uncertain photograph's number is an estimate, not a finding**, never set beside the threshold; an
  ungradable photograph's is not worded at all ("not graded"), and its retake reason names the quality checks
  it failed.
- **The uncertainty has two words**, "low" (mutual information at or below the calibrated grader-review
  threshold) and "high" (above it: a grader decides), the comparison :func:`models.outcome.decision.is_uncertain` makes.
  With a threshold at ln 2 (the operating point defers nothing by uncertainty) it says so. No word claims more
  confidence than the comparison gives ("confident" is never used).

Example::

    words = result_words(outcome=ScreeningOutcome.REFER_REFERABLE_DR, probability=0.081, decision_threshold=0.0558,
                         mutual_information=4e-4, referral_threshold_mi=0.0028)
    words.probability  # "8.1 % — above the referral threshold of 5.6 %"
    words.reason       # "Refer to an eye-care professional: ... 8.1 % — above the referral threshold of 5.6 %; ..."
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from models.outcome.decision import OUTCOME_TEXT, ScreeningOutcome, defers_by_uncertainty, is_uncertain

LIKELY_AT = 0.5  # "referable DR likely" only at or above an even chance

# The quality gate's issues (models.image.quality) in plain words, for a retake reason.
ISSUE_TEXT: dict[str, str] = {
    "no_field_of_view": "no circular field of view found",
    "too_dark": "too dark",
    "overexposed": "overexposed",
    "blurred": "blurred or out of focus",
    "not_fundus": "does not look like a fundus photograph",
    "obstructed": "partly covered (eyelid or eyelash shadow)",
    "compression_artifacts": "heavy compression artefacts (re-send the original photograph)",
}


@dataclass(frozen=True)
class ResultWords:
    """One photograph's result in words; :attr:`reason` is the one line (the API's ``outcome_reason``)."""

    outcome: str  # what to do, e.g. "Retake the photograph: the image cannot be graded — too dark"
    probability: str  # "8.1 % — above the referral threshold of 5.6 %", "not graded", or an uncertain estimate
    uncertainty: str  # "low: 0.0004 nat, at or below the grader-review threshold of 0.0028 nat"
    reason: str
    retake_reason: str = ""  # why a retake: the failed quality checks in words ("" unless retake_ungradable)

    def to_dict(self) -> dict[str, str]:
        """The API's ``words`` object: outcome, probability, uncertainty and retake reason (the one line is
        ``outcome_reason``)."""
        return {k: v for k, v in asdict(self).items() if k != "reason"}


def percent(value: float, *, decimals: int = 1) -> str:
    """A probability in percent with its unit: "8.1 %", "> 99.9 %", "< 0.1 %"."""
    share = 100.0 * value
    top = 100.0 - 10.0 ** -decimals
    if share > top and value < 1.0:
        return f"> {top:.{decimals}f} %"
    if 0.0 < share < 10.0 ** -decimals:
        return f"< {10.0 ** -decimals:.{decimals}f} %"
    return f"{share:.{decimals}f} %"


def _distinct(probability: float, threshold: float) -> tuple[str, str]:
    """Both in percent, with as many decimals as it takes for unequal numbers to read unequal (at most 3)."""
    for decimals in (1, 2, 3):
        p, t = percent(probability, decimals=decimals), percent(threshold, decimals=decimals)
        if p != t or probability == threshold:
            break
    return p, t


def nats(value: float) -> str:
    """Mutual information in nats, three significant digits at every scale: "0.0028 nat", "1.01e-06 nat"."""
    return f"{value:.3g} nat"


def probability_words(probability: float, decision_threshold: float) -> str:
    """The probability beside the referral (decision) threshold: "8.1 % — above the referral threshold of 5.6 %"."""
    p, t = _distinct(probability, decision_threshold)
    relation = ("above" if probability > decision_threshold else "at" if probability == decision_threshold
                else "below")
    text = f"{p} — {relation} the referral threshold of {t}"
    return f"{text}; referable DR likely" if probability >= LIKELY_AT else text


def uncertainty_words(mutual_information: float, referral_threshold_mi: float) -> str:
    """The uncertainty beside the grader-review threshold, in the two words the decision uses."""
    if not defers_by_uncertainty(referral_threshold_mi):
        return f"{nats(mutual_information)} (this model's operating point sends no image to a grader by uncertainty)"
    if is_uncertain(mutual_information, referral_threshold_mi):
        return f"high: {nats(mutual_information)}, above the grader-review threshold of {nats(referral_threshold_mi)}"
    return f"low: {nats(mutual_information)}, at or below the grader-review threshold of {nats(referral_threshold_mi)}"


def retake_reason(issues: Sequence[str]) -> str:
    """Why a photograph must be retaken, from its quality issues: "too dark; blurred or out of focus"."""
    return "; ".join(ISSUE_TEXT.get(issue, issue.replace("_", " ")) for issue in issues)


def result_words(*, outcome: ScreeningOutcome, probability: float, decision_threshold: float,
                 mutual_information: float, referral_threshold_mi: float,
                 quality_issues: Sequence[str] = ()) -> ResultWords:
    """One photograph's result in words (module docstring): the outcome its decision gave, and its numbers."""
    unc = uncertainty_words(mutual_information, referral_threshold_mi)
    head = OUTCOME_TEXT[outcome]
    if outcome is ScreeningOutcome.RETAKE_UNGRADABLE:
        why = retake_reason(quality_issues)
        text = f"{head} — {why}" if why else head
        return ResultWords(outcome=text, probability="not graded (the image cannot be graded)", uncertainty=unc,
                           reason=f"{text}.", retake_reason=why)
    if outcome is ScreeningOutcome.GRADER_REVIEW_UNCERTAIN:
        # never beside the threshold: a reader could take "40 % > 5.6 %" for a referral
        prob = f"{percent(probability)} — the model's uncertain estimate, not a finding (a grader decides)"
    else:
        prob = probability_words(probability, decision_threshold)
    return ResultWords(outcome=head, probability=prob, uncertainty=unc,
                       reason=f"{head}. Probability {prob}; uncertainty {unc}.")


def training_summary(training_data: str) -> str:
    """The model's training data in one line, from the artifact's ``training_data`` paragraph: its kind and each
    source with its eye count, e.g. "real: EyePACS (716 eyes), ODIR-5K (5389 eyes)". A text without that
    structure ("synthetic") is returned as it is, cut at 120 characters."""
    kind, sep, rest = training_data.partition(": ")
    if not sep or " " in kind:
        kind, rest = "", training_data
    segments, depth, start = [], 0, 0
    for i, ch in enumerate(rest):  # the sources are separated by "; " outside parentheses
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ";" and depth == 0:
            segments.append(rest[start:i])
            start = i + 1
    segments.append(rest[start:])
    sources = []
    for segment in segments:
        counts = re.findall(r"(\d[\d,]*) eyes\b", segment)
        name = re.split(r" \(|\. ", segment.strip(), maxsplit=1)[0]
        if counts and name and len(name) <= 40:
            sources.append(f"{name} ({counts[-1]} eyes)")
    if not sources:
        return training_data if len(training_data) <= 120 else training_data[:119] + "…"
    return f"{kind}: {', '.join(sources)}" if kind else ", ".join(sources)
