"""Fine-tuning a parent artifact on a site's eyes, through the project's trainer (``training.loop.Trainer``).

Two recipes, one knob apart:

- ``posterior-prior`` (variational continual learning, seed paper §3.1 and appendix C): the ELBO on the site's
  eyes with the **parent's posterior as the prior**, ``NLL + λ · KL(q ‖ q_parent) / N_site``: the KL is to the
  parent's μ and σ frozen when the run starts (``models.nn.priors.PosteriorPrior``), so a weight moves from where
  the old programme put it only as far as the site's photographs pay for. λ (``--prior-weight``) is 1 for the
  full ELBO; a smaller λ tempers it and the card says so.
- ``finetune``: the parent's means fitted to the site by the NLL alone, its σ kept (the trainer's means-only
  epochs for the whole run): the baseline that is free to forget.

The run lives in ``<run>/tune``: checkpoints every few steps, so that a run stopped and started again continues
exactly (the trainer's resume). The model adapted is the last epoch's: no epoch is chosen on the calibration
eyes, which only the operating point and its promise see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from models.artifact import Artifact
from models.nn.priors import PARENT_POSTERIOR
from training.checkpoint import load_checkpoint
from training.config import Precision, TrainConfig
from training.data.dataset import ManifestDataset
from training.data.manifest import ManifestRow
from training.data.prepare import PreparedData
from training.data.splits import DataSplit
from training.loop import Trainer, build_model
from training.options import option

TUNING_MODES = ("posterior-prior", "finetune")
TUNING = "fine-tuning (posterior-prior, finetune)"


@dataclass(frozen=True)
class TuneOptions:
    """How the fine-tuning modes train; each option declared once here (``training.options``: the flags of
    ``radscreen-train adapt`` are generated from these fields)."""

    epochs: int = field(default=8, metadata=option("fine-tuning epochs", TUNING))
    lr: float = field(default=5e-5, metadata=option(
        "learning rate of the means (small: the parent is already a screening network)", TUNING))
    rho_lr: float = field(default=1e-3, metadata=option("learning rate of ρ", TUNING))
    prior_weight: float = field(default=1.0, metadata=option(
        "posterior-prior: λ in NLL + λ·KL(q ‖ parent)/N; 1 = the full ELBO", TUNING))
    batch_size: int = field(default=16, metadata=option("fine-tuning batch", TUNING))
    seed: int = 0  # the request's seed (adapt --seed): split, fine-tuning and cross-fitting alike
    precision: Precision = field(default="auto", metadata=option(
        "fine-tuning autocast (auto: bf16 where the CPU runs it natively)", TUNING))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def tune_config(parent_dir: Path, parent: Artifact, mode: str, out: Path, options: TuneOptions,
                cache_dir: Path) -> TrainConfig:
    """The trainer's configuration of one adaptation run."""
    if mode not in TUNING_MODES:
        raise ValueError(f"no fine-tuning in mode {mode!r}; expected one of {', '.join(TUNING_MODES)}")
    cfg, arch = parent.config, parent.config.architecture
    prior = mode == "posterior-prior"
    return TrainConfig(
        data=str(out), out=str(out), layout="manifest", name=cfg.name, version=cfg.version,
        model=f"{arch.layer}_vgg16_star", width=arch.width, input_size=arch.input_size,
        prior={"kind": PARENT_POSTERIOR} if prior else {"kind": "unit_gaussian"},
        epochs=options.epochs, nll_epochs=0 if prior else options.epochs, batch_size=options.batch_size,
        lr=options.lr, rho_lr=options.rho_lr, kl_weight=options.prior_weight if prior else 1.0,
        eval_samples=4, val_every=options.epochs, checkpoint_every=10, preprocessing=cfg.input.preprocessing,
        precision=options.precision, seed=options.seed, draw_seed=cfg.serving.draw_seed,
        mc_samples=cfg.serving.mc_samples, head_draws=cfg.serving.head_draws,
        views="2" if cfg.serving.test_time_flip else "1",
        pass_budget=cfg.pass_budget, grad_sd_samples=0, init_from=str(parent_dir), cache_dir=str(cache_dir),
        workers=0)


def tune(config: TrainConfig, train: list[ManifestRow], calibration: list[ManifestRow], parent: Artifact, *,
         progress: bool = True) -> nn.Module:
    """Train (or resume) ``config``'s run on ``train``; returns the last epoch's model on the CPU, in eval mode.
    The calibration eyes are the trainer's validation set only for its log (never to choose an epoch)."""
    transform = parent.image_transform()
    datasets = [ManifestDataset(rows, transform=transform).use_cache(Path(config.cache_dir or config.out),
                                                                    progress=progress)
                for rows in (train, calibration)]
    empty = ManifestDataset([], transform=transform)
    data = PreparedData(DataSplit(train, calibration, []), datasets[0], datasets[1], empty,
                        tuple(parent.config.input.mean), tuple(parent.config.input.std))  # type: ignore[arg-type]
    Trainer(config, progress=progress).fit(data)
    ckpt = load_checkpoint(Path(config.out))
    if ckpt is None:
        raise RuntimeError(f"{config.out}: the run ended without a checkpoint")
    model = build_model(config)
    model.load_state_dict(ckpt["model"])
    return model.to(torch.device("cpu")).eval()
