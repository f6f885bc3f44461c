"""Each training option is declared once, on its ``TrainConfig`` field: the flags of ``fit``, ``pack``,
``evaluate`` and ``finalise`` are generated from the fields and parse back into the same values."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

import pytest

from models.image.preprocessing import LEGACY
from training.cli import FINALISE_OPTIONS, FIT_DEFAULTS, build_parser, config_from_args
from training.cli_lease import PACK_DEFAULTS, PACK_OPTIONS
from training.config import TrainConfig
from training.options import flag_of, options, values_of

BASE = ["fit", "--data", "d", "--out", "o"]
FLAGLESS = {"decision_threshold"}  # a field no command sets (the operating point or the default 0.5 does)

# a valid value other than the default for each option: (the flag's words, the field's value)
GIVEN: dict[str, tuple[list[str], Any]] = {
    "data": (["e"], "e"), "out": (["p"], "p"), "layout": (["odir"], "odir"), "artifact": (["a"], "a"),
    "name": (["n"], "n"), "version": (["9.9.9"], "9.9.9"), "model": (["gaussian_vgg16_star"], "gaussian_vgg16_star"),
    "width": (["8"], 8), "input_size": (["64"], 64), "rho_init": (["-5"], -5.0),
    "prior": (["scale_mixture:0.5,1,0.0025"], {"kind": "scale_mixture", "pi": 0.5, "sigma1": 1.0, "sigma2": 0.0025}),
    "epochs": (["4"], 4), "nll_epochs": (["0"], 0), "batch_size": (["8"], 8), "lr": (["0.01"], 0.01),
    "train_samples": (["2"], 2), "eval_samples": (["4"], 4), "max_steps_per_epoch": (["3"], 3),
    "checkpoint_every": (["7"], 7), "checkpoint_minutes": (["2.5"], 2.5), "val_every": (["2"], 2),
    "split": (["0.6", "0.2", "0.2"], (0.6, 0.2, 0.2)), "gradable_only": ([], False),
    "include_other_disease": ([], False), "augment": ([], False), "color_jitter": ([], False),
    "frame_cuts": ([], False), "cache_images": ([], False), "preprocessing": (["legacy"], LEGACY),
    "precision": (["bf16"], "bf16"), "seed": (["5"], 5), "split_seed": (["6"], 6), "draw_seed": (["11"], 11),
    "mc_samples": (["8"], 8), "head_draws": (["2"], 2), "views": (["auto"], "auto"),
    "pass_budget": (["32"], 32), "target_referral_rate": (["0.1"], 0.1), "max_missed_share": (["0.03"], 0.03),
    "n_bootstrap": (["50"], 50), "workers": (["3"], 3), "device": (["cpu"], "cpu"), "rho_lr": (["0.002"], 0.002),
    "kl_weight": (["0.5"], 0.5), "optimizer": (["adamw"], "adamw"), "amsgrad": ([], False),
    "weight_decay": (["0.01"], 0.01), "lr_schedule": (["cosine"], "cosine"), "lr_step_epochs": (["5"], 5),
    "lr_gamma": (["0.5"], 0.5), "lr_warmup_steps": (["10"], 10), "select_by": (["val_elbo"], "val_elbo"),
    "grad_sd_samples": (["0"], 0), "weights_dtype": (["fp16"], "fp16"), "init_from": (["art"], "art"),
    "source_weights": (["odir=2"], {"odir": 2.0}), "exclude_copies": (["stretched-256"], ("stretched-256",)),
    "train_only_copies": (["train-copy"], ("train-copy",)), "train_fraction": (["0.5"], 0.5),
    "cache_dir": (["c"], "c"),
}


def _flag(name: str) -> str:
    [(f, opt)] = [(f, o) for f, o in options(TrainConfig) if f.name == name]
    return flag_of(f, opt)


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def test_every_field_but_the_flagless_has_a_flag_and_a_given_value() -> None:
    assert {f.name for f in fields(TrainConfig)} - {f.name for f, _ in options(TrainConfig)} == FLAGLESS
    assert set(GIVEN) == {f.name for f, _ in options(TrainConfig)}  # a new option needs its case here


def test_fit_without_flags_is_the_configs_own_defaults() -> None:
    assert config_from_args(_parse(BASE)) == TrainConfig(data="d", out="o")


@pytest.mark.parametrize("name", sorted(GIVEN))
def test_each_fit_flag_sets_its_field_and_nothing_else(name: str) -> None:
    words, value = GIVEN[name]
    if name in ("data", "out"):
        argv = ["fit", "--data" if name == "out" else "--out", "x", _flag(name), *words]
    else:
        argv = [*BASE, _flag(name), *words]
    config = config_from_args(_parse(argv))
    assert getattr(config, name) == value
    assert getattr(config, name) != getattr(FIT_DEFAULTS, name) or name in ("data", "out")
    others = {f.name for f in fields(TrainConfig)} - {name, "data", "out"}
    assert all(getattr(config, n) == getattr(FIT_DEFAULTS, n) for n in others)


def test_finalise_changes_only_the_flags_given() -> None:
    args = _parse(["finalise", "--run", "r", "--mc-samples", "8", "--views", "auto"])
    assert values_of(args, TrainConfig, names=FINALISE_OPTIONS) == {"mc_samples": 8, "views": "auto"}
    assert values_of(_parse(["finalise", "--run", "r"]), TrainConfig, names=FINALISE_OPTIONS) == {}


def test_pack_and_evaluate_read_fits_own_options() -> None:
    words = ["--layout", "odir", "--input-size", "128", "--include-ungradable", "--exclude-other-disease",
             "--split", "0.6", "0.2", "0.2", "--split-seed", "3", "--preprocessing", "legacy"]
    fit = config_from_args(_parse([*BASE, *words]))
    pack = values_of(_parse(["pack", "--data", "d", "--out", "o", *words, "--exclude-copy", "x"]), TrainConfig,
                     defaults=PACK_DEFAULTS, names=PACK_OPTIONS)
    assert pack.pop("exclude_copies") == ("x",)
    assert TrainConfig(out="o", **pack) == fit
    evaluate = _parse(["evaluate", "--data", "d", "--out", "o", "--layout", "odir", "--include-ungradable"])
    assert (evaluate.layout, evaluate.gradable_only, evaluate.n_bootstrap) == ("odir", False, 200)


def test_adapt_flags_are_the_requests_fields() -> None:
    from pathlib import Path

    from training.adapt import AdaptRequest, TuneOptions
    from training.cli_adapt import CLI_DEFAULTS

    args = _parse(["adapt", "--data", "site/labels.csv", "--image-root", "site/images", "--mode", "finetune",
                   "--artifact", "out/site", "--epochs", "3", "--precision", "fp32", "--seed", "4",
                   "--miss-share", "0.05"])
    request = values_of(args, AdaptRequest, defaults=CLI_DEFAULTS)
    assert request == {
        "parent": Path("models/default"), "labels": Path("site/labels.csv"), "image_root": Path("site/images"),
        "mode": "finetune", "out": Path("out/site"), "run_dir": None, "miss_share": 0.05,
        "calibration_share": 0.5, "name": None, "version": None, "repeats": 200, "seed": 4,
    }
    tune = values_of(args, TuneOptions, defaults=TuneOptions())
    assert TuneOptions(**tune) == TuneOptions(epochs=3, precision="fp32")
    with pytest.raises(SystemExit):
        _parse(["adapt", "--data", "l.csv", "--image-root", "i", "--mode", "average", "--artifact", "o"])


@pytest.mark.parametrize(("old", "views"), [("off", "1"), ("on", "2"), ("auto", "auto")])
def test_a_recorded_command_with_the_old_flip_flag_still_runs(old: str, views: str) -> None:
    """``--test-time-flip off|on|auto`` (commands recorded before the option was named for the views it serves,
    e.g. the embedded model's card) sets ``views``; it is not shown in --help."""
    assert config_from_args(_parse([*BASE, "--mc-samples", "8", "--test-time-flip", old])).views == views
    assert values_of(_parse(["finalise", "--run", "r", "--test-time-flip", old]), TrainConfig,
                     names=FINALISE_OPTIONS) == {"views": views}
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert "--test-time-flip" not in sub.choices["fit"].format_help() and "--views" in sub.choices["fit"].format_help()


def test_a_run_saved_with_the_old_flip_key_reads_as_views(tmp_path: Any) -> None:
    old = TrainConfig(data="d", out="o", views="2", mc_samples=8).to_dict()
    old["test_time_flip"] = {"1": "off", "2": "on", "auto": "auto"}[old.pop("views")]
    assert TrainConfig.from_dict(old) == TrainConfig(data="d", out="o", views="2", mc_samples=8)
