"""The screening operating point: sensitivity first, then the most non-referable eyes answered automatically."""

from __future__ import annotations

import math

import numpy as np
import pytest

from training.evaluation.operating_point import (
    MAX_MI,
    clopper_pearson_upper,
    outcome_shares,
    screening_operating_point,
)


def test_without_uncertainty_the_threshold_sits_below_the_lowest_referable_eye() -> None:
    # referable eyes at p 0.30, 0.50, 0.90; non-referable at 0.05, 0.10, 0.20, 0.40, 0.60; MI all equal
    p = np.array([0.30, 0.50, 0.90, 0.05, 0.10, 0.20, 0.40, 0.60])
    y = np.array([1, 1, 1, 0, 0, 0, 0, 0])
    op = screening_operating_point(p, np.zeros_like(p), y, max_missed_share=0.0)
    assert op.decision_threshold == pytest.approx(0.30)  # the lowest referable p: none of them is below it
    assert op.referral_threshold_mi == MAX_MI  # nothing deferred: deferring cannot help here
    assert op.missed_share == 0.0
    assert op.auto_negative_share == pytest.approx(3 / 5)  # 0.05, 0.10, 0.20 answered no_referable_dr
    assert op.uncertain_share == 0.0 and op.referred_share == pytest.approx(5 / 8)


def test_one_allowed_miss_moves_the_threshold_to_the_second_referable_eye() -> None:
    p = np.array([0.30, 0.50, 0.90, 0.05, 0.10, 0.20, 0.40, 0.60] * 5)
    y = np.array([1, 1, 1, 0, 0, 0, 0, 0] * 5)
    # 15 referable eyes; 20 % may be missed = 3 eyes: the five at 0.30 cannot all be missed, so t stays 0.30
    op = screening_operating_point(p, np.zeros_like(p), y, max_missed_share=0.2)
    assert op.decision_threshold == pytest.approx(0.30) and op.missed_share == 0.0
    # 40 % = 6 eyes: the five at 0.30 may be missed, the threshold moves to 0.50 and 0.40 is answered too
    op = screening_operating_point(p, np.zeros_like(p), y, max_missed_share=0.4)
    assert op.decision_threshold == pytest.approx(0.50)
    assert op.missed_share == pytest.approx(5 / 15)
    assert op.auto_negative_share == pytest.approx(4 / 5)


def test_deferring_an_uncertain_referable_eye_lets_more_healthy_eyes_through() -> None:
    # one referable eye has a low p but a high MI: deferring it as uncertain raises the decision threshold
    p = np.array([0.02, 0.60, 0.70, 0.05, 0.10, 0.20, 0.30, 0.40, 0.45, 0.50])
    mi = np.array([0.30, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01])
    y = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    op = screening_operating_point(p, mi, y, max_missed_share=0.0)
    assert op.referral_threshold_mi < 0.30  # the uncertain eye is deferred
    assert op.decision_threshold == pytest.approx(0.60)
    assert op.auto_negative_share == 1.0 and op.missed_share == 0.0
    assert op.uncertain_share == pytest.approx(0.1)
    no_defer = outcome_shares(p, mi, y, decision_threshold=0.02, referral_threshold_mi=MAX_MI)
    assert no_defer["auto_negative_share"] == 0.0  # without deferral no healthy eye could be answered


def test_the_chosen_pair_is_the_best_feasible_pair_on_its_grid() -> None:
    rng = np.random.default_rng(7)
    n = 200
    y = (rng.random(n) < 0.25).astype(int)
    p = np.clip(rng.normal(0.25 + 0.4 * y, 0.18), 0.001, 0.999)
    mi = rng.gamma(2.0, 0.002 + 0.004 * (np.abs(p - 0.5) < 0.2), n)
    steps, max_u, max_missed = 50, 0.4, 0.05
    op = screening_operating_point(p, mi, y, max_missed_share=max_missed, max_uncertain_share=max_u, steps=steps)
    achieved = outcome_shares(p, mi, y, decision_threshold=op.decision_threshold,
                              referral_threshold_mi=op.referral_threshold_mi)
    assert achieved["missed_share"] <= max_missed + 1e-12
    best = 0.0
    ms = [MAX_MI] + [float(np.quantile(mi, 1 - k / steps, method="lower")) for k in range(1, int(max_u * steps) + 1)]
    for m in ms:
        for t in [*np.unique(p).tolist(), 1.0]:
            s = outcome_shares(p, mi, y, decision_threshold=t, referral_threshold_mi=m)
            if s["missed_share"] <= max_missed + 1e-12:
                best = max(best, s["auto_negative_share"])
    assert op.auto_negative_share == pytest.approx(best)


def test_clopper_pearson_upper_bound() -> None:
    assert clopper_pearson_upper(0, 59) == pytest.approx(1 - 0.05 ** (1 / 59), rel=1e-9)  # the "rule of three"
    assert clopper_pearson_upper(3, 3) == 1.0
    assert 0.05 < clopper_pearson_upper(5, 176) < 0.07
    assert math.isnan(clopper_pearson_upper(0, 0))


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="referable and non-referable"):
        screening_operating_point([0.1, 0.2], [0.0, 0.0], [0, 0])
    with pytest.raises(ValueError, match="shares"):
        screening_operating_point([0.1, 0.2], [0.0, 0.0], [0, 1], max_missed_share=1.5)
