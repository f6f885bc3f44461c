"""The weighted sampler by source: each source's share of the draws is its stated weight, measured, and the
images within a source are drawn evenly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from training.config import TrainConfig
from training.data.sampler import normalised_weights, source_quotas, weighted_order
from training.loop import _batches

SOURCES = ["odir"] * 150 + ["eyepacs"] * 50 + ["odir"] * 31  # 181 : 50, interleaved; n·w is not whole


def test_sampled_source_shares_match_the_stated_weights() -> None:
    # weights far from the sources' natural shares (181/231 = 0.78 for odir)
    weights = {"odir": 0.3, "eyepacs": 0.7}
    n, epochs = len(SOURCES), 300
    is_eyepacs = np.array([s == "eyepacs" for s in SOURCES])
    counts = np.zeros(n, np.int64)
    shares = []
    for epoch in range(epochs):
        order = weighted_order(SOURCES, weights, torch.Generator().manual_seed(1000 + epoch)).numpy()
        assert len(order) == n
        np.add.at(counts, order, 1)
        shares.append(is_eyepacs[order].mean())
    shares_arr = np.array(shares)
    # every epoch: n·w rounded up or down (systematic rounding), never further
    assert np.all(np.abs(shares_arr * n - 0.7 * n) < 1)
    # over the epochs the mean share is the weight: a one-sample t-test does not reject it ...
    assert stats.ttest_1samp(shares_arr, 0.7).pvalue > 0.01
    assert abs(shares_arr.mean() - 0.7) < 1 / n
    # ... and is far from the natural share an unweighted epoch would give
    assert abs(shares_arr.mean() - is_eyepacs.mean()) > 0.4
    # within a source every image is drawn equally often (chi-square against uniform)
    for mask in (is_eyepacs, ~is_eyepacs):
        observed = counts[mask]
        assert stats.chisquare(observed).pvalue > 0.01
    # under-weighted odir: no image twice in one epoch; over-weighted eyepacs: each image 3 or 4 times an epoch
    order = weighted_order(SOURCES, weights, torch.Generator().manual_seed(7)).numpy()
    per_image = np.bincount(order, minlength=n)
    assert per_image[~is_eyepacs].max() == 1
    assert set(per_image[is_eyepacs].tolist()) <= {3, 4}


def test_quotas_add_up_and_are_unbiased() -> None:
    weights = normalised_weights({"a": 1.0, "b": 1.0, "c": 1.0}, ["a", "b", "c"])
    draws = np.array([[source_quotas(100, weights, torch.Generator().manual_seed(s))[k] for k in "abc"]
                      for s in range(3000)])
    assert np.all(draws.sum(axis=1) == 100)
    assert set(np.unique(draws).tolist()) <= {33, 34}
    assert np.allclose(draws.mean(axis=0), 100 / 3, atol=0.05)  # E[quota] = n·w exactly; SE ≈ 0.009


def test_weights_must_name_exactly_the_training_sources() -> None:
    with pytest.raises(ValueError, match="missing"):
        normalised_weights({"odir": 1.0}, ["odir", "eyepacs"])
    with pytest.raises(ValueError, match="not in the training data"):
        normalised_weights({"odir": 1.0, "eyepacs": 1.0, "aptos": 1.0}, ["odir", "eyepacs"])
    with pytest.raises(ValueError, match="name its source"):
        normalised_weights({"odir": 1.0}, ["odir", None])
    with pytest.raises(ValueError, match="positive"):
        TrainConfig(data="x", out="y", source_weights={"odir": 0.0})


def test_the_epoch_order_is_a_function_of_seed_and_epoch_and_unweighted_runs_keep_their_order() -> None:
    config = TrainConfig(data="x", out="y", batch_size=16, source_weights={"odir": 0.5, "eyepacs": 0.5})
    assert _batches(len(SOURCES), config, 3, SOURCES) == _batches(len(SOURCES), config, 3, SOURCES)
    assert _batches(len(SOURCES), config, 3, SOURCES) != _batches(len(SOURCES), config, 4, SOURCES)
    plain = TrainConfig(data="x", out="y", batch_size=16)
    flat = [i for batch in _batches(len(SOURCES), plain, 3, SOURCES) for i in batch]
    assert sorted(flat) == list(range(len(SOURCES)))  # without weights: a permutation, as before
