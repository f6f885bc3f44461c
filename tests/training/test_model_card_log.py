"""The model card's last-epoch log is a table: scalars one per row, σ and Δρ/(lr·steps) one row per layer."""

from __future__ import annotations

from training.config import TrainConfig
from training.model_card import ece_text, input_text, last_epoch_lines, mi_scale_lines


def test_last_epoch_log_is_a_scalar_table_and_a_per_layer_sigma_table() -> None:
    row = {"epoch": 3, "phase": "elbo", "train_nll": 0.54971, "grad_sd_rho": None,
           "sigma/features.0/mean": 0.0213, "sigma/features.0/q05": 0.02129, "sigma/features.0/q50": 0.02131,
           "sigma/features.0/q95": 0.02132, "sigma/head/mean": 0.02128, "sigma/head/q05": 0.02123,
           "sigma/head/q50": 0.0213, "sigma/head/q95": 0.02132, "sigma/all/mean": 0.0213,
           "rho_shift/features.0": 0.4, "rho_ratio/features.0": 0.5, "rho_shift/head": 0.8, "rho_ratio/head": 1.0,
           "rho_budget_ratio": 0.75}
    assert last_epoch_lines(row) == [
        "",
        "| field | value |",
        "| --- | --- |",
        "| epoch | 3 |",
        "| phase | elbo |",
        "| train_nll | 0.5497 |",
        "| rho_budget_ratio | 0.75 |",
        "",
        "| layer | σ mean | σ 5 % | σ 50 % | σ 95 % | Δρ/(lr·steps) (σ set by the optimiser above 0.9) |",
        "| --- | --- | --- | --- | --- | --- |",
        "| features.0 | 0.0213 | 0.02129 | 0.02131 | 0.02132 | 0.5 |",
        "| head | 0.02128 | 0.02123 | 0.0213 | 0.02132 | 1 |",
        "| all weights | 0.0213 | - | - | - | 0.75 |",
    ]


def test_a_row_without_sigma_has_no_layer_table() -> None:
    assert last_epoch_lines({"epoch": 1, "train_nll": 0.7}) == [
        "", "| field | value |", "| --- | --- |", "| epoch | 1 |", "| train_nll | 0.7 |"]


def test_mi_scale_line_states_median_quartiles_and_range() -> None:
    q = {"0.05": 1.2e-5, "0.25": 4e-5, "0.5": 8.04e-5, "0.75": 1.5e-4, "0.95": 6.1e-4}
    assert mi_scale_lines(q) == ["- MI scale: median 8.04e-05 nat (quartiles 4e-05–0.00015, 5–95 %: "
                                 "1.2e-05–0.00061); values are comparable only within this artifact."]
    assert mi_scale_lines(None) == [] and mi_scale_lines({}) == []


def test_ece_text_gives_the_error_bar_and_the_sampling_floor_when_recorded() -> None:
    assert ece_text({"ece": 0.0342, "ece_se": 0.0061, "ece_calibrated_floor": 0.0213}) == (
        "0.034 ± 0.006 (a perfectly calibrated model would show 0.021 on these images by sampling alone)")
    assert ece_text({"ece": 0.0342, "ece_se": None, "ece_calibrated_floor": None}) == "0.034"  # older artifacts
    assert ece_text({"ece": 0.0342}) == "0.034" and ece_text({}) == "n/a"


def test_input_line_names_the_crop_and_only_the_augmentation_that_ran() -> None:
    full = input_text(TrainConfig(data="d", out="o"))
    assert full.startswith("`fov-local-mean/1` at 256 px") and "flips" in full
    assert "tight square crop on four sides in 25 %" in full and "channel gain ±0.15" in full
    no_framing = input_text(TrainConfig(data="d", out="o", frame_cuts=False))
    assert "tight square crop" not in no_framing and "channel gain" in no_framing
    assert input_text(TrainConfig(data="d", out="o", augment=False)).endswith("; no augmentation.")
