"""The training recipe's knobs do what they say: μ/ρ learning rates, amsgrad, the lr schedule, the logged σ
statistics, the NLL-gradient SD, the Δρ/(lr·steps) flag and best-epoch selection by validation NLL."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from models.nn.posteriors import sigma_from_rho
from training.config import TrainConfig
from training.data.prepare import prepare_data
from training.diagnostics import nll_gradient_sd, sigma_stats
from training.history import CURVES_PNG
from training.loop import BEST_WEIGHTS, Trainer, build_model
from training.model_card import recipe_lines
from training.optim import apply_schedule, build_optimizer, lr_factor, warmup_factor
from training.synthetic.dataset import generate_dataset


def _cfg(**kw: object) -> TrainConfig:
    base: dict[str, object] = dict(data="", out="", width=2, input_size=64, lr=1e-3, rho_lr=5e-2, epochs=4)
    base.update(kw)
    return TrainConfig(**base)  # type: ignore[arg-type]


def test_defaults_are_the_authors_recipe() -> None:
    d = TrainConfig(data="", out="")
    assert (d.rho_init, d.lr, d.optimizer, d.amsgrad, d.nll_epochs) == (-4.0, 1e-3, "adam", True, 1)
    assert (d.select_by, d.weights_dtype, d.device, d.lr_schedule) == ("val_nll", "fp32", "auto", "constant")


def test_mu_and_rho_groups_get_their_own_learning_rates() -> None:
    torch.manual_seed(0)
    cfg = _cfg()
    model = build_model(cfg)
    opt = build_optimizer(model, cfg)
    assert isinstance(opt, torch.optim.Adam) and not isinstance(opt, torch.optim.AdamW)
    groups = {g["name"]: g for g in opt.param_groups}
    assert set(groups) == {"mu", "rho"}
    assert (groups["mu"]["lr"], groups["rho"]["lr"]) == (1e-3, 5e-2)
    assert all(g["amsgrad"] for g in opt.param_groups)
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for p in groups["rho"]["params"]} == {n for n in names.values() if n.endswith("_rho")}
    assert all(not names[id(p)].endswith("_rho") for p in groups["mu"]["params"])

    # One Adam step with gradient +1 everywhere moves every parameter by exactly -lr of its group
    # (bias-corrected first step: m̂ = g, v̂ = g², update = lr · g / (|g| + eps)).
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    for n, p in model.named_parameters():
        expected = 5e-2 if n.endswith("_rho") else 1e-3
        torch.testing.assert_close(before[n] - p.detach(), torch.full_like(p, expected), rtol=1e-4, atol=1e-7)


def test_adamw_decays_the_means_only_and_amsgrad_can_be_switched_off() -> None:
    cfg = _cfg(optimizer="adamw", weight_decay=0.1, amsgrad=False)
    opt = build_optimizer(build_model(cfg), cfg)
    assert isinstance(opt, torch.optim.AdamW)
    groups = {g["name"]: g for g in opt.param_groups}
    assert (groups["mu"]["weight_decay"], groups["rho"]["weight_decay"]) == (0.1, 0.0)
    assert not any(g["amsgrad"] for g in opt.param_groups)


@pytest.mark.parametrize(("schedule", "expected"), [
    ("constant", [1.0, 1.0, 1.0, 1.0]),
    ("cosine", [1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4))]),
    ("step", [1.0, 1.0, 0.5, 0.5]),
])
def test_schedule_sets_each_groups_lr_per_epoch(schedule: str, expected: list[float]) -> None:
    cfg = _cfg(lr_schedule=schedule, lr_step_epochs=2, lr_gamma=0.5)
    opt = build_optimizer(build_model(cfg), cfg)
    for epoch, factor in enumerate(expected):
        assert lr_factor(cfg, epoch) == pytest.approx(factor)
        apply_schedule(opt, cfg, epoch)
        lrs = {g["name"]: g["lr"] for g in opt.param_groups}
        assert lrs["mu"] == pytest.approx(1e-3 * factor) and lrs["rho"] == pytest.approx(5e-2 * factor)


def test_warmup_ramps_every_groups_lr_over_the_first_steps_then_holds_the_schedule() -> None:
    cfg = _cfg(lr_schedule="step", lr_step_epochs=1, lr_gamma=0.5, lr_warmup_steps=4)
    opt = build_optimizer(build_model(cfg), cfg)
    expected = [(0, 0, 0.25), (0, 1, 0.5), (0, 2, 0.75), (0, 3, 1.0), (0, 4, 1.0), (1, 5, 0.5), (1, 400, 0.5)]
    for epoch, step, factor in expected:
        apply_schedule(opt, cfg, epoch, step)
        lrs = {g["name"]: g["lr"] for g in opt.param_groups}
        assert lrs["mu"] == pytest.approx(1e-3 * factor) and lrs["rho"] == pytest.approx(5e-2 * factor), (epoch, step)
    assert [warmup_factor(_cfg(), s) for s in (0, 1, 10_000)] == [1.0, 1.0, 1.0]  # off by default
    with pytest.raises(ValueError, match="lr_warmup_steps must be >= 0"):
        _cfg(lr_warmup_steps=-1)


def test_sigma_stats_are_softplus_of_the_models_rho() -> None:
    torch.manual_seed(1)
    model = build_model(_cfg())
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("_rho"):
                p.copy_(torch.randn_like(p) - 3)
    stats = sigma_stats(model)
    name, module = next((n, m) for n, m in model.named_modules() if hasattr(m, "weight_rho"))
    sigma = torch.nn.functional.softplus(torch.cat([module.weight_rho.flatten(), module.bias_rho.flatten()])).detach()
    assert stats[f"sigma/{name}/mean"] == pytest.approx(float(sigma.mean()), rel=1e-6)
    assert stats[f"sigma/{name}/q50"] == pytest.approx(float(sigma.double().quantile(0.5)), rel=1e-6)
    every = torch.cat([torch.nn.functional.softplus(p.detach().flatten()) for n, p in model.named_parameters()
                       if n.endswith("_rho")])
    assert stats["sigma/all/mean"] == pytest.approx(float(every.mean()), rel=1e-6)
    assert stats["sigma/all/q05"] < stats["sigma/all/q50"] < stats["sigma/all/q95"]


def test_nll_gradient_sd_is_zero_without_noise_and_grows_with_sigma() -> None:
    x, y = torch.randn(4, 3, 64, 64), torch.tensor([0.0, 1.0, 0.0, 1.0])
    torch.manual_seed(2)
    det = build_model(_cfg(model="deterministic_vgg16_star"))
    assert nll_gradient_sd(det, x, y, samples=3, mc_per_estimate=1, seed=0)["grad_sd_mu"] == 0.0
    sds = []
    for rho in (-8.0, -2.0):
        torch.manual_seed(2)
        model = build_model(_cfg(rho_init=rho))
        sds.append(nll_gradient_sd(model, x, y, samples=6, mc_per_estimate=1, seed=0))
        assert all(p.grad is None for p in model.parameters())  # diagnostics leave .grad alone
    assert 0 < sds[0]["grad_sd_mu"] < sds[1]["grad_sd_mu"]
    # Averaging k draws per estimate divides the variance by ~k.
    torch.manual_seed(2)
    model = build_model(_cfg(rho_init=-2.0))
    many = nll_gradient_sd(model, x, y, samples=6, mc_per_estimate=8, seed=0)
    assert many["grad_sd_mu"] < sds[1]["grad_sd_mu"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainConfig, Path]:
    root = tmp_path_factory.mktemp("synth")
    generate_dataset(root, n_images=40, seed=11, size=64, ungradable_fraction=0.0)
    out = tmp_path_factory.mktemp("run")
    cfg = TrainConfig(data=str(root), out=str(out), width=2, input_size=64, epochs=3, nll_epochs=1, batch_size=8,
                      max_steps_per_epoch=2, eval_samples=2, mc_samples=4, grad_sd_samples=3, lr=1e-3,
                      rho_lr=2e-2, lr_schedule="cosine", device="cpu")
    Trainer(cfg, progress=False).fit(prepare_data(cfg))
    return cfg, out


@pytest.mark.training
def test_history_logs_the_schedule_the_rho_budget_and_the_models_sigma(fitted: tuple[TrainConfig, Path]) -> None:
    _, out = fitted
    history = json.loads((out / "history.json").read_text())
    factors = [0.5 * (1 + math.cos(math.pi * e / 3)) for e in range(3)]
    assert [r["lr"] for r in history] == pytest.approx([1e-3 * f for f in factors])
    assert [r["rho_lr"] for r in history] == pytest.approx([2e-2 * f for f in factors])
    # ρ moves only in ELBO epochs (2 steps each): the budget is Σ lr_ρ over those steps.
    assert [r["rho_budget"] for r in history] == pytest.approx(
        [0.0, 2 * 2e-2 * factors[1], 2 * 2e-2 * (factors[1] + factors[2])])
    assert history[0]["rho_shift_mean"] == 0.0 and history[0]["rho_budget_ratio"] is None
    assert 0 < history[2]["rho_budget_ratio"] <= 1.0 + 1e-3  # Adam moves each ρ by at most ≈ lr per step
    final = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    rhos = torch.cat([v.flatten() for k, v in final.items() if k.endswith("_rho")])
    assert history[-1]["sigma/all/mean"] == pytest.approx(float(sigma_from_rho(rhos.double()).mean()), rel=1e-9)
    assert history[-1]["rho_shift_mean"] == pytest.approx(float((rhos.double() + 4.0).abs().mean()), rel=1e-9)
    assert all(r["grad_sd_mu"] > 0 and r["kl_per_example"] > 0 for r in history)
    assert (out / CURVES_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.training
def test_best_epoch_has_the_lowest_validation_nll(fitted: tuple[TrainConfig, Path]) -> None:
    _, out = fitted
    history = json.loads((out / "history.json").read_text())
    best = min(history, key=lambda r: r["val_nll"])["epoch"]
    state = torch.load(out / "checkpoint.pt", weights_only=True)["state"]
    assert state["best_epoch"] == best
    best_rho = torch.cat([v.flatten() for k, v in load_file(str(out / BEST_WEIGHTS)).items() if k.endswith("_rho")])
    row = history[best - 1]
    assert row["sigma/all/mean"] == pytest.approx(float(sigma_from_rho(best_rho.double()).mean()), rel=1e-9)


@pytest.mark.parametrize(("ratio", "flagged"), [(0.95, True), (0.5, False)])
def test_card_flags_sigma_limited_by_the_optimiser(ratio: float, flagged: bool) -> None:
    row = {"epoch": 3, "rho_budget_ratio": ratio, "rho_shift_mean": ratio * 0.5, "rho_budget": 0.5,
           "sigma/all/mean": 0.02, "sigma/all/q05": 0.019, "sigma/all/q95": 0.021, "kl_per_example": 10.0,
           "val_nll": 0.6}
    text = "\n".join(recipe_lines(TrainConfig(data="", out=""), [row], 3))
    assert f"Δρ/(lr·steps) = {ratio:.3f}" in text
    assert ("σ limited by the optimiser" in text) is flagged
    assert "amsgrad True" in text and "selected by the lowest validation NLL" in text


@pytest.mark.training
def test_fp16_artifact_states_its_rounding_in_the_card(fitted: tuple[TrainConfig, Path], tmp_path: Path) -> None:
    from dataclasses import replace

    from models.artifact import load_artifact
    from training.finalise import finalise_run

    cfg, _ = fitted
    result = finalise_run(replace(cfg, weights_dtype="fp16", n_bootstrap=3, artifact=str(tmp_path / "art")))
    artifact = load_artifact(result.artifact_dir)
    stored = load_file(str(artifact.directory / "weights.safetensors"))  # the bytes on disk, not the loaded copy
    assert stored and all(t.dtype == torch.float16 for t in stored.values() if t.is_floating_point())
    assert "Storage: μ and ρ in fp16; |rounding of μ| / per-weight posterior sd: median" in artifact.model_card
