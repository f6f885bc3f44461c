"""Per-epoch diagnostics of the posterior: σ per layer, how far ρ moved against its step budget, and the
standard deviation of the NLL gradient estimator (seed 001 Fig. 2 bottom); plotted in the run's report.

They answer "did the ELBO set σ, or did the optimiser?": a σ trajectory that flattens while the KL term keeps
its weight is set by the ELBO; a ρ that moved by its whole step budget (Σ lr over ELBO steps, Adam moving
each ρ by ≈ lr per step) was limited by the optimiser.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.nn.kl import bayesian_layers
from models.nn.posteriors import sigma_from_rho
from models.nn.sampling import sampling_generator
from models.nn.vgg import mc_logits

SIGMA_QUANTILES = (0.05, 0.5, 0.95)
OPTIMISER_LIMIT = 0.9  # Δρ / (lr · steps) above this: σ was limited by the optimiser


def sigma_stats(model: nn.Module) -> dict[str, float]:
    """Flat ``{"sigma/<layer>/mean", "sigma/<layer>/q05", ...}`` over each Bayesian layer's weight and bias σ,
    plus ``sigma/all/...`` over every Bayesian parameter; empty for a non-Bayesian model."""
    out: dict[str, float] = {}
    every: list[Tensor] = []
    for name, layer in bayesian_layers(model):
        sigma = sigma_from_rho(torch.cat([layer.weight_rho.detach().flatten(),
                                          layer.bias_rho.detach().flatten()]).double())  # [D_layer]
        every.append(sigma)
        out.update(_stats(f"sigma/{name or 'layer'}", sigma))
    if every:
        out.update(_stats("sigma/all", torch.cat(every)))
    return out


def _stats(prefix: str, sigma: Tensor) -> dict[str, float]:
    qs = torch.quantile(sigma, torch.tensor(SIGMA_QUANTILES, dtype=sigma.dtype, device=sigma.device)) \
        if sigma.numel() <= 2**24 else torch.tensor(np.quantile(sigma.cpu().numpy(), SIGMA_QUANTILES))
    return {f"{prefix}/mean": float(sigma.mean()),
            **{f"{prefix}/q{round(100 * q):02d}": float(v) for q, v in zip(SIGMA_QUANTILES, qs, strict=True)}}


def rho_shift(model: nn.Module, rho_init: float | Mapping[str, Tensor]) -> dict[str, float]:
    """Mean and max |ρ − ρ_init| over every ρ: from the constant ``rho_init`` every ρ of a fresh model
    starts at, or from a per-parameter reference (a warm start's ρ, ``training.warm_start.rho_reference``)."""
    named = [(n, p.detach().flatten().double()) for n, p in model.named_parameters() if n.endswith("_rho")]
    if not named:
        return {}
    rhos = torch.cat([r for _, r in named])
    origin = (torch.cat([rho_init[n].detach().flatten().double().to(rhos.device) for n, _ in named])
              if isinstance(rho_init, Mapping) else rho_init)
    shift = (rhos - origin).abs()
    out = {"rho_shift_mean": float(shift.mean()), "rho_shift_max": float(shift.max())}
    layers: dict[str, list[Tensor]] = {}
    for (name, _), part in zip(named, torch.split(shift, [r.numel() for _, r in named]), strict=True):
        layers.setdefault(name.rsplit(".", 1)[0] if "." in name else "layer", []).append(part)
    out.update({f"rho_shift/{layer}": float(torch.cat(parts).mean()) for layer, parts in layers.items()})
    return out


def layer_budget_ratios(shift: Mapping[str, float], rho_budget: float) -> dict[str, float]:
    """``rho_ratio/<layer>``: each layer's mean |ρ − ρ0| over the step budget (issue of σ per layer: a layer
    whose ratio stays near 1 was still moving at Adam's full speed; one well below has found its level)."""
    if rho_budget <= 0:
        return {}
    return {f"rho_ratio/{key.split('/', 1)[1]}": value / rho_budget for key, value in shift.items()
            if key.startswith("rho_shift/")}


def budget_ratio(shift_mean: float | None, rho_budget: float) -> float | None:
    """Δρ / (lr · steps): the mean distance ρ moved over the most any ρ could move with Adam (None if no budget)."""
    if shift_mean is None or rho_budget <= 0:
        return None
    return shift_mean / rho_budget


def nll_gradient_sd(model: nn.Module, x: Tensor, y: Tensor, *, samples: int, mc_per_estimate: int,
                    seed: int) -> dict[str, float]:
    """SD over ``samples`` independent estimates of ∇ NLL on the fixed batch ``x`` ``[B, C, H, W]``, ``y`` ``[B]``.

    Each estimate uses ``mc_per_estimate`` weight samples (as one training step does).  Returned: the mean over
    parameters of the per-parameter SD, for the means (``grad_sd_mu``) and for ρ (``grad_sd_rho``).  The model's
    ``.grad`` and the training generators are left untouched (a private generator seeded by ``seed``).
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    mu_idx = [i for i, (n, _) in enumerate(named) if not n.endswith("_rho")]
    rho_idx = [i for i, (n, _) in enumerate(named) if n.endswith("_rho")]
    params = [p for _, p in named]
    grads: list[Tensor] = []
    was_training = model.training
    model.train()
    gen = torch.Generator(x.device).manual_seed(seed)  # on the model's device: no noise copied to it
    with sampling_generator(model, gen):
        for _ in range(samples):
            logits = mc_logits(model, x, mc_per_estimate)[..., 0].float()  # [S, B]
            nll = F.binary_cross_entropy_with_logits(logits, y.expand_as(logits))
            g = torch.autograd.grad(nll, params, allow_unused=True)
            grads.append(torch.cat([(gi if gi is not None else torch.zeros_like(p)).flatten().double()
                                    for gi, p in zip(g, params, strict=True)]))  # [P]
    model.train(was_training)
    stacked = torch.stack(grads)  # [samples, P]
    sd = stacked.std(dim=0)  # [P]
    sizes = [p.numel() for p in params]
    parts = torch.split(sd, sizes)

    def mean_of(idx: list[int]) -> float:
        return float(torch.cat([parts[i] for i in idx]).mean()) if idx else float("nan")
    return {"grad_sd_mu": mean_of(mu_idx), "grad_sd_rho": mean_of(rho_idx)}


def plot_training_curves(history: list[dict[str, Any]], path: Path) -> Path:
    """Four panels over epochs: σ per layer (mean), train/val NLL, KL/N, NLL-gradient SD → PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [int(r["epoch"]) for r in history]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    ax = axes[0, 0]
    layers = sorted({k.split("/")[1] for r in history for k in r if k.startswith("sigma/") and k.endswith("/mean")})
    for layer in layers:
        key = f"sigma/{layer}/mean"
        style = {"color": "black", "linewidth": 2.5} if layer == "all" else {"linewidth": 0.9, "alpha": 0.7}
        ax.plot(epochs, [r.get(key, np.nan) for r in history], label=layer if layer == "all" else None, **style)
    if "sigma/all/q05" in history[0]:
        ax.fill_between(epochs, [r["sigma/all/q05"] for r in history], [r["sigma/all/q95"] for r in history],
                        color="grey", alpha=0.25, label="all: 5–95 %")
    ax.set(title="posterior σ = softplus(ρ), mean per layer", xlabel="epoch", ylabel="σ", yscale="log")
    if layers:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no Bayesian layers", ha="center", transform=ax.transAxes)
    ax = axes[0, 1]
    ax.plot(epochs, [r["train_nll"] for r in history], label="train NLL")
    ax.plot(epochs, [r["val_nll"] for r in history], label="validation NLL")
    ax.set(title="negative log-likelihood", xlabel="epoch", ylabel="nat / image")
    ax.legend(fontsize=8)
    ax = axes[1, 0]
    ax.plot(epochs, [r.get("kl_per_example", np.nan) for r in history], label="KL / N (epoch end)")
    ax.set(title="KL term of the ELBO (per training example)", xlabel="epoch", ylabel="nat")
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    for key in ("grad_sd_mu", "grad_sd_rho"):
        ax.plot(epochs, [r.get(key, np.nan) for r in history], label=key)
    ax.set(title="SD of the NLL gradient estimator (fixed batch)", xlabel="epoch", ylabel="mean SD", yscale="log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
