"""Paired bootstrap of referral differences: exact zeros for identical rankings, coverage of a known gap."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from training.evaluation import evaluate_predictions, paired_bootstrap
from training.evaluation.paired import ReferralArm


def test_identical_rankings_differ_by_exactly_zero_on_every_resample() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    p = np.clip(0.5 + 0.3 * (y - 0.5) + 0.2 * rng.standard_normal(300), 0.01, 0.99)
    mi = rng.random(300)
    # 3·MI + 1 ranks exactly as MI: a paired difference is 0 on every resample (unpaired SEs would not be).
    res = paired_bootstrap(ReferralArm("a", p, mi), ReferralArm("b", p, 3 * mi + 1), y, fractions=(0.0, 0.2, 0.4),
                           n_bootstrap=50, seed=1)
    for d in res.values():
        assert d.difference == (0.0, 0.0, 0.0)
        assert d.ci_low == d.ci_high == (0.0, 0.0, 0.0)
        assert d.n_bootstrap_used == (50, 50, 50)


def test_method_minus_method_interval_covers_the_binormal_auc_gap() -> None:
    """Scores N(d·y, 1): AUC = Φ(d/√2). Two methods with d = 2 and d = 1 differ by Φ(√2) − Φ(1/√2) = 0.1612."""
    rng = np.random.default_rng(42)
    n = 3000
    y = rng.integers(0, 2, n)
    noise = rng.standard_normal((2, n))
    score_a, score_b = 2.0 * y + noise[0], 1.0 * y + noise[1]
    expected = norm.cdf(2 / np.sqrt(2)) - norm.cdf(1 / np.sqrt(2))
    res = paired_bootstrap(ReferralArm("a", 1 / (1 + np.exp(-score_a)), None),
                           ReferralArm("b", 1 / (1 + np.exp(-score_b)), None), y, fractions=(0.0,),
                           n_bootstrap=300, seed=3)["auc"]
    assert res.difference[0] == pytest.approx(expected, abs=0.03)
    assert res.ci_low[0] < expected < res.ci_high[0]
    # The 95 % interval is about ±1.96 SE; SE of this AUC difference at n = 3000 is ≈ 0.009.
    assert 0.02 < res.ci_high[0] - res.ci_low[0] < 0.06


def test_report_holds_mi_minus_random_and_mi_minus_entropy() -> None:
    rng = np.random.default_rng(5)
    n = 400
    y = rng.integers(0, 2, n)
    # MI is high exactly where the prediction is wrong: referring by MI must beat random referral.
    wrong = rng.random(n) < 0.2
    centre = np.where(wrong, 1 - y, y) * 0.6 + 0.2
    spread = np.where(wrong, 0.15, 0.01)
    probs = np.clip(centre + spread * rng.standard_normal((16, n)), 0.001, 0.999)  # [S, N]
    report = evaluate_predictions(probs, y, n_bootstrap=60, seed=0)
    diffs = {(d.a, d.b, d.metric): d for d in report.paired_differences}
    acc = diffs[("mutual_information", "random", "accuracy")]
    assert acc.fractions == (0.0, 0.1, 0.2, 0.3, 0.5)
    assert acc.difference[0] == 0.0  # nothing referred: both keep every image
    assert acc.difference[2] > 0.1 and acc.ci_low[2] > 0
    assert ("mutual_information", "predictive_entropy", "auc") in diffs
    again = type(report).from_dict(report.to_dict())
    assert again.paired_differences == report.paired_differences
