"""AUC on subsets and per-group summaries (training.evaluation.strata) against independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from training.evaluation.strata import group_summaries, subset_auc


def test_subset_auc_is_sklearns_auc_on_the_kept_images() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400)
    hidden = (labels == 1) & (rng.random(400) < 0.3)  # positives the scorer cannot see
    scores = np.where(labels == 1, rng.normal(2.0, 1.0, 400), rng.normal(0.0, 1.0, 400))
    scores[hidden] = rng.normal(0.0, 1.0, int(hidden.sum()))
    everything = subset_auc(scores, labels, np.ones(400, bool), n_bootstrap=300)
    visible = subset_auc(scores, labels, ~hidden, n_bootstrap=300)
    only_hidden = subset_auc(scores, labels, hidden | (labels == 0), n_bootstrap=300)
    assert everything.auc == pytest.approx(roc_auc_score(labels, scores))
    assert visible.auc == pytest.approx(roc_auc_score(labels[~hidden], scores[~hidden]))
    assert (visible.n_positive, visible.n_negative) == (int(((labels == 1) & ~hidden).sum()), int((labels == 0).sum()))
    # binormal d = 2 gives Φ(2/√2) ≈ 0.921; the invisible positives score at chance
    assert visible.auc == pytest.approx(0.921, abs=0.04) and only_hidden.auc == pytest.approx(0.5, abs=0.08)
    assert only_hidden.auc < everything.auc < visible.auc
    # bootstrap SE of an AUC over ~200 + 200 images: of the order sqrt(AUC(1-AUC)/n) (Hanley-McNeil ≈ 0.013)
    assert 0.005 < visible.se < 0.03


def test_a_subset_without_one_class_has_no_auc() -> None:
    r = subset_auc([0.1, 0.9, 0.8], [0, 1, 1], [False, True, True])
    assert (r.n_positive, r.n_negative) == (2, 0) and math.isnan(r.auc) and math.isnan(r.se)
    with pytest.raises(ValueError, match="same length"):
        subset_auc([0.1, 0.2], [0, 1], [True])


def test_group_summaries_by_hand() -> None:
    out = group_summaries([0.2, 0.6, 0.9, 0.4], [0.01, 0.03, 0.02, 0.05], ["0", "2", "2", "0"])
    assert list(out) == ["0", "2"]
    assert (out["0"].n, out["0"].mean_probability, out["0"].called_positive, out["0"].median_mi) == \
        (2, pytest.approx(0.3), 0.0, pytest.approx(0.03))
    assert (out["2"].n, out["2"].mean_probability, out["2"].called_positive, out["2"].median_mi) == \
        (2, pytest.approx(0.75), 1.0, pytest.approx(0.025))
