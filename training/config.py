"""Typed training configuration, saved as ``config.json`` next to every run."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from models.artifact.schema import MAX_MC_SAMPLES, MAX_PASS_BUDGET, PASS_BUDGET, ServingDraws
from models.preprocessing import FOV_LOCAL_MEAN
from models.transform import ImageTransform

Layout = Literal["synthetic", "eyepacs", "aptos", "odir", "manifest", "shards"]
LAYOUTS: tuple[str, ...] = ("synthetic", "eyepacs", "aptos", "odir", "manifest", "shards")
Optimizer = Literal["adam", "adamw"]
OPTIMIZERS: tuple[str, ...] = ("adam", "adamw")
Schedule = Literal["constant", "cosine", "step"]
SCHEDULES: tuple[str, ...] = ("constant", "cosine", "step")
SelectBy = Literal["val_nll", "val_elbo"]
SELECT_BY: tuple[str, ...] = ("val_nll", "val_elbo")
WeightsDtype = Literal["fp32", "fp16"]
Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16")
FlipMode = Literal["off", "on", "auto"]
FLIP_MODES: tuple[str, ...] = ("off", "on", "auto")


@dataclass(frozen=True)
class TrainConfig:
    data: str  # dataset root (synthetic / EyePACS folder), a manifest CSV, or packed shards (training.data.shards)
    out: str  # run directory: checkpoints, logs, reports
    layout: Layout = "synthetic"
    artifact: str | None = None  # where to write the model artifact (default: <out>/artifact)
    name: str = "radscreen-radial-vgg16"
    version: str = "0.1.0"
    model: str = "radial_vgg16_star"
    width: int = 46
    input_size: int = 256
    rho_init: float = -4.0  # the authors' recipe: σ0 = softplus(-4) ≈ 0.018
    prior: dict[str, Any] = field(default_factory=lambda: {"kind": "unit_gaussian"})
    epochs: int = 10
    nll_epochs: int = 1  # first epochs: NLL on the means only, then the full ELBO
    batch_size: int = 16
    lr: float = 1e-3  # learning rate of the means (and of every non-ρ parameter)
    train_samples: int = 1  # MC samples per step for the ELBO estimate
    eval_samples: int = 8  # MC samples per image for per-epoch validation
    max_steps_per_epoch: int | None = None
    checkpoint_every: int | None = 50  # steps between mid-epoch checkpoints (None: none); unless checkpoint_minutes
    # minutes between checkpoints instead of steps (one is also written at the end of the run); None: every
    # checkpoint_every steps and at every epoch end. On CUDA the trainer sets it to 10 when left unset.
    checkpoint_minutes: float | None = None
    val_every: int = 1  # epochs between validations (the last epoch is always validated)
    split: tuple[float, float, float] = (0.7, 0.15, 0.15)
    gradable_only: bool = True  # ungradable images are the quality gate's job, not the classifier's
    include_other_disease: bool = True  # ODIR: eyes with another eye disease and no DR count as non-referable
    augment: bool = True
    color_jitter: bool = True  # photometric augmentation (brightness, contrast, colour cast, blur) with augment
    frame_cuts: bool = True  # framing augmentation (camera frames, tight crops, notches) with augment
    cache_images: bool = True  # preprocess every image once into <out>/cache (uint8 memmap), then read that
    preprocessing: str = FOV_LOCAL_MEAN  # models.preprocessing contract; stored in the artifact
    precision: Precision = "fp32"  # autocast; "auto" = bf16 where the device runs it natively (models.cpu)
    seed: int = 0  # weights, data order, augmentation (and the split unless split_seed is set)
    split_seed: int | None = None  # seed of the patient-level split (None: the same as seed, as before)
    draw_seed: int = 20260
    mc_samples: int = 16  # serving draws stored in the artifact
    head_draws: int = 64  # draws of the last layer per serving draw (models.draws; 1 = the plain K draws)
    # serve (and calibrate) on each image and its mirror (ServingDraws.test_time_flip): "on", "off", or "auto" =
    # chosen on validation by training.evaluation.serving_choice at equal passes (K draws x 1 view against
    # K/2 draws x 2 views)
    test_time_flip: FlipMode = "off"
    pass_budget: int = PASS_BUDGET  # most forward passes per image the artifact may serve (draws x views)
    target_referral_rate: float = 0.2
    decision_threshold: float = 0.5
    # the screening operating point (training.evaluation.operating_point): when set, both thresholds are chosen
    # on validation so that at most this share of referable eyes is answered no_referable_dr; None: the
    # decision threshold above and the MI threshold for target_referral_rate
    max_missed_share: float | None = None
    n_bootstrap: int = 200
    workers: int | None = None  # DataLoader workers; None: training.device_data.loader_workers (0 on the CPU)
    device: str = "auto"  # auto = cuda when available, else cpu (as the service)
    # --- the optimisation recipe: defaults are the authors' (Adam lr 1e-3, amsgrad, ρ0 = -4) ---
    rho_lr: float | None = None  # learning rate of the ρ parameter group (None: the same as lr)
    kl_weight: float = 1.0  # λ in NLL + λ·KL/N: 1 = the full ELBO; < 1 tempers it (stated in the card)
    optimizer: Optimizer = "adam"
    amsgrad: bool = True
    weight_decay: float = 0.0  # decoupled (AdamW) or L2 (Adam); applied to the means only, never to ρ
    lr_schedule: Schedule = "constant"  # per-epoch factor on every group's lr
    lr_step_epochs: int = 30  # "step": multiply by lr_gamma every lr_step_epochs epochs
    lr_gamma: float = 0.1
    lr_warmup_steps: int = 0  # linear lr ramp over the run's first steps (for warm starts: training.optim)
    select_by: SelectBy = "val_nll"  # the best epoch minimises this (never AUC: uncertainty needs a proper score)
    grad_sd_samples: int = 8  # MC gradient estimates for the per-epoch SD of the NLL gradient (0: off)
    weights_dtype: WeightsDtype = "fp32"  # artifact storage of μ and ρ; fp16 rounding is measured in the card
    init_from: str | None = None  # artifact directory whose posterior the run starts from (training.warm_start)
    # --- several sources (a manifest with a "source" column: training.data.sources) ---
    # each source's share of the training draws (training.data.sampler); None: every image once an epoch
    source_weights: dict[str, float] | None = None
    exclude_copies: tuple[str, ...] = ()  # image copies left out of every split (e.g. EyePACS "stretched-256")
    train_only_copies: tuple[str, ...] = ()  # image copies trained on but left out of validation and test
    # share of the training patients trained on (within each source and referable stratum, nested: a learning
    # curve's smaller arm keeps a subset of a larger one's patients); validation and test are unchanged
    train_fraction: float = 1.0
    cache_dir: str | None = None  # where preprocessed images are kept (default: <out>/cache)

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"Unknown layout {self.layout!r}; expected one of: {', '.join(LAYOUTS)}.")
        if self.nll_epochs > self.epochs:
            raise ValueError(f"nll_epochs ({self.nll_epochs}) cannot exceed epochs ({self.epochs}).")
        if not 1 <= self.mc_samples <= MAX_MC_SAMPLES:  # the K its artifact will serve with
            raise ValueError(f"mc_samples must be in [1, {MAX_MC_SAMPLES}], got {self.mc_samples}.")
        self._check_pass_budget()
        for name in ("batch_size", "train_samples", "eval_samples", "head_draws", "epochs", "lr_step_epochs",
                     "val_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        for name, value, valid in (("optimizer", self.optimizer, OPTIMIZERS), ("lr_schedule", self.lr_schedule,
                                   SCHEDULES), ("select_by", self.select_by, SELECT_BY),
                                   ("precision", self.precision, PRECISIONS),
                                   ("weights_dtype", self.weights_dtype, ("fp32", "fp16")),
                                   ("test_time_flip", self.test_time_flip, FLIP_MODES)):
            if value not in valid:
                raise ValueError(f"Unknown {name} {value!r}; expected one of: {', '.join(valid)}.")
        if self.lr <= 0 or (self.rho_lr is not None and self.rho_lr <= 0):
            raise ValueError(f"learning rates must be > 0, got lr={self.lr}, rho_lr={self.rho_lr}.")
        if not 0 < self.kl_weight <= 1:
            raise ValueError(f"kl_weight must be in (0, 1] (1 = the full ELBO), got {self.kl_weight}.")
        if (self.prior or {}).get("kind") == "parent_posterior" and not self.init_from:
            raise ValueError("the parent_posterior prior is the posterior of --init-from's artifact; give one.")
        if self.lr_warmup_steps < 0:
            raise ValueError(f"lr_warmup_steps must be >= 0, got {self.lr_warmup_steps}.")
        if (self.checkpoint_every is not None and self.checkpoint_every < 1) or (
                self.checkpoint_minutes is not None and self.checkpoint_minutes <= 0):
            raise ValueError(f"checkpoint_every must be >= 1 and checkpoint_minutes > 0 (or unset), got "
                             f"{self.checkpoint_every} and {self.checkpoint_minutes}.")
        if set(self.exclude_copies) & set(self.train_only_copies):
            raise ValueError(f"a copy cannot be both excluded and train-only: "
                             f"{sorted(set(self.exclude_copies) & set(self.train_only_copies))}")
        if not 0 < self.train_fraction <= 1:
            raise ValueError(f"train_fraction must be in (0, 1], got {self.train_fraction}.")
        if self.source_weights is not None and any(not v > 0 for v in self.source_weights.values()):
            raise ValueError(f"source weights must be positive, got {self.source_weights}")
        if self.grad_sd_samples == 1 or self.grad_sd_samples < 0:
            raise ValueError(f"grad_sd_samples must be 0 (off) or >= 2, got {self.grad_sd_samples}.")

    def _check_pass_budget(self) -> None:
        if not 1 <= self.pass_budget <= MAX_PASS_BUDGET:
            raise ValueError(f"pass_budget must be in [1, {MAX_PASS_BUDGET}], got {self.pass_budget}.")
        if self.test_time_flip == "auto" and self.mc_samples % 2:
            raise ValueError(f"test_time_flip 'auto' compares {self.mc_samples} draws x 1 view with half as many "
                             f"draws x 2 views: mc_samples must be even, got {self.mc_samples}.")
        draws = self.serving_draws()
        if draws.passes > self.pass_budget:
            raise ValueError(f"{draws.split_text()} is {draws.passes} forward passes per image, over the pass "
                             f"budget of {self.pass_budget}: serve {self.pass_budget // draws.views} draws, or "
                             "raise pass_budget (--pass-budget) explicitly.")

    def serving_draws(self) -> ServingDraws:
        """The serving form the run's artifact will carry (``config.json``'s ``serving``): what calibration and
        the test evaluation score with, before the artifact exists. With ``test_time_flip="auto"`` this is the
        one-view option; :meth:`flip_option` is the other, at the same passes."""
        return ServingDraws(self.mc_samples, self.draw_seed, self.head_draws, self.test_time_flip == "on")

    def flip_option(self) -> ServingDraws:
        """``test_time_flip="auto"``'s second option: half the draws on both views, the same forward passes."""
        return ServingDraws(self.mc_samples // 2, self.draw_seed, self.head_draws, True)

    def image_transform(self) -> ImageTransform:
        """The artifact-to-be's decode and preprocessing contract: the one transform every training image goes
        through. Its channel mean/std are measured later, on the training split, and applied after
        augmentation (``training.data.augment.normalise``), so they are left at the identity here."""
        return ImageTransform(size=self.input_size, preprocessing=self.preprocessing)

    @property
    def effective_split_seed(self) -> int:
        """The split's seed: ``split_seed``, or ``seed`` when unset (so runs made before it existed reproduce)."""
        return self.seed if self.split_seed is None else self.split_seed

    @property
    def effective_rho_lr(self) -> float:
        return self.lr if self.rho_lr is None else self.rho_lr

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for name in ("split", "exclude_copies", "train_only_copies"):
            d[name] = list(getattr(self, name))
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"Unknown training config fields: {sorted(unknown)}.")
        d = dict(d)
        d.setdefault("head_draws", 1)  # a run saved before head draws existed was scored with the plain K draws
        d.setdefault("test_time_flip", "off")  # and with one view
        # a run saved before the pass budget: its own passes if over the design's (it was served that way)
        d.setdefault("pass_budget", max(PASS_BUDGET, d.get("mc_samples", 16) * (2 if d["test_time_flip"] == "on"
                                                                                  else 1)))
        d.setdefault("color_jitter", False)  # runs saved before photometric augmentation existed trained without it
        d.setdefault("frame_cuts", False)  # likewise for the framing augmentation
        for name in ("split", "exclude_copies", "train_only_copies"):
            if name in d:
                d[name] = tuple(d[name])
        return cls(**d)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> TrainConfig:
        return cls.from_dict(json.loads(path.read_text()))

    def resume_key(self) -> dict[str, Any]:
        """The fields that must not change when a run is resumed (everything but epochs, I/O and how the
        finished run is served: ``head_draws`` and ``test_time_flip`` only change the final scoring, never a
        training step)."""
        d = self.to_dict()
        for k in ("epochs", "artifact", "workers", "n_bootstrap", "out", "weights_dtype", "head_draws",
                  "test_time_flip", "pass_budget",
                  "cache_images", "max_missed_share", "checkpoint_every", "checkpoint_minutes", "cache_dir"):
            d.pop(k)
        return d
