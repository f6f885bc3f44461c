"""MI referral threshold for a target referral rate (training.evaluation.threshold)."""

from __future__ import annotations

import numpy as np
import pytest

from training.evaluation.threshold import mi_referral_threshold, referral_rate


def test_threshold_refers_the_target_fraction_of_distinct_values() -> None:
    rng = np.random.default_rng(0)
    mi = rng.gamma(2.0, 0.02, size=1000)
    thr = mi_referral_threshold(mi, 0.2)
    assert thr.achieved_rate == pytest.approx(0.2)
    assert thr.n_referred == 200 and thr.n == 1000
    assert thr.threshold == np.sort(mi)[799]  # the 800th smallest: exactly 200 values lie above it
    assert referral_rate(mi, thr.threshold) == pytest.approx(0.2)
    # On fresh data from the same distribution the validation threshold refers about 20 %.
    fresh = rng.gamma(2.0, 0.02, size=20000)
    assert referral_rate(fresh, thr.threshold) == pytest.approx(0.2, abs=0.03)


def test_ties_at_zero_do_not_move_the_threshold_into_the_tie() -> None:
    # 70 % of images have MI exactly 0 (confident), 30 % distinct positive values.
    rng = np.random.default_rng(1)
    mi = np.concatenate([np.zeros(700), rng.uniform(0.01, 0.3, 300)])
    thr = mi_referral_threshold(mi, 0.2)
    assert thr.achieved_rate == pytest.approx(0.2)
    # Target 50 %: only 30 % (threshold 0) or 100 % (below 0) are reachable; 30 % is closer.
    half = mi_referral_threshold(mi, 0.5)
    assert half.threshold == 0.0
    assert half.achieved_rate == pytest.approx(0.3)


def test_equally_close_rates_prefer_referring_more() -> None:
    mi = np.concatenate([np.full(50, 0.1), np.full(50, 0.2)])
    # Reachable rates: 1.0, 0.5 (threshold 0.1), 0.0 (threshold 0.2); 0.5 and 0.0 are both 0.25 away.
    thr = mi_referral_threshold(mi, 0.25)
    assert thr.threshold == pytest.approx(0.1)
    assert thr.achieved_rate == pytest.approx(0.5)


def test_constant_mi_and_extreme_targets() -> None:
    zeros = np.zeros(100)  # a deterministic model: nothing to rank by
    thr = mi_referral_threshold(zeros, 0.2)
    assert thr.achieved_rate == 0.0 and thr.threshold == 0.0
    mi = np.linspace(0.0, 0.1, 11)
    assert mi_referral_threshold(mi, 0.0).threshold == pytest.approx(0.1)
    everything = mi_referral_threshold(mi, 1.0)
    assert everything.achieved_rate == 1.0 and everything.threshold < 0.0
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        mi_referral_threshold(mi, 1.2)
    with pytest.raises(ValueError, match="at least one"):
        mi_referral_threshold(np.array([]), 0.2)
