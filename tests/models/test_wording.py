"""models.outcome.wording: the words of one photograph's result say what the numbers say, and no more."""

from __future__ import annotations

import math

import pytest

from models.outcome.decision import OUTCOME_TEXT, ScreeningOutcome, screening_outcome
from models.outcome.wording import percent, probability_words, result_words, uncertainty_words

T, MI_T = 0.0558, 0.0028  # model 2.0.0's thresholds: realistic values, fixed here so the words are


def words_for(p: float, mi: float, *, gradable: bool = True, issues: tuple[str, ...] = ()) -> tuple[str, ...]:
    outcome = screening_outcome(gradable=gradable, mutual_information=mi, probability=p,
                                referral_threshold_mi=MI_T, decision_threshold=T)
    w = result_words(outcome=outcome, probability=p, decision_threshold=T, mutual_information=mi,
                     referral_threshold_mi=MI_T, quality_issues=issues)
    return outcome.value, w.outcome, w.probability, w.uncertainty, w.reason


def test_a_referral_near_the_threshold_is_set_beside_it_and_never_called_likely() -> None:
    outcome, _, prob, unc, reason = words_for(0.081, 4e-4)
    assert outcome == "refer_referable_dr"
    assert prob == "8.1 % — above the referral threshold of 5.6 %"
    assert "likely" not in reason and "confident" not in reason
    assert unc.startswith("low: 0.0004 nat, at or below the grader-review threshold of 0.0028 nat")
    assert reason.startswith(OUTCOME_TEXT[ScreeningOutcome.REFER_REFERABLE_DR]) and prob in reason


def test_likely_only_at_an_even_chance_or_more() -> None:
    assert probability_words(0.93, T) == "93.0 % — above the referral threshold of 5.6 %; referable DR likely"
    assert probability_words(0.4999, T).endswith("threshold of 5.6 %")
    assert probability_words(0.9999987, T).startswith("> 99.9 %")


def test_a_healthy_eye_reads_below_the_threshold() -> None:
    outcome, _, prob, _, reason = words_for(0.012, 1e-5)
    assert outcome == "no_referable_dr"
    assert prob == "1.2 % — below the referral threshold of 5.6 %" and "likely" not in reason


def test_numbers_that_round_alike_get_more_digits() -> None:
    assert probability_words(0.0556, T) == "5.56 % — below the referral threshold of 5.58 %"
    assert probability_words(T, T) == "5.6 % — at the referral threshold of 5.6 %"


def test_an_uncertain_eye_is_an_estimate_and_high() -> None:
    outcome, head, prob, unc, reason = words_for(0.3, 0.01)
    assert outcome == "grader_review_uncertain" and head == OUTCOME_TEXT[ScreeningOutcome.GRADER_REVIEW_UNCERTAIN]
    assert prob == "30.0 % — the model's uncertain estimate, not a finding (a grader decides)"
    assert unc == "high: 0.01 nat, above the grader-review threshold of 0.0028 nat"
    assert "likely" not in reason and "threshold of 5.6" not in reason


def test_a_retake_names_its_failed_checks_and_no_number() -> None:
    outcome, head, prob, _, reason = words_for(0.7, 1e-5, gradable=False, issues=("too_dark", "obstructed"))
    assert outcome == "retake_ungradable"
    assert head.endswith("— too dark; partly covered (eyelid or eyelash shadow)")
    assert prob.startswith("not graded") and "%" not in reason
    w = result_words(outcome=ScreeningOutcome.RETAKE_UNGRADABLE, probability=0.7, decision_threshold=T,
                     mutual_information=0.0, referral_threshold_mi=MI_T, quality_issues=("blurred",))
    assert w.retake_reason == "blurred or out of focus" and w.to_dict()["retake_reason"] == w.retake_reason


def test_an_operating_point_without_deferral_says_so() -> None:
    assert "sends no image to a grader" in uncertainty_words(0.2, math.log(2))


@pytest.mark.parametrize(("value", "text"), [(0.081, "8.1 %"), (1.0, "100.0 %"), (0.0, "0.0 %"), (4e-4, "< 0.1 %")])
def test_percent(value: float, text: str) -> None:
    assert percent(value) == text


def test_the_training_summary_is_one_line_naming_each_source() -> None:
    import json
    from pathlib import Path

    from models.outcome.wording import training_summary

    config = json.loads((Path(__file__).resolve().parents[2] / "models" / "default" / "config.json").read_text())
    assert len(config["training_data"]) > 500  # the paragraph the page used to repeat four times
    assert training_summary(config["training_data"]) == "real: EyePACS (716 eyes), ODIR-5K (5389 eyes)"
    assert training_summary("synthetic") == "synthetic"
