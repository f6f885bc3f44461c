"""Training checkpoints with exact resume: model, optimiser, position in the epoch and every RNG state.

A checkpoint is written atomically (``models.io.atomic.atomic_write``: temp file, fsync, ``os.replace``), so a
kill at any moment leaves either the previous or the new checkpoint, never a torn one.  Internal to training:
the artifact handed to serving is safetensors, never a pickle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from models.io.atomic import atomic_write
from training.optim import load_optimizer_state

CHECKPOINT_FILE = "checkpoint.pt"


@dataclass
class TrainState:
    epoch: int = 0  # the epoch in progress (0-based)
    step_in_epoch: int = 0  # batches of that epoch already done
    global_step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)  # one row per finished epoch
    best_score: float = float("-inf")  # −(validation NLL or ELBO) of the best epoch: higher is better
    best_epoch: int = -1
    rho_budget: float = 0.0  # Σ over ELBO steps of the ρ group's lr: the most Adam can have moved any ρ
    epoch_sums: dict[str, float] = field(default_factory=dict)  # running sums of the epoch in progress


def save_checkpoint(run_dir: Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: TrainState,
                    generators: dict[str, torch.Generator], config: dict[str, Any]) -> Path:
    path = run_dir / CHECKPOINT_FILE
    with atomic_write(path) as tmp:
        torch.save({
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "state": state.__dict__,
            "generators": {k: g.get_state() for k, g in generators.items()},
            "torch_rng": torch.get_rng_state(),
            "config": config,
        }, tmp)
    return path


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / CHECKPOINT_FILE
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


def restore(ckpt: dict[str, Any], *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            generators: dict[str, torch.Generator]) -> TrainState:
    model.load_state_dict(ckpt["model"])
    load_optimizer_state(optimizer, ckpt["optimizer"])  # keeps this build's update (fused where it can)
    for k, g in generators.items():
        g.set_state(ckpt["generators"][k])
    torch.set_rng_state(ckpt["torch_rng"])
    return TrainState(**ckpt["state"])
