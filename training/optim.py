"""The optimiser side of the recipe: μ/ρ parameter groups, Adam/AdamW (amsgrad), the per-epoch lr schedule.

Why separate groups: with Adam every ρ moves by about its learning rate per step whatever its gradient, so
an lr that suits the means can cap how far σ = softplus(ρ) travels in a run (the "step budget": at most
≈ Σ lr over the ELBO steps).  Giving ρ its own group and learning rate makes that budget a visible, separate
knob, and the model card compares the distance ρ actually moved with it (``training.diagnostics``).

The schedule is a pure function of the epoch and the optimiser step (an optional linear warm-up), applied
before every step, so an exactly resumed run needs no scheduler state in its checkpoint.

The update runs as torch's fused Adam (``fused=True``, amsgrad included) wherever torch has the fused kernel
for the parameters' device: one kernel over every parameter of a group instead of about fourteen operations
per parameter, which is what a GPU step's host would otherwise spend most of its time dispatching
(``benchmarks/train_step_host.py``). The fused update is the same algorithm; it may round differently from
the per-parameter one, so a run resumed keeps the implementation it is built with (``load_optimizer_state``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from training.config import TrainConfig

MU_GROUP, RHO_GROUP = "mu", "rho"
FUSED_DEVICES = ("cpu", "cuda")  # where torch has the fused Adam/AdamW kernel (amsgrad included)
IMPLEMENTATION = ("fused", "foreach", "capturable")  # how a group's update runs, not what it computes


def is_rho(name: str) -> bool:
    """ρ parameters of Bayesian layers are named ``*.weight_rho`` / ``*.bias_rho``."""
    return name.endswith("_rho")


def parameter_groups(model: nn.Module, config: TrainConfig) -> list[dict[str, object]]:
    """Two groups: ``mu`` (means and every non-Bayesian parameter) and ``rho`` (omitted when empty).

    Each group carries ``base_lr`` (its lr before the schedule) and ``name``.  Weight decay applies to the
    means only: decaying ρ would pull σ towards softplus(0) ≈ 0.69 regardless of the data.
    """
    mu = [p for n, p in model.named_parameters() if p.requires_grad and not is_rho(n)]
    rho = [p for n, p in model.named_parameters() if p.requires_grad and is_rho(n)]
    groups: list[dict[str, object]] = [
        {"params": mu, "name": MU_GROUP, "lr": config.lr, "base_lr": config.lr, "weight_decay": config.weight_decay}]
    if rho:
        groups.append({"params": rho, "name": RHO_GROUP, "lr": config.effective_rho_lr,
                       "base_lr": config.effective_rho_lr, "weight_decay": 0.0})
    return groups


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Adam or AdamW over :func:`parameter_groups`, with ``amsgrad`` as configured; fused where the parameters'
    device has the kernel (:data:`FUSED_DEVICES`), else torch's default."""
    groups = parameter_groups(model, config)
    devices = {p.device.type for p in model.parameters()}
    fused = True if devices and devices <= set(FUSED_DEVICES) else None
    if config.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=config.lr, amsgrad=config.amsgrad, fused=fused)
    return torch.optim.Adam(groups, lr=config.lr, amsgrad=config.amsgrad, fused=fused)


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Load a checkpoint's optimiser state into ``optimizer``, keeping ``optimizer``'s implementation.

    torch's ``load_state_dict`` takes every group setting from the checkpoint, ``fused``/``foreach`` included,
    so a checkpoint written before the update was fused would resume on the per-parameter update. The moments
    are what the checkpoint holds; how they are updated is this build's: its implementation settings are put
    back, and each step counter goes where that implementation keeps it (fused or capturable: a float32 on the
    parameter's device; otherwise on the host).
    """
    kept = [{k: g[k] for k in IMPLEMENTATION if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, implementation in zip(optimizer.param_groups, kept, strict=True):
        group.update(implementation)
        on_device = bool(group.get("fused") or group.get("capturable"))
        for p in group["params"]:
            state = optimizer.state.get(p)
            if state and torch.is_tensor(state.get("step")):
                step = state["step"]
                state["step"] = (step.to(device=p.device, dtype=torch.float32) if on_device
                                 else step.to(device="cpu", dtype=torch.float32))


def lr_factor(config: TrainConfig, epoch: int) -> float:
    """Multiplier on every group's base lr during 0-based ``epoch``.

    constant: 1.  cosine: ½(1 + cos(π·epoch/epochs)) — 1 at the first epoch, falling towards 0.
    step: lr_gamma ** (epoch // lr_step_epochs).
    """
    if config.lr_schedule == "constant":
        return 1.0
    if config.lr_schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * epoch / config.epochs))
    return float(config.lr_gamma ** (epoch // config.lr_step_epochs))


def warmup_factor(config: TrainConfig, step: int) -> float:
    """Multiplier during the run's 0-based optimiser ``step``: a linear ramp (step + 1) / W over the first
    W = ``lr_warmup_steps`` steps, then 1.

    Why: Adam's first steps move every parameter by ≈ lr in the sign of one mini-batch gradient (its moment
    estimates are fresh).  From a random initialisation that is harmless; from a trained posterior (a warm
    start, ``--init-from``) it measured catastrophic: default model 0.2.0 restarted at lr 1e-3 went from a
    training NLL of 0.29 to ≈ 40 nat within 30 steps.  The ramp lets the moments form before full steps.
    """
    w = config.lr_warmup_steps
    return 1.0 if w <= 0 or step >= w else (step + 1) / w


def apply_schedule(optimizer: torch.optim.Optimizer, config: TrainConfig, epoch: int, step: int | None = None
                   ) -> None:
    """Set each group's lr to base_lr × :func:`lr_factor` for ``epoch`` (× :func:`warmup_factor` for the
    run's optimiser ``step`` when given: the loop calls this before every step)."""
    factor = lr_factor(config, epoch) * (warmup_factor(config, step) if step is not None else 1.0)
    for group in optimizer.param_groups:
        group["lr"] = float(group["base_lr"]) * factor


def group_lr(optimizer: torch.optim.Optimizer, name: str) -> float:
    """The current lr of the group called ``name`` (0.0 when the model has no such group)."""
    return next((float(g["lr"]) for g in optimizer.param_groups if g.get("name") == name), 0.0)
