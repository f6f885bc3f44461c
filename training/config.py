"""Typed training configuration, saved as ``config.json`` next to every run."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from models.artifact.schema import MAX_MC_SAMPLES, MAX_PASS_BUDGET, PASS_BUDGET, ServingDraws
from models.image.preprocessing import BY_NAME as PREPROCESSING_BY_NAME
from models.image.preprocessing import FOV_LOCAL_MEAN
from models.image.transform import ImageTransform
from training.options import DATA, MODEL, RECIPE, SERVING, option

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
Views = Literal["1", "2", "auto"]  # the served views: 1 (as taken), 2 (and mirrored: test-time flip), chosen
VIEWS: tuple[str, ...] = ("1", "2", "auto")
OLD_FLIP_SPELLING = {"off": "1", "on": "2", "auto": "auto"}  # --test-time-flip / config.json's test_time_flip


def parse_prior(text: str) -> dict[str, Any]:
    """``--prior``: ``unit_gaussian`` or ``scale_mixture:PI,SIGMA1,SIGMA2``."""
    if text == "unit_gaussian":
        return {"kind": "unit_gaussian"}
    if text.startswith("scale_mixture:"):
        pi, s1, s2 = (float(v) for v in text.split(":", 1)[1].split(","))
        return {"kind": "scale_mixture", "pi": pi, "sigma1": s1, "sigma2": s2}
    raise SystemExit(f"--prior: unknown prior {text!r}; expected unit_gaussian or scale_mixture:PI,SIGMA1,SIGMA2")


def parse_source_weights(items: list[str]) -> dict[str, float] | None:
    """``["odir=0.5", "eyepacs=0.5"]`` -> ``{"odir": 0.5, "eyepacs": 0.5}``; None when none are given."""
    weights: dict[str, float] = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise SystemExit(f"--source-weight: expected SOURCE=WEIGHT, got {item!r}") from None
        if not name.strip() or not weights[name.strip()] > 0:
            raise SystemExit(f"--source-weight: expected SOURCE=WEIGHT with a positive weight, got {item!r}")
    return weights or None


@dataclass(frozen=True)
class TrainConfig:
    """A training run's settings, each declared once here with its meaning (``training.options``): ``fit``'s
    flags are generated from these fields, and every run's ``config.json`` holds their values."""

    data: str = field(metadata=option(
        "dataset folder (synthetic/EyePACS/APTOS), manifest CSV or packed shards", DATA, required=True))
    out: str = field(metadata=option("run directory (checkpoints, logs, reports)", DATA, required=True))
    layout: Layout = field(default="synthetic", metadata=option("how --data is organised", DATA))
    artifact: str | None = field(default=None, metadata=option(
        "artifact directory (default: <out>/artifact)", DATA))
    name: str = field(default="radscreen-radial-vgg16", metadata=option(
        "model name written into the artifact", DATA))
    version: str = field(default="0.1.0", metadata=option("model version written into the artifact", DATA))
    model: str = field(default="radial_vgg16_star", metadata=option(
        "registry name: radial_vgg16_star, gaussian_vgg16_star (MFVI), dropout_vgg16_star, "
        "deterministic_vgg16_star", MODEL))
    width: int = field(default=46, metadata=option("channels of the first VGG-16* block", MODEL))
    input_size: int = field(default=256, metadata=option("image side in pixels", MODEL))
    rho_init: float = field(default=-4.0, metadata=option(
        "initial ρ of every weight (σ0 = softplus(ρ); the authors' -4 gives σ0 ≈ 0.018)", MODEL))
    prior: dict[str, Any] = field(default_factory=lambda: {"kind": "unit_gaussian"}, metadata=option(
        "unit_gaussian, or scale_mixture:PI,SIGMA1,SIGMA2 (e.g. scale_mixture:0.5,1,0.0025)", MODEL,
        parse=parse_prior, default_text="unit_gaussian"))
    epochs: int = field(default=10, metadata=option("total epochs, NLL-only ones included", RECIPE))
    nll_epochs: int = field(default=1, metadata=option(
        "first epochs: NLL on the means only, then the full ELBO", RECIPE))
    batch_size: int = field(default=16, metadata=option("images per optimiser step", RECIPE))
    lr: float = field(default=1e-3, metadata=option("learning rate of the means (and non-Bayesian weights)", RECIPE))
    train_samples: int = field(default=1, metadata=option(
        "MC weight samples per training step (the ELBO estimate)", RECIPE))
    eval_samples: int = field(default=8, metadata=option("serving draws per image per epoch", SERVING))
    max_steps_per_epoch: int | None = field(default=None, metadata=option("cap on steps per epoch (quick runs)"))
    checkpoint_every: int | None = field(default=50, metadata=option(
        "steps between checkpoints (one is also written at every epoch end)"))
    checkpoint_minutes: float | None = field(default=None, metadata=option(
        "minutes between checkpoints instead of --checkpoint-every steps, and one at the end (default: 10 on "
        "CUDA, where a step takes milliseconds; unset on the CPU)"))
    val_every: int = field(default=1, metadata=option(
        "epochs between validations (the last epoch is always validated; an epoch not validated cannot be the "
        "best)"))
    split: tuple[float, float, float] = field(default=(0.7, 0.15, 0.15), metadata=option(
        "patient-level split fractions", DATA, nargs=3, value_type=float, metavar=("TRAIN", "VAL", "TEST"),
        parse=tuple))
    gradable_only: bool = field(default=True, metadata=option(
        "use the ungradable images too (by default they are left out: the quality gate's job, not the model's)", DATA,
        flag="--include-ungradable", switch=False))
    include_other_disease: bool = field(default=True, metadata=option(
        "odir layout, or a manifest with a category column: leave out the eyes with another eye disease and no DR "
        "(kept by default as non-referable: they are part of a real screening population)", DATA,
        flag="--exclude-other-disease", switch=False))
    augment: bool = field(default=True, metadata=option(
        "switch off the geometric/photometric augmentation", DATA, flag="--no-augment", switch=False))
    color_jitter: bool = field(default=True, metadata=option(
        "keep the geometric augmentation but switch off the photometric one (contrast, colour balance, resolution "
        "loss)", DATA, flag="--no-color-jitter", switch=False))
    frame_cuts: bool = field(default=True, metadata=option(
        "switch off the framing augmentation (camera-frame and tight-crop cuts, notches)", DATA,
        flag="--no-frame-cuts", switch=False))
    cache_images: bool = field(default=True, metadata=option(
        "decode and preprocess every image at every use instead of once into <out>/cache (a uint8 memmap)", DATA,
        flag="--no-cache", switch=False))
    preprocessing: str = field(default=FOV_LOCAL_MEAN, metadata=option(
        "image preprocessing contract (models/image/preprocessing.py); stored in the artifact", DATA,
        choices=tuple(sorted(PREPROCESSING_BY_NAME)), parse=PREPROCESSING_BY_NAME.__getitem__))
    precision: Precision = field(default="fp32", metadata=option(
        "autocast during training: auto = bf16 only where the device runs it natively (CUDA with bf16, a CPU "
        "with AVX-512-BF16/AMX), else fp32; bf16 where it would be emulated (~70x slower) is refused", RECIPE))
    seed: int = field(default=0, metadata=option(
        "seed of the weights, data order and augmentation (and of the split unless --split-seed)", RECIPE))
    split_seed: int | None = field(default=None, metadata=option(
        "seed of the patient-level split (default: --seed); fix it to train ensemble members or seed replicates "
        "on the same split", RECIPE))
    draw_seed: int = field(default=20260, metadata=option("seed of the artifact's fixed serving draws", SERVING))
    mc_samples: int = field(default=16, metadata=option(
        "posterior draws the artifact serves (each costs one forward pass per view)", SERVING))
    head_draws: int = field(default=64, metadata=option(
        "draws of the last layer per serving draw: steadies the MI estimate at no real cost "
        "(docs/results-serving-estimator.md, 'Head draws'); 1 = the plain K draws", SERVING))
    views: Views = field(default="1", metadata=option(
        "the views the artifact serves: 1 = each image as taken; 2 = as taken and mirrored left-right (test-time "
        "flip: p and MI over both orientations' draws, each draw costs two passes; calibration and the test "
        "figures use it too); auto = chosen on the validation eyes between the serving draws x 1 view and half as "
        "many draws x 2 views, at equal passes (training.evaluation.serving_choice, docs/uncertainty.md)", SERVING,
        old_flag=("--test-time-flip", OLD_FLIP_SPELLING)))
    pass_budget: int = field(default=PASS_BUDGET, metadata=option(
        "most forward passes per image (draws x views) the artifact may serve; the design's budget is 16, a "
        "larger one is an explicit choice the card states", SERVING))
    target_referral_rate: float = field(default=0.2, metadata=option(
        "share of validation images the MI threshold refers (without --max-missed-share)", SERVING))
    decision_threshold: float = 0.5  # p̄ at or above it is "referable", without max_missed_share (no flag)
    max_missed_share: float | None = field(default=None, metadata=option(
        "the screening operating point: choose the decision and MI thresholds together on validation so that at "
        "most this share of referable eyes is answered no_referable_dr, answering as many non-referable eyes as "
        "possible (e.g. 0.03; training.evaluation.operating_point, docs/training.md)", SERVING))
    n_bootstrap: int = field(default=200, metadata=option(
        "bootstrap resamples for the reports' SEs and 95 %% intervals", SERVING))
    workers: int | None = field(default=None, metadata=option(
        "DataLoader worker processes (default: on CUDA cores - 1 up to 8, where images are decoded per step; on "
        "the CPU 0)", DATA))
    device: str = field(default="auto", metadata=option("auto (cuda when available, else cpu), cpu or cuda"))
    rho_lr: float | None = field(default=None, metadata=option(
        "learning rate of the ρ group (default: --lr)", RECIPE))
    kl_weight: float = field(default=1.0, metadata=option(
        "λ in NLL + λ·KL/N_train: 1 = the full ELBO (default); below 1 tempers it, and the card says so (the "
        "validation ELBO is always reported at λ = 1)", RECIPE))
    optimizer: Optimizer = field(default="adam", metadata=option("Adam or AdamW", RECIPE))
    amsgrad: bool = field(default=True, metadata=option(
        "plain Adam/AdamW moments instead of amsgrad", RECIPE, flag="--no-amsgrad", switch=False))
    weight_decay: float = field(default=0.0, metadata=option(
        "decoupled (AdamW) or L2 (Adam); on the means only, never on ρ", RECIPE))
    lr_schedule: Schedule = field(default="constant", metadata=option(
        "per-epoch lr factor: constant, cosine (to 0 at the end) or step", RECIPE))
    lr_step_epochs: int = field(default=30, metadata=option("step schedule: epochs per step", RECIPE))
    lr_gamma: float = field(default=0.1, metadata=option("step schedule: factor per step", RECIPE))
    lr_warmup_steps: int = field(default=0, metadata=option(
        "linear lr ramp over the first N optimiser steps (use with --init-from: fresh Adam moments otherwise take "
        "full-size steps on a trained posterior)", RECIPE))
    select_by: SelectBy = field(default="val_nll", metadata=option(
        "the best epoch minimises this validation score (never AUC: uncertainty needs a proper score)", RECIPE))
    grad_sd_samples: int = field(default=8, metadata=option(
        "gradient estimates per epoch for the NLL-gradient SD diagnostic (0: off)", RECIPE))
    weights_dtype: WeightsDtype = field(default="fp32", metadata=option(
        "artifact storage of μ and ρ (fp16: calibrated after the cast, rounding/sd ratio in the card)", DATA))
    init_from: str | None = field(default=None, metadata=option(
        "start from this artifact's trained μ and ρ (same architecture and preprocessing; its channel mean/std "
        "are kept; fresh optimiser): continue a model whose run is gone, or fine-tune on new data. Usually with "
        "--nll-epochs 0", MODEL, metavar="ARTIFACT"))
    source_weights: dict[str, float] | None = field(default=None, metadata=option(
        "a manifest with a source column: that source's share of the training draws (give one per source, e.g. "
        "--source-weight odir=0.5 --source-weight eyepacs=0.5; normalised to sum to 1); without it every training "
        "image is drawn once an epoch", DATA, flag="--source-weight", repeat=True, metavar="SOURCE=WEIGHT",
        parse=parse_source_weights))
    exclude_copies: tuple[str, ...] = field(default=(), metadata=option(
        "leave the images of this copy (the manifest's copy column, e.g. stretched-256) out of every split", DATA,
        flag="--exclude-copy", repeat=True, metavar="COPY", parse=tuple))
    train_only_copies: tuple[str, ...] = field(default=(), metadata=option(
        "train on the images of this copy but leave them out of validation and test (the patient split is made "
        "first, so validation and test patients do not change)", DATA, flag="--train-only-copy", repeat=True,
        metavar="COPY", parse=tuple))
    train_fraction: float = field(default=1.0, metadata=option(
        "train on this share of the training patients (a learning curve's arm: within each source and referable "
        "stratum, nested across fractions); validation and test do not change", DATA, metavar="F"))
    cache_dir: str | None = field(default=None, metadata=option(
        "where the preprocessed images are kept (default: <out>/cache); runs on the same images can share one",
        DATA))

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
                                   ("views", self.views, VIEWS)):
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
        if self.views == "auto" and self.mc_samples % 2:
            raise ValueError(f"views 'auto' compares {self.mc_samples} draws x 1 view with half as many "
                             f"draws x 2 views: mc_samples must be even, got {self.mc_samples}.")
        draws = self.serving_draws()
        if draws.passes > self.pass_budget:
            raise ValueError(f"{draws.split_text()} is {draws.passes} forward passes per image, over the pass "
                             f"budget of {self.pass_budget}: serve {self.pass_budget // draws.views} draws, or "
                             "raise pass_budget (--pass-budget) explicitly.")

    def serving_draws(self) -> ServingDraws:
        """The serving form the run's artifact will carry (``config.json``'s ``serving``): what calibration and
        the test evaluation score with, before the artifact exists. With ``views="auto"`` this is the
        one-view option; :meth:`flip_option` is the other, at the same passes."""
        return ServingDraws(self.mc_samples, self.draw_seed, self.head_draws, test_time_flip=self.views == "2")

    def flip_option(self) -> ServingDraws:
        """``views="auto"``'s second option: half the draws on both views, the same forward passes."""
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
        d = dict(d)
        if "test_time_flip" in d:  # the option's name in runs saved before it was named for the views it serves
            d.setdefault("views", OLD_FLIP_SPELLING[d.pop("test_time_flip")])
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"Unknown training config fields: {sorted(unknown)}.")
        d.setdefault("head_draws", 1)  # a run saved before head draws existed was scored with the plain K draws
        d.setdefault("views", "1")  # and with one view
        # a run saved before the pass budget: its own passes if over the design's (it was served that way)
        d.setdefault("pass_budget", max(PASS_BUDGET, d.get("mc_samples", 16) * (2 if d["views"] == "2"
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
        finished run is served: ``head_draws`` and ``views`` only change the final scoring, never a
        training step)."""
        d = self.to_dict()
        for k in ("epochs", "artifact", "workers", "n_bootstrap", "out", "weights_dtype", "head_draws",
                  "views", "pass_budget",
                  "cache_images", "max_missed_share", "checkpoint_every", "checkpoint_minutes", "cache_dir"):
            d.pop(k)
        return d
