"""The training loop: NLL-only epoch(s) on the means, then the full ELBO; exact resume; best by validation NLL.

``Trainer.fit`` reads as the loop it is: start or resume (``_start``), then per epoch ``_train_epoch``, whose
``train_step`` is one optimiser step (augment, normalise, forward the weight draws, NLL + KL/N, backward,
step). The data (manifest, patient split, datasets, input statistics) come from ``training.data.prepare``;
the recipe (optimiser, μ/ρ parameter groups, lr schedule) from ``training.optim``; the per-epoch posterior
diagnostics (σ per layer, Δρ against its step budget, NLL-gradient SD) from ``training.diagnostics``; the
epoch rows are written by ``training.history``.

The best epoch minimises the validation NLL (or NLL + KL/N with ``select_by="val_elbo"``), never maximises
AUC: AUC ignores calibration, and the uncertainty the product sells needs a proper scoring rule.

The trainer knows nothing about the architecture beyond ``create_model``; randomness comes only from
generators whose states are checkpointed (data order is derived from (seed, epoch)), so a run killed at any
step and resumed ends in exactly the state of an uninterrupted run. That is tested bitwise on CPU; on CUDA
the trainer switches cuDNN to deterministic kernels and TF32 off, which makes the promise hold on the same
GPU, driver and library versions (the ``gpu`` test ``tests/gpu/test_training_cuda.py`` checks it there).

On CUDA the step stays on the device (``training.device_data``): the weight noise and the augmentation are
drawn from generators on the device, cached or packed pixels are copied to the GPU once and batches are cut
there, the running sums stay on the device and are read every ``LOG_EVERY`` steps, validation runs under the
training autocast every ``val_every`` epochs, and checkpoints are written by time (``checkpoint_minutes``,
10 by default there) rather than every ``checkpoint_every`` steps.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.profiler import record_function
from tqdm import tqdm

from models.artifact.schema import ServingDraws
from models.image.preprocessing import FOV_LOCAL_MEAN
from models.nn.kl import bayesian_layers, kl_divergence
from models.nn.priors import PosteriorPrior, Prior, is_parent_posterior, prior_from_config
from models.nn.registry import create_model
from models.nn.sampling import sampling_generator, stochastic_layers, use_means
from models.nn.vgg import mc_logits
from models.platform import compute
from models.platform.cpu import CpuCapability
from models.platform.cuda import use_deterministic_cudnn, use_ieee_fp32
from training.checkpoint import TrainState, load_checkpoint, restore, save_checkpoint
from training.config import Precision, TrainConfig
from training.data.augment import augment_batch, color_jitter, frame_cuts, normalise
from training.data.prepare import PreparedData, prepare_data
from training.data.sampler import weighted_order
from training.device_data import DeviceSums, ResidentPixels, StepResult, epoch_batches, loader_workers
from training.diagnostics import budget_ratio, layer_budget_ratios, nll_gradient_sd, rho_shift, sigma_stats
from training.elbo import elbo_loss
from training.evaluation.by_source import per_source_metrics
from training.history import write_history
from training.optim import RHO_GROUP, apply_schedule, build_optimizer, group_lr
from training.predict import mc_probabilities
from training.warm_start import check_same_source, load_into, rho_reference, save_init_record
from training.weight_draws import FlatPosterior

log = logging.getLogger(__name__)
BEST_WEIGHTS = "best.safetensors"
LOG_EVERY = 25  # steps between reads of the running sums (progress bar): the only per-step host syncs
CUDA_CHECKPOINT_MINUTES = 10.0  # checkpoint_minutes on CUDA when the config leaves it unset


STEP_PHASES = ("augment", "forward", "kl", "backward", "optimizer")  # train_step's profiler ranges, in order
TRAIN_FIX = "Use --precision fp32, or auto to take bf16 only where it is native."


def training_runtime(config: TrainConfig, *, cpu: CpuCapability | None = None) -> compute.Runtime:
    """Where and in which arithmetic a run trains: ``models.platform.compute.resolve``, the service's rule too.

    ``--device auto`` -> cuda when available, else cpu; ``--precision auto`` -> bf16 only where the device runs
    it natively (a CUDA device with native bf16, or a CPU with AVX-512-BF16/AMX), else fp32. An explicit
    ``bf16`` where it would be emulated is refused: oneDNN's emulation on an AVX2-only CPU ran the network ~70x
    slower than fp32 (docs/results-benchmarks.md), which turns an hour's run into days with no message. ``cpu`` is
    injected by tests; default: this machine.
    """
    try:
        return compute.resolve(device=config.device, precision=config.precision, cpu=cpu, fix=TRAIN_FIX)
    except RuntimeError as exc:
        raise ValueError(f"--device {config.device}: {exc}") from exc


def derived_seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def build_model(config: TrainConfig) -> nn.Module:
    return create_model(config.model, width=config.width, input_size=config.input_size, rho_init=config.rho_init)


def _batches(n: int, config: TrainConfig, epoch: int, sources: Sequence[str | None] = ()) -> list[list[int]]:
    """The epoch's batches of training indices: a permutation, or with ``source_weights`` each source's share
    of the draws set by its weight (``training.data.sampler``); a pure function of (seed, epoch)."""
    generator = torch.Generator().manual_seed(derived_seed(config.seed, epoch, 1))
    order = (weighted_order(sources, config.source_weights, generator) if config.source_weights
             else torch.randperm(n, generator=generator))
    batches = [order[i:i + config.batch_size].tolist() for i in range(0, n, config.batch_size)]
    return batches[: config.max_steps_per_epoch] if config.max_steps_per_epoch else batches


def validation_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    p = probs.mean(axis=0).clip(1e-7, 1 - 1e-7)
    nll = float(-(labels * np.log(p) + (1 - labels) * np.log(1 - p)).mean())
    acc = float(((p >= 0.5) == (labels == 1)).mean())
    auc = float(roc_auc_score(labels, p)) if 0 < labels.sum() < len(labels) else float("nan")
    return {"val_nll": nll, "val_accuracy": acc, "val_auc": auc}


@dataclass
class Run:
    """What one ``fit`` call trains, and the state that makes it resumable (checkpointed together)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    generators: dict[str, torch.Generator]  # "augment" and "weights" on the device, seeded from (seed, 2), (seed, 3)
    state: TrainState
    prior: Prior
    bayesian: bool  # the model has Bayesian layers: its loss gains KL/N after the means-only epochs
    autocast: AbstractContextManager[Any]  # bf16 autocast, or nothing (fp32)
    probe: tuple[torch.Tensor, torch.Tensor]  # the fixed batch of the gradient-SD probe: normalised x, y
    resident: ResidentPixels | None = None  # the training pixels on the GPU (CUDA with cached or packed pixels)
    flat: FlatPosterior | None = None  # every layer's draws and the KL at once (training.weight_draws), or layer-wise
    last_checkpoint: float = 0.0  # time.monotonic() of the last checkpoint this call wrote (or of its start)


@dataclass
class StepBudget:
    """The optimiser steps one ``fit`` call may still take (``None``: no limit)."""

    left: int | None

    def take(self) -> bool:
        """Count one step; True once the budget is spent."""
        if self.left is None:
            return False
        self.left -= 1
        return self.left <= 0


class Trainer:
    """Fits one model into ``config.out``; ``fit()`` resumes from the checkpoint there if one exists."""

    def __init__(self, config: TrainConfig, *, progress: bool = True, cpu: CpuCapability | None = None) -> None:
        self.runtime = training_runtime(config, cpu=cpu)
        self.device = torch.device(self.runtime.device)
        # On CUDA: fp32 is IEEE fp32 (not TF32), and cuDNN picks fixed deterministic kernels so that a
        # resumed run repeats an uninterrupted one on the same GPU and library versions (models.platform.cuda).
        use_ieee_fp32(self.device)
        use_deterministic_cudnn(self.device)
        # "auto" is resolved once, here, so config.json, the resume check and the card name what ran
        self.config = replace(config, precision=cast(Precision, self.runtime.precision))  # auto/fp32/bf16 asked
        if self.device.type == "cuda" and config.checkpoint_minutes is None:  # by time there, not by steps
            self.config = replace(self.config, checkpoint_minutes=CUDA_CHECKPOINT_MINUTES)
        self.run_dir = Path(config.out)
        self.progress = progress
        self.rho_origin: float | dict[str, torch.Tensor] = config.rho_init  # where Δρ is measured from
        self.closing = False  # the epoch in progress is the last one a deadline allows (fit)

    def _check_resume(self, ckpt: dict[str, Any]) -> None:
        saved = TrainConfig.from_dict(ckpt["config"]).resume_key()
        now = self.config.resume_key()
        diff = {k: (saved[k], now[k]) for k in now if saved.get(k) != now[k]}
        if diff:
            raise ValueError(f"{self.run_dir}: the checkpoint was made with different settings {diff}; "
                             "use a new --out directory or --restart.")

    def fit(self, data: PreparedData | None = None, *, stop_after_steps: int | None = None,
            deadline: float | None = None) -> TrainState:
        """Train to ``config.epochs`` (resuming from the run directory's checkpoint if present).

        ``stop_after_steps`` ends the call after that many optimiser steps with a checkpoint written — a
        step budget for preemptible or time-sliced machines; calling ``fit`` again continues exactly.
        ``deadline`` (``time.monotonic()``) ends it at the end of an epoch when another epoch as long as the
        last would pass it (a lease's time budget), with a checkpoint written.
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(self.config.seed)
        data = data or prepare_data(self.config)
        run = self._start(data)
        if self.config.init_from and not run.state.history and run.state.global_step == 0:
            self._validate_starting_point(run, data)
        budget = StepBudget(stop_after_steps)
        while run.state.epoch < self.config.epochs:
            last = float(run.state.history[-1]["seconds"]) if run.state.history else 0.0
            # the epoch the deadline will end on is validated whatever val_every says: it may be the best
            self.closing = deadline is not None and time.monotonic() + 2 * last > deadline
            if not self._train_epoch(run, data, budget):
                break  # the step budget ran out mid-epoch: a checkpoint holds the place
            last = float(run.state.history[-1]["seconds"])
            if deadline is not None and run.state.epoch < self.config.epochs and time.monotonic() + last > deadline:
                self._checkpoint(run)
                log.warning("time budget: stopping after epoch %d of %d", run.state.epoch, self.config.epochs)
                break
        return run.state

    def _start(self, data: PreparedData) -> Run:
        """The model, optimiser and generators, restored from the run's checkpoint or freshly started."""
        cfg = self.config
        model = build_model(cfg).to(self.device)
        bayesian = bool(bayesian_layers(model))
        prior = prior_from_config(cfg.prior)
        optimizer = build_optimizer(model, cfg)
        # on the training device: noise drawn on a CPU generator costs a copy (and ~90 ms at 512 px) each step
        gens = {"augment": torch.Generator(self.device).manual_seed(derived_seed(cfg.seed, 2)),
                "weights": torch.Generator(self.device).manual_seed(derived_seed(cfg.seed, 3))}
        if self.device.type != "cpu":  # the draws the host must read (the blur's sizes) stay on the host
            gens["augment_host"] = torch.Generator().manual_seed(derived_seed(cfg.seed, 6))
        ckpt = load_checkpoint(self.run_dir)
        if ckpt is not None:
            self._check_resume(ckpt)
        self.rho_origin = cfg.rho_init
        if cfg.init_from:  # the artifact's posterior: the starting point, and the origin of this run's Δρ
            source = load_into(model, cfg.init_from, preprocessing=cfg.preprocessing)
            check_same_source(self.run_dir, source)
            self.rho_origin = rho_reference(model)
            if is_parent_posterior(cfg.prior):  # frozen here, before a checkpoint moves the posterior on
                prior = PosteriorPrior.from_model(model)
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
        autocast = self.runtime.autocast()  # bf16 autocast, or nothing (fp32)
        probe = _probe_batch(data, cfg, self.device)
        resident = (ResidentPixels(data.train, self.device)
                    if self.device.type == "cuda" and data.train.pixels is not None else None)
        flat = FlatPosterior(model) if bayesian and FlatPosterior.supports(model, prior) else None
        if flat is not None and {id(m) for m in stochastic_layers(model)} != {id(m) for m in flat.layers}:
            flat = None  # another stochastic layer (dropout) draws from the generator: the layer-wise path
        return Run(model, optimizer, gens, state, prior, bayesian, autocast, probe, resident, flat, time.monotonic())

    def _validate_starting_point(self, run: Run, data: PreparedData) -> None:
        """Epoch 0 of a warm start: the artifact as loaded, validated like every epoch. It competes for
        "best", so a continuation that never beats its starting point hands that starting point on unchanged."""
        started = time.monotonic()
        row: dict[str, Any] = {
            "epoch": 0, "phase": "init", "lr": 0.0, "rho_lr": 0.0, "train_nll": float("nan"),
            "train_kl": float("nan"), "train_kl_per_example": float("nan"), "train_accuracy": float("nan"),
            **self._validation_row(run, data, None)}
        self._close_epoch(row, started, run)

    def _train_epoch(self, run: Run, data: PreparedData, budget: StepBudget) -> bool:
        """Train the epoch in progress from where it stands, then validate, log and checkpoint it.

        Returns False when ``budget`` runs out before the epoch's last step (checkpointed there).
        """
        cfg, state = self.config, run.state
        means_only = state.epoch < cfg.nll_epochs
        apply_schedule(run.optimizer, cfg, state.epoch)
        batches = _batches(len(data.train), cfg, state.epoch, [row.source for row in data.train.rows])
        sums = DeviceSums(state.epoch_sums or {"nll": 0.0, "kl": 0.0, "correct": 0.0, "n": 0.0, "steps": 0.0},
                          self.device)
        # an epoch resumed mid-way counts the time its earlier calls spent on the steps they checkpointed
        started = time.monotonic() - sums.sums.get("seconds", 0.0)
        bar = tqdm(epoch_batches(run.resident, data.train, batches[state.step_in_epoch:], self.device,
                                 loader_workers(cfg.workers, self.device)), total=len(batches),
                   initial=state.step_in_epoch, disable=not self.progress,
                   desc=f"epoch {state.epoch + 1}/{cfg.epochs} {'nll(means)' if means_only else 'elbo'}")
        run.model.train()
        for x, y in bar:
            step = self.train_step(run, x, y, data, means_only=means_only)
            step.add_to(sums)
            sums.sums["seconds"] = time.monotonic() - started
            state.step_in_epoch += 1
            state.global_step += 1
            state.epoch_sums = sums.sums
            if self.progress and state.global_step % LOG_EVERY == 0:  # the one read of the sums (a sync)
                read = sums.read()
                bar.set_postfix(nll=f"{read['nll'] / read['n']:.3f}", kl=f"{read['kl'] / read['steps']:.3g}")
            spent, mid_epoch = budget.take(), state.step_in_epoch < len(batches)
            if mid_epoch and (spent or self._checkpoint_due(run)):
                sums.read()
                self._checkpoint(run)
            if mid_epoch and spent:
                bar.close()
                return False
        self._close_epoch(self._epoch_row(run, data, sums.read(), means_only), started, run)
        state.epoch += 1
        state.step_in_epoch = 0
        state.epoch_sums = {}
        if state.epoch == cfg.epochs or cfg.checkpoint_minutes is None or self._checkpoint_due(run):
            self._checkpoint(run)
        return True

    def _checkpoint_due(self, run: Run) -> bool:
        """A mid-run checkpoint: ``checkpoint_minutes`` since the last one when set, else every
        ``checkpoint_every`` steps (None: none mid-epoch)."""
        cfg = self.config
        if cfg.checkpoint_minutes is not None:
            return time.monotonic() - run.last_checkpoint >= cfg.checkpoint_minutes * 60
        return cfg.checkpoint_every is not None and run.state.global_step % cfg.checkpoint_every == 0

    def train_step(self, run: Run, x: torch.Tensor, y: torch.Tensor, data: PreparedData, *,
                   means_only: bool) -> StepResult:
        """One optimiser step on a batch: x [B, C, H, W] in [0, 1] and y [B] on the training device.

        Augment (seeded), normalise with the run's statistics, forward ``train_samples`` weight draws, then
        the loss: the NLL of the draws' logits, plus KL/N (``elbo_loss``) once past the means-only epochs.
        """
        cfg, model, gens = self.config, run.model, run.generators
        with record_function(STEP_PHASES[0]):  # the phases name themselves in a profile (benchmarks/train_step_host.py)
            x = self._augment(x, gens)
        elbo = run.bayesian and not means_only
        flat = run.flat if elbo else None  # every layer's draws and the KL at once (training.weight_draws)
        with record_function(STEP_PHASES[1]):
            x = normalise(x, data.mean, data.std).contiguous(memory_format=torch.channels_last)
            draw = flat.draw(cfg.train_samples, gens["weights"]) if flat is not None else None
            # the flat draw covers every stochastic layer (Run.flat): none of them draws, so none needs the generator
            sampling = (flat.drawn(draw) if flat is not None and draw is not None
                        else _layer_sampling(model, gens["weights"], means_only))
            with sampling, run.autocast:
                logits = mc_logits(model, x, cfg.train_samples)[..., 0].float()  # [S, B]
            nll = F.binary_cross_entropy_with_logits(logits, y.expand_as(logits))
        with record_function(STEP_PHASES[2]):
            if flat is not None and draw is not None:
                kl = flat.kl(draw, run.prior)
            else:
                kl = kl_divergence(model, run.prior) if elbo else torch.zeros((), device=nll.device)
            loss = elbo_loss(nll, kl, len(data.train), cfg.kl_weight) if elbo else nll
        with record_function(STEP_PHASES[3]):
            run.optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with record_function(STEP_PHASES[4]):
            apply_schedule(run.optimizer, cfg, run.state.epoch, run.state.global_step)
            run.optimizer.step()
        if elbo:  # the most any ρ can have moved with Adam: Σ lr over ELBO steps
            run.state.rho_budget += group_lr(run.optimizer, RHO_GROUP)
        correct = ((logits.mean(0) > 0) == (y > 0.5)).sum()
        return StepResult(nll=nll.detach(), kl=kl.detach(), correct=correct, n=len(y))

    def _augment(self, x: torch.Tensor, gens: dict[str, torch.Generator]) -> torch.Tensor:
        """The step's augmentation of x [B, C, H, W] in [0, 1]: the D.1 warp, then the framings and the
        photometric changes as configured, every draw from the run's augmentation generators."""
        cfg = self.config
        if not cfg.augment:
            return x
        fill = 0.5 if cfg.preprocessing == FOV_LOCAL_MEAN else 0.0  # the surround's value
        x = augment_batch(x, generator=gens["augment"], fill=fill)
        if cfg.frame_cuts:
            x = frame_cuts(x, generator=gens["augment"], fill=fill or 0.5)
        if cfg.color_jitter:
            x = color_jitter(x, generator=gens["augment"], centre=fill or 0.5, host_generator=gens.get("augment_host"))
        return x

    def _epoch_row(self, run: Run, data: PreparedData, sums: dict[str, float], means_only: bool) -> dict[str, Any]:
        """The history row of the epoch just trained: its schedule, training sums, validation and diagnostics."""
        n_train = len(data.train)
        return {
            "epoch": run.state.epoch + 1, "phase": "nll_means" if means_only else "elbo",
            "lr": group_lr(run.optimizer, "mu"), "rho_lr": group_lr(run.optimizer, RHO_GROUP),
            "train_nll": sums["nll"] / max(sums["n"], 1), "train_kl": sums["kl"] / max(sums["steps"], 1),
            "train_kl_per_example": sums["kl"] / max(sums["steps"], 1) / n_train,
            "train_accuracy": sums["correct"] / max(sums["n"], 1),
            **self._validation_row(run, data, run.state.epoch),
        }

    def _checkpoint(self, run: Run) -> None:
        run.last_checkpoint = time.monotonic()
        save_checkpoint(self.run_dir, model=run.model, optimizer=run.optimizer, state=run.state,
                        generators=run.generators, config=self.config.to_dict())

    def _validation_row(self, run: Run, data: PreparedData, epoch: int | None) -> dict[str, Any]:
        """Validation metrics (the serving draws) and the posterior diagnostics at the end of 0-based ``epoch``
        (None: before the first step of a warm start)."""
        cfg = self.config
        last = epoch is None or epoch + 1 >= cfg.epochs or self.closing
        if last or (epoch is not None and (epoch + 1) % cfg.val_every == 0):
            with run.autocast:  # the serving draws in the training precision (bf16 on a GPU that has it)
                probs, labels = mc_probabilities(run.model, data.val, mean=data.mean, std=data.std,
                                                 draws=ServingDraws(cfg.eval_samples, cfg.draw_seed),
                                                 workers=loader_workers(cfg.workers, self.device))
            metrics = {**validation_metrics(probs, labels), **per_source_metrics(probs, labels, data.val.rows)}
        else:  # not validated this epoch (val_every): no score, so it cannot be chosen as the best
            metrics = {"val_nll": float("nan"), "val_accuracy": float("nan"), "val_auc": float("nan")}
        row = {**metrics, **self._posterior_diagnostics(run, len(data.train), epoch)}
        row["val_elbo"] = row["val_nll"] + row["kl_per_example"]
        return row

    def _close_epoch(self, row: dict[str, Any], started: float, run: Run) -> None:
        """Log ``row`` and keep the weights when it is the best so far by ``select_by`` (the caller checkpoints)."""
        state = run.state
        row["seconds"] = time.monotonic() - started
        state.history.append(row)
        write_history(self.run_dir, state.history)
        log.info("epoch %d: %s", row["epoch"], row)
        score = -float(row[self.config.select_by])
        if not math.isnan(score) and score > state.best_score:
            state.best_score, state.best_epoch = score, int(row["epoch"])
            save_file({k: v.detach().cpu().contiguous() for k, v in run.model.state_dict().items()},
                      str(self.run_dir / BEST_WEIGHTS))

    def _posterior_diagnostics(self, run: Run, n_train: int, epoch: int | None) -> dict[str, Any]:
        """σ statistics, Δρ and its budget, KL/N and the NLL-gradient SD at the end of an epoch."""
        cfg, model, (x, y), rho_budget = self.config, run.model, run.probe, run.state.rho_budget
        out: dict[str, Any] = {}
        seed = derived_seed(cfg.seed, 4, epoch) if epoch is not None else derived_seed(cfg.seed, 5)
        if cfg.grad_sd_samples:
            out.update(nll_gradient_sd(model, x, y, samples=cfg.grad_sd_samples, mc_per_estimate=cfg.train_samples,
                                       seed=seed))
        else:
            out.update({"grad_sd_mu": float("nan"), "grad_sd_rho": float("nan")})
        kl_n = 0.0
        if bayesian_layers(model):
            with torch.no_grad(), sampling_generator(model, torch.Generator(x.device).manual_seed(seed)):
                mc_logits(model, x, 1)  # one seeded draw: the KL's cross-entropy term uses the last sample
                kl_n = float(kl_divergence(model, run.prior)) / n_train
        shift = rho_shift(model, self.rho_origin)
        out.update({"kl_per_example": kl_n, "rho_budget": rho_budget, **shift,
                    "rho_budget_ratio": budget_ratio(shift.get("rho_shift_mean"), rho_budget),
                    **layer_budget_ratios(shift, rho_budget),
                    **sigma_stats(model)})
        return out


@contextmanager
def _layer_sampling(model: nn.Module, generator: torch.Generator, means_only: bool) -> Iterator[None]:
    """Every stochastic layer draws its own from ``generator`` (or sits at its mean when ``means_only``)."""
    with sampling_generator(model, generator), use_means(model, means_only):
        yield


def _probe_batch(data: PreparedData, config: TrainConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed mini-batch (first training images, not augmented) for the per-epoch gradient-SD probe."""
    n = min(config.batch_size, len(data.train))
    items = [data.train[i] for i in range(n)]
    x = torch.stack([it[0] for it in items]).to(device)  # [B, C, H, W]
    y = torch.stack([torch.as_tensor(it[1]) for it in items]).float().to(device)  # [B]
    return normalise(x, data.mean, data.std), y
