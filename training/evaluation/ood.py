"""Out-of-distribution signal: how well an uncertainty score tells foreign images from the test images.

The score of each image (mutual information; predictive entropy for a deterministic model, whose MI is 0)
is a detector: AUROC = P(score of a random foreign image > score of a random in-distribution image), ties
counting one half (``sklearn.metrics.roc_auc_score`` with the foreign images as the positive class).
0.5 = no signal; 1.0 = every foreign image is more uncertain than every test image; below 0.5 = the model is
*more* confident on the foreign images, the failure a screening model must not have.

Example::

    auroc = ood_auroc(mi_synthetic_test, mi_real_photographs)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics import roc_auc_score


def ood_auroc(in_distribution: ArrayLike, out_of_distribution: ArrayLike) -> float:
    """AUROC of the scores for telling ``out_of_distribution`` (positive, ``[N_out]``) from ``in_distribution``."""
    a = np.asarray(in_distribution, np.float64).ravel()  # [N_in]
    b = np.asarray(out_of_distribution, np.float64).ravel()  # [N_out]
    if a.size == 0 or b.size == 0:
        raise ValueError(f"both image sets need at least one score; got {a.size} and {b.size}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("scores must be finite")
    labels = np.concatenate([np.zeros(a.size, np.int64), np.ones(b.size, np.int64)])  # [N_in + N_out]
    return float(roc_auc_score(labels, np.concatenate([a, b])))
