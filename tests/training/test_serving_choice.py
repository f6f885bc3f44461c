"""The choice of the served uncertainty option (training.evaluation.serving_choice) on constructed draws.

Every option here has the same mean logits; they differ only in *which* eyes their draws disagree on. An
option whose MI is high on the eyes the mean prediction gets wrong must be chosen over one whose MI is high
on a random subset; when no option's MI beats random referral, the cheaper option of equal merit is served
and the choice says MI earned nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from training.evaluation.serving_choice import ONE_VIEW, TEST_TIME_FLIP, choose_serving_option

N, S = 800, 64


def _draws(spread_on: np.ndarray, mean_logit: np.ndarray, seed: int) -> np.ndarray:
    """[S, N] probabilities: logit draws around ``mean_logit``, wide (sd 3) on ``spread_on``, tight elsewhere."""
    rng = np.random.default_rng(seed)
    sd = np.where(spread_on, 3.0, 0.1)
    return 1.0 / (1.0 + np.exp(-(mean_logit + sd * rng.standard_normal((S, N)))))


@pytest.fixture(scope="module")
def eyes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels, mean logits, which eyes the mean logit gets wrong): a fair classifier with 25 % errors."""
    rng = np.random.default_rng(0)
    labels = (rng.random(N) < 0.25).astype(np.int64)
    wrong = rng.random(N) < 0.25
    mean_logit = np.where(labels == 1, 1.5, -1.5) * np.where(wrong, -1.0, 1.0) + 0.3 * rng.standard_normal(N)
    return labels, mean_logit, wrong


def test_the_option_whose_mi_flags_the_errors_is_served(eyes: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    labels, mean_logit, wrong = eyes
    random_subset = np.random.default_rng(1).random(N) < 0.25
    choice = choose_serving_option({ONE_VIEW: (_draws(random_subset, mean_logit, 2), 1.0),
                                    TEST_TIME_FLIP: (_draws(wrong, mean_logit, 3), 2.0)}, labels, n_bootstrap=100)
    assert choice.chosen == TEST_TIME_FLIP and choice.earns_keep  # chosen although it costs twice as much
    flagged, blind = choice.row(TEST_TIME_FLIP), choice.row(ONE_VIEW)
    assert all(lo > 0 for lo in flagged.ci_low)  # MI referral beats random at 10, 20 and 30 %, interval above 0
    assert not blind.earns_keep and min(blind.ci_low) < 0 < max(blind.ci_high)
    assert flagged.mean_kept_auc > blind.mean_kept_auc + 0.05
    assert flagged.kept_auc[-1] > flagged.auc  # referring by MI raised the AUC of the eyes kept
    # deferring the eyes its MI flags lets the screening rule answer more non-referable eyes automatically
    assert flagged.auto_negative_share > flagged.auto_negative_share_no_deferral
    assert "**test-time flip**" in choice.sentence() and "beats random referral at every share" in choice.sentence()


def test_when_no_mi_beats_random_the_cheaper_equal_option_is_served_and_the_card_says_so(
        eyes: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    labels, mean_logit, _ = eyes
    subset = np.random.default_rng(4).random(N) < 0.25
    same = _draws(subset, mean_logit, 5)
    # identical draws, the dearer option listed first: the tie goes to the cheaper one, not to the first listed
    choice = choose_serving_option({TEST_TIME_FLIP: (same, 2.0), ONE_VIEW: (same, 1.0)}, labels, n_bootstrap=100)
    assert choice.chosen == ONE_VIEW and not choice.earns_keep
    assert choice.row(ONE_VIEW).mi_minus_random == choice.row(TEST_TIME_FLIP).mi_minus_random
    assert "none of the options" in choice.sentence()
    record = choice.as_dict()
    assert record["chosen"] == ONE_VIEW and {r["name"] for r in record["rows"]} == {ONE_VIEW, TEST_TIME_FLIP}


def test_options_must_score_the_same_eyes(eyes: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    labels, mean_logit, wrong = eyes
    with pytest.raises(ValueError, match="draws for 799 eyes, labels for 800"):
        choose_serving_option({ONE_VIEW: (_draws(wrong, mean_logit, 6)[:, 1:], 1.0)}, labels)
    with pytest.raises(ValueError, match="no serving option"):
        choose_serving_option({}, labels)


def test_the_card_says_in_words_when_mi_defers_nothing() -> None:
    from training.model_card import operating_point_lines

    op = {"max_missed_share": 0.03, "decision_threshold": 0.061, "referral_threshold_mi": float(np.log(2)),
          "n_referable": 200, "n_non_referable": 878, "missed_share": 0.03, "missed_share_upper95": 0.058,
          "auto_negative_share": 0.264, "uncertain_share": 0.0, "referred_share": 0.779}
    off = " ".join(operating_point_lines(op, None))
    assert "**nothing is deferred as uncertain**" in off and "MI > 0.693" not in off
    on = " ".join(operating_point_lines({**op, "referral_threshold_mi": 1e-3, "uncertain_share": 0.2}, None))
    assert "MI > 0.001 nat defers." in on and "nothing is deferred" not in on
