"""The training objective (the loss lives outside the model)."""

from __future__ import annotations

from torch import Tensor


def elbo_loss(nll: Tensor, kl: Tensor, n_train: int, kl_weight: float = 1.0) -> Tensor:
    """Negative ELBO per training example:  mean NLL over the batch  +  λ · KL / N_train.

    With ``kl_weight`` λ = 1 (the default) this is the full ELBO divided by N_train — the KL is *not*
    down-weighted or annealed (paper appendix D.1: "Unlike some prior work using MFVI, we have not
    downweighted the KL-divergence"). λ < 1 is a tempered objective (a "cold" posterior): a run that uses
    it says so in its card, and its validation ELBO is still reported at λ = 1 so the two can be compared.
    """
    if n_train < 1:
        raise ValueError(f"n_train must be >= 1, got {n_train}.")
    if not 0 < kl_weight <= 1:
        raise ValueError(f"kl_weight must be in (0, 1], got {kl_weight}.")
    return nll + kl_weight * kl / n_train
