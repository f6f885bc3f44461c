"""Referral curves: hand-computable cases and bootstrap statistics (training.evaluation.referral)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from training.evaluation.referral import (
    STRATEGIES,
    check_fractions,
    mann_whitney_auc,
    n_referred,
    referral_curve,
)
from training.evaluation.uncertainty import McUncertainty, mc_uncertainty


def _toy(n: int, seed: int, s: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """A model whose hard images have both wrong-leaning means and a wide MC spread (errors at high MI)."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int64)
    d = rng.random(n)  # difficulty
    z = (2 * y - 1) * (3.5 * (1 - d) - 0.3) + rng.normal(0, 0.8, n)
    logits = z[None] + (0.15 + 2.0 * d**2)[None] * rng.normal(size=(s, n))  # [S, N]
    return 1 / (1 + np.exp(-logits)), y


def _unc(p: np.ndarray, mi: np.ndarray) -> McUncertainty:
    """Uncertainty record with chosen p̄ and MI (predictive entropy set equal to MI for simplicity)."""
    return McUncertainty(probability=p, predictive_entropy=mi, expected_entropy=np.zeros_like(p),
                         mutual_information=mi)


def test_perfect_classifier_has_auc_one_at_every_fraction() -> None:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 300)
    p = np.where(y == 1, rng.uniform(0.6, 1.0, 300), rng.uniform(0.0, 0.4, 300))
    unc = _unc(p, rng.random(300))
    for strategy in STRATEGIES:
        curve = referral_curve(unc, y, strategy, n_bootstrap=20, seed=0)
        assert curve.auc == pytest.approx((1.0,) * len(curve.fractions))
        assert curve.accuracy == pytest.approx((1.0,) * len(curve.fractions))
        assert curve.auc_se == pytest.approx((0.0,) * len(curve.fractions))


def test_referral_by_mi_removes_errors_that_have_the_highest_mi() -> None:
    # 100 images, the 20 misclassified ones carry the 20 highest (distinct) MI values.
    n = 100
    y = np.tile([0, 1], n // 2)
    wrong = np.zeros(n, dtype=bool)
    wrong[np.arange(0, n, 5)] = True  # 20 errors spread over both classes
    assert wrong.sum() == 20
    p = np.where((y == 1) ^ wrong, 0.8, 0.2)  # predicted class is wrong exactly where `wrong`
    mi = np.where(wrong, 0.3 + np.arange(n) / 1000, np.arange(n) / 1000)
    curve = referral_curve(_unc(p, mi), y, "mutual_information", n_bootstrap=0, seed=0)
    acc = dict(zip(curve.fractions, curve.accuracy, strict=True))
    assert acc[0.0] == pytest.approx(0.8)
    assert acc[0.1] == pytest.approx(80 / 90)  # 10 of 20 errors referred, 10 left among 90
    assert acc[0.15] == pytest.approx(80 / 85)
    assert acc[0.2] == pytest.approx(1.0)  # all 20 errors referred
    assert acc[0.5] == pytest.approx(1.0)
    assert np.all(np.diff(curve.accuracy) >= 0)


def test_random_referral_leaves_auc_unchanged_on_average() -> None:
    mc, y = _toy(1500, seed=2)
    unc = mc_uncertainty(mc)
    full_auc = roc_auc_score(y, unc.probability)
    rnd = referral_curve(unc, y, "random", n_bootstrap=0, seed=3, n_random_orders=40)
    assert rnd.auc[0] == pytest.approx(full_auc)
    assert np.max(np.abs(np.asarray(rnd.auc) - full_auc)) < 0.006
    mi_curve = referral_curve(unc, y, "mutual_information", n_bootstrap=0, seed=3)
    assert mi_curve.auc[6] > rnd.auc[6] + 0.02  # 30 % referred by MI beats random on this toy model


def test_bootstrap_se_matches_binomial_and_shrinks_with_n() -> None:
    se_by_n = {}
    for n in (250, 4000):
        mc, y = _toy(n, seed=4)
        unc = mc_uncertainty(mc)
        curve = referral_curve(unc, y, "mutual_information", fractions=(0.0, 0.2), n_bootstrap=200, seed=5)
        acc = curve.accuracy[0]
        # At 0 % referred the bootstrap SE of accuracy estimates the binomial SE sqrt(a(1 - a) / N).
        assert curve.accuracy_se[0] == pytest.approx(np.sqrt(acc * (1 - acc) / n), rel=0.2)
        se_by_n[n] = curve.auc_se[0]
    ratio = se_by_n[250] / se_by_n[4000]
    assert 2.5 < ratio < 6.0  # SE ~ 1/sqrt(N): sqrt(16) = 4


def test_single_class_resamples_are_skipped_and_counted() -> None:
    # One positive among six: a resample contains it with probability 1 - (5/6)^6 ≈ 0.665.
    y = np.array([1, 0, 0, 0, 0, 0])
    p = np.array([0.9, 0.1, 0.2, 0.3, 0.4, 0.6])
    curve = referral_curve(_unc(p, p.copy()), y, "mutual_information", fractions=(0.0,),
                           n_bootstrap=400, seed=6)
    expected = 400 * (1 - (5 / 6) ** 6)
    assert abs(curve.n_bootstrap_used[0] - expected) < 4 * np.sqrt(400 * 0.665 * 0.335)
    assert curve.auc == (1.0,)
    assert curve.auc_se[0] == pytest.approx(0.0)  # every usable resample still ranks perfectly
    assert curve.n_bootstrap == 400


def test_single_class_retained_set_gives_nan_auc() -> None:
    y = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0])
    p = np.array([0.9, 0.8, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45])
    mi = np.where(y == 1, 0.5, 0.01)  # the positives are the most uncertain
    curve = referral_curve(_unc(p, mi), y, "mutual_information", fractions=(0.0, 0.2), n_bootstrap=0)
    assert np.isfinite(curve.auc[0])
    assert np.isnan(curve.auc[1])
    assert curve.accuracy[1] == pytest.approx(1.0)  # retained: 8 negatives, all with p < 0.5
    assert curve.n_retained == (10, 8)


def test_ties_in_uncertainty_are_not_broken_by_array_position() -> None:
    # A deterministic model (S = 1) has MI = 0 everywhere; the first half of the array is all errors.
    n = 400
    y = np.zeros(n, dtype=np.int64)
    y[::2] = 1
    p = np.where(np.arange(n) < n // 2, 1 - y, y).astype(np.float64) * 0.8 + 0.1
    unc = mc_uncertainty(p[None, :])
    assert np.all(unc.mutual_information == 0)
    curve = referral_curve(unc, y, "mutual_information", fractions=(0.0, 0.5), n_bootstrap=0, seed=7)
    assert curve.accuracy[0] == pytest.approx(0.5)
    assert abs(curve.accuracy[1] - 0.5) < 0.1  # positional tie-breaking would give 1.0


def test_mann_whitney_auc_equals_sklearn_with_ties() -> None:
    rng = np.random.default_rng(8)
    y = rng.integers(0, 2, 500)
    scores = np.round(rng.random(500) + 0.3 * y, 1).astype(np.float64)  # heavily tied
    assert mann_whitney_auc(y, scores) == pytest.approx(roc_auc_score(y, scores), abs=1e-12)
    assert np.isnan(mann_whitney_auc(np.zeros(5, dtype=np.int64), scores[:5]))


def test_rounding_of_referred_counts_and_fraction_validation() -> None:
    assert [n_referred(30, f) for f in (0.0, 0.05, 0.1, 0.5)] == [0, 2, 3, 15]  # 1.5 rounds up
    assert n_referred(20, 0.15) == 3  # 0.15 * 20 = 3.0000000000000004
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        check_fractions((0.0, 1.0))
    with pytest.raises(ValueError, match="increasing"):
        check_fractions((0.2, 0.1))


def test_curves_are_reproducible_from_the_seed() -> None:
    mc, y = _toy(300, seed=9)
    unc = mc_uncertainty(mc)
    a = referral_curve(unc, y, "random", n_bootstrap=30, seed=1)
    b = referral_curve(unc, y, "random", n_bootstrap=30, seed=1)
    c = referral_curve(unc, y, "random", n_bootstrap=30, seed=2)
    assert a == b
    assert a.auc_se != c.auc_se
