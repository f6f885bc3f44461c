"""The training objective (the loss lives outside the model)."""

from __future__ import annotations

from torch import Tensor


def elbo_loss(nll: Tensor, kl: Tensor, n_train: int) -> Tensor:
    """Negative ELBO per training example:  mean NLL over the batch  +  KL / N_train.

    This is the full ELBO divided by N_train — the KL is *not* down-weighted or annealed (paper appendix
    D.1: "Unlike some prior work using MFVI, we have not downweighted the KL-divergence").
    """
    if n_train < 1:
        raise ValueError(f"n_train must be >= 1, got {n_train}.")
    return nll + kl / n_train
