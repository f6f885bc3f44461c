"""The training loop: NLL-only epoch(s) on the means, then the full ELBO; exact resume; best by validation NLL.

The recipe (optimiser, μ/ρ parameter groups, lr schedule) lives in ``training.optim``; the per-epoch
posterior diagnostics (σ per layer, Δρ against its step budget, NLL-gradient SD) in ``training.diagnostics``.
The best epoch minimises the validation NLL (or NLL + KL/N with ``select_by="val_elbo"``), never maximises
AUC: AUC ignores calibration, and the uncertainty the product sells needs a proper scoring rule.

The trainer knows nothing about the architecture beyond ``create_model``; randomness comes only from
generators whose states are checkpointed (data order is derived from (seed, epoch)), so a run killed at any
step and resumed ends in exactly the state of an uninterrupted run. That is tested bitwise on CPU; on CUDA
the trainer switches cuDNN to deterministic kernels and TF32 off, which makes the promise hold on the same
GPU, driver and library versions (the ``gpu`` test ``tests/gpu/test_cuda_training.py`` checks it there).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from models.cpu import CpuCapability, detect_cpu
from models.cuda import cuda_native_bf16, use_deterministic_cudnn, use_ieee_fp32
from models.kl import bayesian_layers, kl_divergence
from models.preprocessing import FOV_LOCAL_MEAN
from models.priors import Prior, prior_from_config
from models.registry import create_model
from models.sampling import sampling_generator, use_means
from models.vgg import mc_logits
from training.checkpoint import TrainState, load_checkpoint, restore, save_checkpoint
from training.config import TrainConfig
from training.data.augment import augment_batch, color_jitter, normalise
from training.data.dataset import ManifestDataset, channel_stats
from training.data.manifest import Manifest, read_aptos, read_eyepacs, read_manifest, read_odir, read_synthetic
from training.data.splits import DataSplit, split_by_patient
from training.diagnostics import budget_ratio, nll_gradient_sd, plot_training_curves, rho_shift, sigma_stats
from training.elbo import elbo_loss
from training.optim import RHO_GROUP, apply_schedule, build_optimizer, group_lr
from training.predict import mc_probabilities
from training.warm_start import (
    check_same_source,
    input_statistics,
    load_into,
    rho_reference,
    save_init_record,
)

log = logging.getLogger(__name__)
BEST_WEIGHTS = "best.safetensors"
CURVES_PNG = "training_curves.png"


def resolve_device(device: str) -> torch.device:
    """``auto`` → cuda when available, else cpu (the service's rule); ``cuda`` without a GPU is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device} was requested but no CUDA device is available; use auto or cpu.")
    return torch.device(device)


def resolve_precision(requested: str, device: torch.device, *,
                      cpu: CpuCapability | None = None) -> Literal["fp32", "bf16"]:
    """The autocast precision a run trains in: ``fp32``, or ``bf16`` only where ``device`` runs it natively.

    ``auto`` -> bf16 on a CUDA device with bf16 or a CPU with AVX-512-BF16/AMX (``models.cpu``), else fp32.
    An explicit ``bf16`` where it would be emulated is refused: oneDNN's emulation on an AVX2-only CPU ran
    the network ~70x slower than fp32 (docs/benchmarks.md), which turns an hour's run into days with no
    message. ``cpu`` is injected by tests; default: this machine.
    """
    if requested == "fp32":
        return "fp32"
    if device.type == "cuda":  # native only: torch's default answer counts emulation (T4, V100)
        native, where = cuda_native_bf16(), torch.cuda.get_device_name(device)
    else:
        capability = cpu or detect_cpu()
        native, where = capability.native_bf16, capability.summary()
    if native:
        return "bf16"
    if requested == "auto":
        return "fp32"
    raise ValueError(f"--precision bf16 was requested but {where} has no native bf16: autocast would be "
                     "emulated (measured ~70x slower than fp32 on an AVX2-only CPU, docs/benchmarks.md). "
                     "Use --precision fp32, or auto to take bf16 only where it is native.")


def derived_seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def _kaggle_paths(root: Path, csv_name: str, image_folder: str) -> tuple[Path, Path]:
    """The CSV and image folder of a Kaggle download: ``<root>/<csv_name>`` with the images in
    ``<root>/<image_folder>/`` (EyePACS ``train/``, APTOS ``train_images/``), or beside the CSV when that
    folder does not exist. ``root`` may also be the CSV itself."""
    csv_path = root / csv_name if root.is_dir() else root
    images = csv_path.parent / image_folder
    return csv_path, images if images.is_dir() else csv_path.parent


def read_rows(config: TrainConfig) -> Manifest:
    root = Path(config.data)
    if config.layout == "synthetic":
        return read_synthetic(root, gradable_only=config.gradable_only)
    if config.layout == "eyepacs":
        return read_eyepacs(*_kaggle_paths(root, "trainLabels.csv", "train"))
    if config.layout == "aptos":
        return read_aptos(*_kaggle_paths(root, "train.csv", "train_images"))
    if config.layout == "odir":
        return read_odir(root / "labels.csv" if root.is_dir() else root,
                         include_other_disease=config.include_other_disease)
    return read_manifest(root)


@dataclass
class PreparedData:
    split: DataSplit
    train: ManifestDataset
    val: ManifestDataset
    test: ManifestDataset
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


def prepare_data(config: TrainConfig) -> PreparedData:
    rows = read_rows(config)
    if rows.skipped:
        log.warning("%d manifest rows skipped: %s", len(rows.skipped), rows.skipped[:3])
    split = split_by_patient(rows, config.split, seed=config.effective_split_seed)
    if not split.train or not split.val:
        raise ValueError(f"{config.data}: too few images for a train/validation split ({len(rows)} rows).")
    pre = config.preprocessing
    train, val, test = (ManifestDataset(part, size=config.input_size, preprocessing=pre) for part in split)
    if config.cache_images:  # preprocess once: decoding + FOV fit + local mean cost more than a step per image
        for dataset in (train, val, test):
            dataset.use_cache(Path(config.out) / "cache", workers=max(config.workers, 2), progress=True)
    if config.init_from:  # a warm start keeps the input normalisation its weights were trained with
        mean, std = input_statistics(config.init_from, preprocessing=pre)
    else:
        mean, std = channel_stats(train, max_images=500)
    return PreparedData(split, train, val, test, mean, std)


def build_model(config: TrainConfig) -> nn.Module:
    return create_model(config.model, width=config.width, input_size=config.input_size, rho_init=config.rho_init)


def _batches(n: int, config: TrainConfig, epoch: int) -> list[list[int]]:
    order = torch.randperm(n, generator=torch.Generator().manual_seed(derived_seed(config.seed, epoch, 1)))
    batches = [order[i:i + config.batch_size].tolist() for i in range(0, n, config.batch_size)]
    return batches[: config.max_steps_per_epoch] if config.max_steps_per_epoch else batches


def validation_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    p = probs.mean(axis=0).clip(1e-7, 1 - 1e-7)
    nll = float(-(labels * np.log(p) + (1 - labels) * np.log(1 - p)).mean())
    acc = float(((p >= 0.5) == (labels == 1)).mean())
    auc = float(roc_auc_score(labels, p)) if 0 < labels.sum() < len(labels) else float("nan")
    return {"val_nll": nll, "val_accuracy": acc, "val_auc": auc}


class Trainer:
    """Fits one model into ``config.out``; ``fit()`` resumes from the checkpoint there if one exists."""

    def __init__(self, config: TrainConfig, *, progress: bool = True, cpu: CpuCapability | None = None) -> None:
        self.device = resolve_device(config.device)
        # On CUDA: fp32 is IEEE fp32 (not TF32), and cuDNN picks fixed deterministic kernels so that a
        # resumed run repeats an uninterrupted one on the same GPU and library versions (models.cuda).
        use_ieee_fp32(self.device)
        use_deterministic_cudnn(self.device)
        # "auto" is resolved once, here, so config.json, the resume check and the card name what ran
        self.config = replace(config, precision=resolve_precision(config.precision, self.device, cpu=cpu))
        self.run_dir = Path(config.out)
        self.progress = progress
        self.rho_origin: float | dict[str, torch.Tensor] = config.rho_init  # where Δρ is measured from

    def _check_resume(self, ckpt: dict[str, Any]) -> None:
        saved = TrainConfig.from_dict(ckpt["config"]).resume_key()
        now = self.config.resume_key()
        diff = {k: (saved[k], now[k]) for k in now if saved.get(k) != now[k]}
        if diff:
            raise ValueError(f"{self.run_dir}: the checkpoint was made with different settings {diff}; "
                             "use a new --out directory or --restart.")

    def fit(self, data: PreparedData | None = None, *, stop_after_steps: int | None = None) -> TrainState:
        """Train to ``config.epochs`` (resuming from the run directory's checkpoint if present).

        ``stop_after_steps`` ends the call after that many optimiser steps with a checkpoint written — a
        step budget for preemptible or time-sliced machines; calling ``fit`` again continues exactly.
        """
        cfg = self.config
        steps_this_call = 0
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.seed)
        data = data or prepare_data(cfg)
        model = build_model(cfg).to(self.device)
        bayesian = bool(bayesian_layers(model))
        prior = prior_from_config(cfg.prior)
        optimizer = build_optimizer(model, cfg)
        gens = {"augment": torch.Generator().manual_seed(derived_seed(cfg.seed, 2)),
                "weights": torch.Generator().manual_seed(derived_seed(cfg.seed, 3))}
        ckpt = load_checkpoint(self.run_dir)
        if ckpt is not None:
            self._check_resume(ckpt)
        self.rho_origin = cfg.rho_init
        if cfg.init_from:  # the artifact's posterior: the starting point, and the origin of this run's Δρ
            source = load_into(model, cfg.init_from, preprocessing=cfg.preprocessing)
            check_same_source(self.run_dir, source)
            self.rho_origin = rho_reference(model)
        if ckpt is not None:
            state = restore(ckpt, model=model, optimizer=optimizer, generators=gens)
            log.info("resuming %s at epoch %d step %d", self.run_dir, state.epoch, state.step_in_epoch)
        else:
            state = TrainState()
            if cfg.init_from:
                save_init_record(self.run_dir, source)
            cfg.save(self.run_dir / "config.json")
            (self.run_dir / "data.json").write_text(json.dumps(
                {"n_train": len(data.train), "n_val": len(data.val), "n_test": len(data.test),
                 "mean": data.mean, "std": data.std}, indent=2))
        n_train = len(data.train)
        autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16) if cfg.precision == "bf16"
                    else nullcontext())
        probe_x, probe_y = _probe_batch(data, cfg, self.device)
        if cfg.init_from and not state.history and state.global_step == 0:
            # epoch 0: the artifact as loaded, validated like every epoch; it competes for "best", so a
            # continuation that never beats its starting point hands that starting point on unchanged
            started = time.monotonic()
            init_row: dict[str, Any] = {
                "epoch": 0, "phase": "init", "lr": 0.0, "rho_lr": 0.0, "train_nll": float("nan"),
                "train_kl": float("nan"), "train_kl_per_example": float("nan"), "train_accuracy": float("nan"),
                **self._validation_row(model, data, prior, probe_x, probe_y, n_train, None, state.rho_budget)}
            self._close_epoch(init_row, started, model, state)
        while state.epoch < cfg.epochs:
            epoch = state.epoch
            means_only = epoch < cfg.nll_epochs
            apply_schedule(optimizer, cfg, epoch)
            batches = _batches(n_train, cfg, epoch)
            loader = DataLoader(data.train, batch_sampler=batches[state.step_in_epoch:], num_workers=cfg.workers)
            sums = state.epoch_sums or {"nll": 0.0, "kl": 0.0, "correct": 0.0, "n": 0.0, "steps": 0.0}
            # an epoch resumed mid-way counts the time its earlier calls spent on the steps they checkpointed
            started = time.monotonic() - sums.get("seconds", 0.0)
            bar = tqdm(loader, total=len(batches), initial=state.step_in_epoch, disable=not self.progress,
                       desc=f"epoch {epoch + 1}/{cfg.epochs} {'nll(means)' if means_only else 'elbo'}")
            model.train()
            for x, y, _ in bar:
                x, y = x.to(self.device), y.to(self.device)
                if cfg.augment:
                    fill = 0.5 if cfg.preprocessing == FOV_LOCAL_MEAN else 0.0  # the surround's value
                    x = augment_batch(x, generator=gens["augment"], fill=fill)
                    if cfg.color_jitter:
                        x = color_jitter(x, generator=gens["augment"], centre=fill or 0.5)
                x = normalise(x, data.mean, data.std).contiguous(memory_format=torch.channels_last)
                with sampling_generator(model, gens["weights"]), use_means(model, means_only), autocast:
                    logits = mc_logits(model, x, cfg.train_samples)[..., 0].float()  # [S, B]
                nll = F.binary_cross_entropy_with_logits(logits, y.expand_as(logits))
                if bayesian and not means_only:
                    kl = kl_divergence(model, prior)
                    loss = elbo_loss(nll, kl, n_train)
                else:
                    kl = torch.zeros(())
                    loss = nll
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                apply_schedule(optimizer, cfg, epoch, state.global_step)
                optimizer.step()
                if bayesian and not means_only:  # the most any ρ can have moved with Adam: Σ lr over ELBO steps
                    state.rho_budget += group_lr(optimizer, RHO_GROUP)
                b = float(len(y))
                sums["nll"] += nll.item() * b
                sums["kl"] += kl.item()
                sums["correct"] += float(((logits.mean(0) > 0) == (y > 0.5)).sum().item())
                sums["n"] += b
                sums["steps"] += 1
                sums["seconds"] = time.monotonic() - started
                state.step_in_epoch += 1
                state.global_step += 1
                state.epoch_sums = sums
                bar.set_postfix(nll=f"{sums['nll'] / sums['n']:.3f}", kl=f"{kl.item():.3g}")
                steps_this_call += 1
                budget_spent = stop_after_steps is not None and steps_this_call >= stop_after_steps
                if (state.global_step % cfg.checkpoint_every == 0 or budget_spent) and state.step_in_epoch < len(
                        batches):
                    save_checkpoint(self.run_dir, model=model, optimizer=optimizer, state=state, generators=gens,
                                    config=cfg.to_dict())
                if budget_spent and state.step_in_epoch < len(batches):
                    bar.close()
                    return state
            row: dict[str, Any] = {
                "epoch": epoch + 1, "phase": "nll_means" if means_only else "elbo",
                "lr": group_lr(optimizer, "mu"), "rho_lr": group_lr(optimizer, RHO_GROUP),
                "train_nll": sums["nll"] / max(sums["n"], 1), "train_kl": sums["kl"] / max(sums["steps"], 1),
                "train_kl_per_example": sums["kl"] / max(sums["steps"], 1) / n_train,
                "train_accuracy": sums["correct"] / max(sums["n"], 1),
                **self._validation_row(model, data, prior, probe_x, probe_y, n_train, epoch, state.rho_budget),
            }
            self._close_epoch(row, started, model, state)
            state.epoch += 1
            state.step_in_epoch = 0
            state.epoch_sums = {}
            save_checkpoint(self.run_dir, model=model, optimizer=optimizer, state=state, generators=gens,
                            config=cfg.to_dict())
        return state

    def _validation_row(self, model: nn.Module, data: PreparedData, prior: Prior, probe_x: torch.Tensor,
                        probe_y: torch.Tensor, n_train: int, epoch: int | None, rho_budget: float) -> dict[str, Any]:
        """Validation metrics (the serving draws) and the posterior diagnostics at the end of 0-based ``epoch``
        (None: before the first step of a warm start)."""
        cfg = self.config
        probs, labels = mc_probabilities(model, data.val, mean=data.mean, std=data.std, samples=cfg.eval_samples,
                                         seed=cfg.draw_seed)
        row = {**validation_metrics(probs, labels),
               **self._posterior_diagnostics(model, prior, probe_x, probe_y, n_train, epoch, rho_budget)}
        row["val_elbo"] = row["val_nll"] + row["kl_per_example"]
        return row

    def _close_epoch(self, row: dict[str, Any], started: float, model: nn.Module, state: TrainState) -> None:
        """Log ``row`` and keep the weights when it is the best so far by ``select_by`` (the caller checkpoints)."""
        row["seconds"] = time.monotonic() - started
        state.history.append(row)
        self._write_log(state.history)
        log.info("epoch %d: %s", row["epoch"], row)
        score = -float(row[self.config.select_by])
        if not math.isnan(score) and score > state.best_score:
            state.best_score, state.best_epoch = score, int(row["epoch"])
            save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                      str(self.run_dir / BEST_WEIGHTS))

    def _posterior_diagnostics(self, model: nn.Module, prior: Prior, x: torch.Tensor, y: torch.Tensor,
                               n_train: int, epoch: int | None, rho_budget: float) -> dict[str, Any]:
        """σ statistics, Δρ and its budget, KL/N and the NLL-gradient SD at the end of an epoch."""
        cfg = self.config
        out: dict[str, Any] = {}
        seed = derived_seed(cfg.seed, 4, epoch) if epoch is not None else derived_seed(cfg.seed, 5)
        if cfg.grad_sd_samples:
            out.update(nll_gradient_sd(model, x, y, samples=cfg.grad_sd_samples, mc_per_estimate=cfg.train_samples,
                                       seed=seed))
        else:
            out.update({"grad_sd_mu": float("nan"), "grad_sd_rho": float("nan")})
        kl_n = 0.0
        if bayesian_layers(model):
            with torch.no_grad(), sampling_generator(model, torch.Generator().manual_seed(seed)):
                mc_logits(model, x, 1)  # one seeded draw: the KL's cross-entropy term uses the last sample
                kl_n = float(kl_divergence(model, prior)) / n_train
        shift = rho_shift(model, self.rho_origin)
        out.update({"kl_per_example": kl_n, "rho_budget": rho_budget, **shift,
                    "rho_budget_ratio": budget_ratio(shift.get("rho_shift_mean"), rho_budget),
                    **sigma_stats(model)})
        return out

    def _write_log(self, history: list[dict[str, Any]]) -> None:
        (self.run_dir / "history.json").write_text(json.dumps(history, indent=2) + "\n")
        with (self.run_dir / "history.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(history[0]))
            writer.writeheader()
            writer.writerows(history)
        plot_training_curves(history, self.run_dir / CURVES_PNG)


def _probe_batch(data: PreparedData, config: TrainConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed mini-batch (first training images, not augmented) for the per-epoch gradient-SD probe."""
    n = min(config.batch_size, len(data.train))
    items = [data.train[i] for i in range(n)]
    x = torch.stack([it[0] for it in items]).to(device)  # [B, C, H, W]
    y = torch.stack([torch.as_tensor(it[1]) for it in items]).float().to(device)  # [B]
    return normalise(x, data.mean, data.std), y


def iterate_history(run_dir: Path) -> Iterator[dict[str, Any]]:
    path = run_dir / "history.json"
    yield from (json.loads(path.read_text()) if path.is_file() else [])
