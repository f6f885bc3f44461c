"""ECE and reliability bins (training.evaluation.calibration) and the MC uncertainty adapter."""

from __future__ import annotations

import numpy as np
import pytest

from training.evaluation.calibration import (
    ece_bootstrap_se,
    ece_calibrated_floor,
    expected_calibration_error,
    reliability_bins,
)
from training.evaluation.uncertainty import mc_uncertainty


def test_ece_matches_hand_computation() -> None:
    p = np.array([0.05, 0.15, 0.15, 0.85, 0.95, 0.95])
    y = np.array([0, 0, 1, 1, 1, 0])
    # bin 0: conf .05, freq 0 -> .05 (n=1); bin 1: conf .15, freq .5 -> .35 (n=2);
    # bin 8: conf .85, freq 1 -> .15 (n=1); bin 9: conf .95, freq .5 -> .45 (n=2)
    expected = (1 * 0.05 + 2 * 0.35 + 1 * 0.15 + 2 * 0.45) / 6
    assert expected_calibration_error(p, y) == pytest.approx(expected) == pytest.approx(0.3)
    bins = reliability_bins(p, y)
    assert bins.count == (1, 2, 0, 0, 0, 0, 0, 0, 1, 2)
    assert bins.observed_frequency[1] == pytest.approx(0.5)
    assert np.isnan(bins.mean_predicted[4])  # empty bin


def test_bin_edges_are_left_closed_and_last_bin_holds_one() -> None:
    bins = reliability_bins(np.array([0.0, 0.3, 0.7, 0.9999, 1.0]), np.array([0, 0, 1, 1, 1]), n_bins=10)
    assert bins.count == (1, 0, 0, 1, 0, 0, 0, 1, 0, 2)
    assert bins.edges[0] == 0.0 and bins.edges[-1] == 1.0 and len(bins.edges) == 11


def test_perfectly_calibrated_data_has_small_ece() -> None:
    rng = np.random.default_rng(0)
    p = rng.random(20000)
    y = (rng.random(20000) < p).astype(int)  # y ~ Bernoulli(p)
    assert expected_calibration_error(p, y) < 0.015


def test_overconfident_predictions_have_large_ece() -> None:
    rng = np.random.default_rng(1)
    y = (rng.random(20000) < 0.7).astype(int)  # events that happen 70 % of the time ...
    p = np.full(20000, 0.95)  # ... predicted at 95 %
    assert expected_calibration_error(p, y) == pytest.approx(0.25, abs=0.015)
    # Sharpening calibrated probabilities (logit x 3) is overconfident everywhere.
    p_true = rng.random(20000)
    y2 = (rng.random(20000) < p_true).astype(int)
    logit = np.log(p_true / (1 - p_true))
    sharp = 1 / (1 + np.exp(-3 * logit))
    assert expected_calibration_error(sharp, y2) > 0.1
    assert expected_calibration_error(sharp, y2) > 5 * expected_calibration_error(p_true, y2)


def test_calibrated_floor_is_the_ece_of_calibrated_labels() -> None:
    # The floor is the mean ECE of label sets drawn from the predictions themselves; recompute that mean
    # with the reference ECE on independently drawn labels.
    rng = np.random.default_rng(3)
    p = rng.beta(0.6, 2.5, size=735)  # skewed to low probabilities, like a screening population
    reference = np.mean([expected_calibration_error(p, (rng.random(p.size) < p).astype(int))
                         for _ in range(400)])
    floor = ece_calibrated_floor(p, n_draws=400, seed=4)
    assert floor == pytest.approx(reference, rel=0.06)
    assert 0.01 < floor < 0.05  # not negligible against an ECE target of 0.03 at N = 735
    # a sampling bias: it shrinks like 1/sqrt(N)
    big = rng.beta(0.6, 2.5, size=16 * 735)
    assert ece_calibrated_floor(big, seed=5) == pytest.approx(floor / 4, rel=0.2)
    assert ece_calibrated_floor(p, seed=6) == ece_calibrated_floor(p, seed=6)  # seeded


def test_fast_ece_paths_bin_exactly_like_the_reliability_table() -> None:
    # One calibrated label set drawn the way the floor draws it: its ECE must be exactly the reference ECE,
    # including probabilities on the bin edges (0.3 belongs to [0.3, 0.4), 1.0 to the last bin).
    p = np.concatenate([np.linspace(0.0, 1.0, 11), np.random.default_rng(12).random(300)])
    y = (np.random.default_rng(11).random((1, p.size)) < p)[0].astype(int)
    assert ece_calibrated_floor(p, n_draws=1, seed=11) == pytest.approx(expected_calibration_error(p, y), abs=1e-12)
    assert ece_calibrated_floor(p, n_bins=4, n_draws=1, seed=11) == pytest.approx(
        expected_calibration_error(p, y, n_bins=4), abs=1e-12)
    with pytest.raises(ValueError, match="n_bins must be >= 1"):
        ece_bootstrap_se(p, y, n_bins=0)


def test_calibrated_floor_separates_noise_from_miscalibration() -> None:
    rng = np.random.default_rng(7)
    p = rng.random(735)
    calibrated = (rng.random(p.size) < p).astype(int)
    floor = ece_calibrated_floor(p)
    assert expected_calibration_error(p, calibrated) < 2 * floor
    overconfident = 1 / (1 + np.exp(-3 * np.log(p / (1 - p))))  # the same labels, logits x 3
    assert expected_calibration_error(overconfident, calibrated) > 4 * ece_calibrated_floor(overconfident)


def test_ece_bootstrap_se_matches_the_spread_over_fresh_samples() -> None:
    # The true sampling SD of the ECE: new images (p, y) from one miscalibrated population, many times.
    rng = np.random.default_rng(8)

    def sample(n: int) -> tuple[np.ndarray, np.ndarray]:
        p = rng.random(n)
        return p, (rng.random(n) < 0.1 + 0.8 * p).astype(int)  # under-confident at the extremes

    n = 600
    eces = [expected_calibration_error(*sample(n)) for _ in range(400)]
    true_sd = float(np.std(eces, ddof=1))
    ses = [ece_bootstrap_se(*sample(n), n_bootstrap=300, seed=s) for s in range(8)]
    assert np.mean(ses) == pytest.approx(true_sd, rel=0.25)
    p, y = sample(n)
    assert ece_bootstrap_se(p, y, seed=1) == ece_bootstrap_se(p, y, seed=1)
    with pytest.raises(ValueError, match="n_bootstrap"):
        ece_bootstrap_se(p, y, n_bootstrap=1)
    with pytest.raises(ValueError, match="n_draws"):
        ece_calibrated_floor(p, n_draws=0)


def test_calibration_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="0 \\(non-referable\\) or 1"):
        expected_calibration_error(np.array([0.2, 0.4]), np.array([0, 2]))
    with pytest.raises(ValueError, match="equal length"):
        expected_calibration_error(np.array([0.2, 0.4]), np.array([0]))
    with pytest.raises(ValueError, match="n_bins"):
        reliability_bins(np.array([0.2]), np.array([0]), n_bins=0)


def test_mc_uncertainty_hand_values_and_bounds() -> None:
    # Two samples that disagree completely: p̄ = 0.5, H[p̄] = ln 2, each H[p_s] = 0, MI = ln 2.
    # Agreeing samples at 0.5: all entropy is aleatoric, MI = 0.
    mc = np.array([[0.0, 0.5, 0.9], [1.0, 0.5, 0.9]])
    u = mc_uncertainty(mc)
    h09 = -(0.9 * np.log(0.9) + 0.1 * np.log(0.1))
    assert u.probability == pytest.approx([0.5, 0.5, 0.9])
    assert u.predictive_entropy == pytest.approx([np.log(2), np.log(2), h09])
    assert u.expected_entropy == pytest.approx([0.0, np.log(2), h09])
    assert u.mutual_information == pytest.approx([np.log(2), 0.0, 0.0], abs=1e-12)
    rng = np.random.default_rng(2)
    u2 = mc_uncertainty(rng.random((16, 500)))
    assert np.all(u2.mutual_information >= 0)
    assert np.all(u2.mutual_information <= u2.predictive_entropy + 1e-12)


def test_mc_uncertainty_rejects_bad_shapes_and_values() -> None:
    with pytest.raises(ValueError, match=r"\[S, N\]"):
        mc_uncertainty(np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="sigmoid"):
        mc_uncertainty(np.array([[0.1, 1.5]]))
    with pytest.raises(ValueError, match="NaN"):
        mc_uncertainty(np.array([[0.1, np.nan]]))
