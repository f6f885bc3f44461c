"""Pruning a radial posterior by signal-to-noise (Blundell et al. 2015, Table 2 and Fig. 4), and the packed form
in which a pruned artifact stores its weights.

**Signal-to-noise of a radial weight.** The radial posterior draws a tensor of D elements as
w = μ + σ ⊙ u·r, with u uniform on the unit sphere of the *whole flattened tensor* (``models.nn.posteriors``:
the sampler normalises once per tensor and Monte Carlo sample; a bias is its own tensor) and r ~ N(0, 1).
Each coordinate of u has E[u_i²] = 1/D and E[r²] = 1, so weight i's noise has standard deviation σ_i/√D, not
σ_i. Its signal-to-noise ratio is therefore

    SNR_i = |μ_i| / (σ_i/√D) = |μ_i|·√D / σ_i,       D = the numel of the weight tensor that holds it.

One threshold over every Bayesian layer's weights (as the paper's) ranks weights of different layers by this
per-coordinate ratio; ``method="magnitude"`` ranks by |μ| alone (the paper's baseline). Biases are not pruned.

**What a pruned weight is.** μ = 0 and ρ = :data:`PRUNED_RHO`, whose softplus is exactly 0.0 in fp32, fp16
and bf16, so σ = 0 and the weight is exactly zero in every draw while the model keeps its dense tensors
(serving, ONNX export and the precision record read the same state_dict as before). The sampler is left
as it is: a pruned tensor's direction u is still normalised over all D coordinates, so a kept weight's
noise is exactly its parent's (with the same seed, a kept coordinate's draw is the parent's draw bit for bit);
the noise the pruned coordinates carried is dropped, not spread over the kept ones. A pruned model has
log σ = −∞ at its pruned weights: its KL term is infinite, so it is for serving, not for further training.

**Packed storage.** :func:`pack_state_dict` stores each pruned weight tensor as its keep-mask (one bit a
weight, ``numpy.packbits`` order over the flattened tensor), its dense shape, and the kept μ and ρ values
only; :func:`unpack_state_dict` rebuilds the same dense tensors bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
import torch
from torch import Tensor

from models.nn.posteriors import sigma_from_rho

PruneMethod = Literal["snr", "magnitude"]
PRUNE_METHODS: tuple[PruneMethod, ...] = ("snr", "magnitude")
PRUNED_RHO = -200.0  # softplus(-200) = log1p(exp(-200)) = 0.0 exactly in fp32/fp16/bf16: σ = 0
MU, RHO = "_mu", "_rho"
MASK_SUFFIX, SHAPE_SUFFIX, KEPT_SUFFIX = ".keep_mask", ".dense_shape", ".kept"


def check_method(name: str) -> PruneMethod:
    if name not in PRUNE_METHODS:
        raise ValueError(f"Unknown pruning method {name!r}; expected one of: {', '.join(PRUNE_METHODS)}.")
    return cast(PruneMethod, name)


def weight_prefixes(state: Mapping[str, Tensor]) -> list[str]:
    """The Bayesian weight tensors of a state_dict: ``'features.0.weight'`` for ``features.0.weight_mu``/``_rho``."""
    return sorted(k[: -len(MU)] for k in state if k.endswith("weight" + MU) and k[: -len(MU)] + RHO in state)


def snr(mu: Tensor, rho: Tensor) -> Tensor:
    """|μ|·√D/σ per weight of one radial tensor of D = ``mu.numel()`` elements (float64; +inf where σ = 0)."""
    sigma = sigma_from_rho(rho.double())
    return mu.double().abs() * math.sqrt(mu.numel()) / sigma


def scores(mu: Tensor, rho: Tensor, method: PruneMethod) -> Tensor:
    """The ranking score of each weight: SNR (``"snr"``) or |μ| (``"magnitude"``); the lowest are pruned."""
    return snr(mu, rho) if method == "snr" else mu.double().abs()


@dataclass(frozen=True)
class PruneResult:
    state: dict[str, Tensor]  # the dense state_dict with pruned weights at μ = 0, ρ = PRUNED_RHO
    masks: dict[str, Tensor]  # weight prefix -> bool keep-mask of the weight's shape
    kept: int
    total: int
    threshold: float  # the lowest score kept

    @property
    def kept_share(self) -> float:
        return self.kept / self.total


def prune_state_dict(state: Mapping[str, Tensor], keep: float, *, method: PruneMethod = "snr") -> PruneResult:
    """Keep the ``round(keep · N)`` highest-scoring of the N Bayesian weights (one threshold over all layers)
    and prune the rest; ties are broken by position (stable order), so the kept count is exact."""
    check_method(method)
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must be a share in (0, 1], got {keep}.")
    prefixes = weight_prefixes(state)
    if not prefixes:
        raise ValueError("The state_dict holds no Bayesian weights (no '*.weight_mu' with its '*.weight_rho').")
    flat = torch.cat([scores(state[p + MU], state[p + RHO], method).reshape(-1) for p in prefixes])  # [N]
    total = flat.numel()
    n_keep = max(1, round(keep * total))
    order = torch.argsort(flat, descending=True, stable=True)
    keep_flat = torch.zeros(total, dtype=torch.bool)
    keep_flat[order[:n_keep]] = True
    out = {k: v.clone() for k, v in state.items()}
    masks: dict[str, Tensor] = {}
    start = 0
    for p in prefixes:
        mu = state[p + MU]
        mask = keep_flat[start:start + mu.numel()].reshape(mu.shape)
        start += mu.numel()
        masks[p] = mask
        out[p + MU] = torch.where(mask, mu, torch.zeros((), dtype=mu.dtype))
        out[p + RHO] = torch.where(mask, state[p + RHO], torch.full((), PRUNED_RHO, dtype=mu.dtype))
    return PruneResult(out, masks, n_keep, total, float(flat[order[n_keep - 1]]))


def pruned_mask(mu: Tensor, rho: Tensor) -> Tensor:
    """Where a dense tensor holds pruned weights (μ = +0.0 exactly and ρ = PRUNED_RHO)."""
    return (rho == PRUNED_RHO) & (mu == 0) & ~torch.signbit(mu)


def pack_state_dict(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The packed form of a pruned dense state_dict: each weight tensor with pruned entries becomes
    ``P.keep_mask`` (uint8, packbits of the flattened keep-mask), ``P.dense_shape`` (int64) and
    ``P_mu.kept``/``P_rho.kept`` (the kept values, flattened order); everything else is stored as it is."""
    out: dict[str, Tensor] = {}
    packed: set[str] = set()
    for p in weight_prefixes(state):
        mu, rho = state[p + MU], state[p + RHO]
        keep = ~pruned_mask(mu, rho)
        if bool(keep.all()):
            continue
        flat_keep = keep.reshape(-1)
        out[p + MASK_SUFFIX] = torch.from_numpy(np.packbits(flat_keep.numpy()))
        out[p + SHAPE_SUFFIX] = torch.tensor(list(mu.shape), dtype=torch.int64)
        out[p + MU + KEPT_SUFFIX] = mu.reshape(-1)[flat_keep].clone()
        out[p + RHO + KEPT_SUFFIX] = rho.reshape(-1)[flat_keep].clone()
        packed.update((p + MU, p + RHO))
    out.update({k: v for k, v in state.items() if k not in packed})
    return out


def is_packed(tensors: Mapping[str, Tensor]) -> bool:
    return any(k.endswith(MASK_SUFFIX) for k in tensors)


def unpack_state_dict(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The dense state_dict of a packed one (:func:`pack_state_dict`): pruned entries μ = 0, ρ = PRUNED_RHO.

    Raises ValueError naming the tensor when a mask, shape and kept values do not agree."""
    out = {k: v for k, v in tensors.items()
           if not k.endswith((MASK_SUFFIX, SHAPE_SUFFIX, KEPT_SUFFIX))}
    for key in sorted(k for k in tensors if k.endswith(MASK_SUFFIX)):
        p = key[: -len(MASK_SUFFIX)]
        try:
            shape = [int(s) for s in tensors[p + SHAPE_SUFFIX].tolist()]
            mu_kept, rho_kept = tensors[p + MU + KEPT_SUFFIX], tensors[p + RHO + KEPT_SUFFIX]
        except KeyError as exc:
            raise ValueError(f"{p}: packed weight lacks {exc.args[0]}") from exc
        n = math.prod(shape)
        keep = torch.from_numpy(np.unpackbits(tensors[key].numpy(), count=n).astype(bool))  # [n]
        if int(keep.sum()) != mu_kept.numel() or mu_kept.numel() != rho_kept.numel():
            raise ValueError(f"{p}: keep-mask has {int(keep.sum())} weights, kept values {mu_kept.numel()} "
                             f"(μ) and {rho_kept.numel()} (ρ)")
        mu = torch.zeros(n, dtype=mu_kept.dtype)
        rho = torch.full((n,), PRUNED_RHO, dtype=rho_kept.dtype)
        mu[keep], rho[keep] = mu_kept, rho_kept
        out[p + MU], out[p + RHO] = mu.reshape(shape), rho.reshape(shape)
    return out


def snr_quantiles(state: Mapping[str, Tensor], qs: tuple[float, ...] = (0.05, 0.25, 0.5, 0.75, 0.95)
                  ) -> dict[str, dict[str, float]]:
    """Per weight tensor: D and the SNR (|μ|·√D/σ) quantiles ``qs``; also |μ|/σ's median, for comparison."""
    out: dict[str, dict[str, float]] = {}
    for p in weight_prefixes(state):
        mu, rho = state[p + MU], state[p + RHO]
        q = np.quantile(snr(mu, rho).reshape(-1).numpy(), qs)
        naive = (mu.double().abs() / sigma_from_rho(rho.double())).median()
        out[p] = {"D": float(mu.numel()), **{f"q{round(100 * k):02d}": float(v) for k, v in zip(qs, q, strict=True)},
                  "median_abs_mu_over_sigma": float(naive)}
    return out
