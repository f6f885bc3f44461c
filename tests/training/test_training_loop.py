"""The training loop: ELBO scaling, exact resume after an interruption, and a tiny fit → artifact round trip."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from models.artifact import load_artifact
from models.artifact.schema import ServingDraws
from models.nn.draws import materialise_draws
from training.cli import main as train_main
from training.config import TrainConfig
from training.data.prepare import prepare_data
from training.elbo import elbo_loss
from training.evaluation import evaluate_predictions
from training.evaluation.ensemble import DRAWS_FILENAME, load_draws
from training.loop import Trainer


def test_elbo_is_mean_nll_plus_kl_over_n() -> None:
    assert elbo_loss(torch.tensor(0.7), torch.tensor(300.0), 1000).item() == pytest.approx(0.7 + 0.3)
    assert elbo_loss(torch.tensor(0.7), torch.tensor(300.0), 1000, 0.1).item() == pytest.approx(0.7 + 0.03)
    with pytest.raises(ValueError, match="n_train must be >= 1"):
        elbo_loss(torch.tensor(0.0), torch.tensor(0.0), 0)
    for weight in (0.0, 1.5):
        with pytest.raises(ValueError, match="kl_weight must be in"):
            elbo_loss(torch.tensor(0.0), torch.tensor(0.0), 10, weight)


@pytest.mark.training
def test_a_tempered_elbo_keeps_sigma_narrower_and_says_so(tiny_data: Path, tmp_path: Path) -> None:
    """The KL pushes σ towards the prior; weighting it by λ < 1 pushes less, so with the same seeds, data and
    steps the tempered posterior ends narrower, its validation ELBO is still the full one, and the card names
    the tempering."""
    from training.model_card import objective_text

    rows = {}
    for weight in (1.0, 0.01):
        cfg = _config(tiny_data, tmp_path / f"w{weight}", rho_init=-5.0, kl_weight=weight)
        Trainer(cfg, progress=False).fit(prepare_data(cfg))
        rows[weight] = json.loads((tmp_path / f"w{weight}" / "history.json").read_text())[-1]
        assert rows[weight]["val_elbo"] == pytest.approx(rows[weight]["val_nll"] + rows[weight]["kl_per_example"])
    assert rows[0.01]["sigma/all/mean"] < rows[1.0]["sigma/all/mean"]
    assert rows[0.01]["kl_per_example"] > rows[1.0]["kl_per_example"]  # the full KL, larger for the colder run
    assert "full ELBO" in objective_text(_config(tiny_data, tmp_path))
    assert "TEMPERED ELBO (mean NLL + 0.01 · KL / N_train" in objective_text(
        _config(tiny_data, tmp_path, kl_weight=0.01))
    with pytest.raises(ValueError, match="kl_weight must be in"):
        _config(tiny_data, tmp_path, kl_weight=0.0)


def _config(data: Path, out: Path, **kw: object) -> TrainConfig:
    # device pinned: the CPU suite means CPU, on a GPU machine too (test_training_cuda.py runs the CUDA side)
    base: dict[str, object] = dict(data=str(data), out=str(out), device="cpu", width=2, input_size=32, epochs=2,
                                   nll_epochs=1, batch_size=8, eval_samples=2, mc_samples=4, checkpoint_every=100,
                                   n_bootstrap=10, rho_init=-3.0, lr=1e-3)
    base.update(kw)
    return TrainConfig(**base)  # type: ignore[arg-type]


def _final_state(out: Path) -> dict[str, torch.Tensor]:
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True, map_location="cpu")
    return ckpt["model"]


@pytest.mark.training
def test_resume_after_interruption_matches_an_uninterrupted_run(tiny_data: Path, tmp_path: Path) -> None:
    full_cfg = _config(tiny_data, tmp_path / "full")
    data = prepare_data(full_cfg)
    Trainer(full_cfg, progress=False).fit(data)

    cut_cfg = _config(tiny_data, tmp_path / "cut")
    # Interrupt mid-way through the second (ELBO) epoch, then continue with a fresh Trainer.
    state = Trainer(cut_cfg, progress=False).fit(data, stop_after_steps=5)
    assert (state.epoch, state.step_in_epoch) == (1, 1)
    resumed = Trainer(cut_cfg, progress=False).fit(data)
    assert resumed.epoch == 2

    a, b = _final_state(tmp_path / "full"), _final_state(tmp_path / "cut")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs after resume"
    hist_a = json.loads((tmp_path / "full" / "history.json").read_text())
    hist_b = json.loads((tmp_path / "cut" / "history.json").read_text())
    for ra, rb in zip(hist_a, hist_b, strict=True):
        assert {k: v for k, v in ra.items() if k != "seconds"} == {k: v for k, v in rb.items() if k != "seconds"}
    assert [r["phase"] for r in hist_a] == ["nll_means", "elbo"]
    assert hist_a[1]["train_kl"] > 0 and hist_a[0]["train_kl"] == 0


@pytest.mark.training
def test_an_epoch_resumed_mid_way_counts_the_time_of_its_earlier_calls(tiny_data: Path, tmp_path: Path) -> None:
    cfg = _config(tiny_data, tmp_path / "run")
    data = prepare_data(cfg)
    Trainer(cfg, progress=False).fit(data, stop_after_steps=5)  # 4 steps of epoch 1, 1 step into epoch 2
    ckpt_path = tmp_path / "run" / "checkpoint.pt"
    ckpt = torch.load(ckpt_path, weights_only=True)
    assert ckpt["state"]["step_in_epoch"] == 1 and ckpt["state"]["epoch_sums"]["seconds"] > 0.0
    # stand-in for a long first call: the saved time must reach the epoch's row, not restart from zero
    ckpt["state"]["epoch_sums"]["seconds"] = 1e6
    torch.save(ckpt, ckpt_path)
    Trainer(cfg, progress=False).fit(data)
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert [r["epoch"] for r in history] == [1, 2]
    assert 1e6 < history[1]["seconds"] < 1e6 + 3600 and history[0]["seconds"] < 3600


@pytest.mark.training
def test_first_epoch_trains_only_the_means(tiny_data: Path, tmp_path: Path) -> None:
    cfg = _config(tiny_data, tmp_path / "run", epochs=1)
    torch.manual_seed(cfg.seed)
    from training.loop import build_model
    initial = build_model(cfg).state_dict()
    Trainer(cfg, progress=False).fit()
    after = _final_state(tmp_path / "run")
    rho_keys = [k for k in after if k.endswith("_rho")]
    mu_keys = [k for k in after if k.endswith("_mu")]
    assert rho_keys and all(torch.equal(after[k], initial[k]) for k in rho_keys)
    assert any(not torch.equal(after[k], initial[k]) for k in mu_keys)


@pytest.mark.training
def test_resume_refuses_changed_settings(tiny_data: Path, tmp_path: Path) -> None:
    cfg = _config(tiny_data, tmp_path / "run", epochs=1)
    Trainer(cfg, progress=False).fit()
    with pytest.raises(ValueError, match=r"different settings.*lr"):
        Trainer(_config(tiny_data, tmp_path / "run", epochs=2, lr=5e-2), progress=False).fit()


@pytest.mark.training
def test_cli_fit_evaluate_export_round_trip(tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    art = tmp_path / "artifact"
    assert train_main(["fit", "--data", str(tiny_data), "--out", str(tmp_path / "run"), "--artifact", str(art),
                       "--width", "2", "--input-size", "32", "--epochs", "2", "--batch-size", "8",
                       "--eval-samples", "2", "--no-progress", "--rho-init", "-3", "--device", "cpu"]) == 0
    artifact = load_artifact(art)
    assert artifact.config.training_data == "synthetic"
    assert "not for clinical use" in artifact.model_card.lower()
    # the command as run, its absolute paths cut to …/<last part> (the card travels; the machine's folders do not)
    assert f"Command: `radscreen-train fit --data …/{tiny_data.name} --out …/run --artifact …/artifact" \
        in artifact.model_card
    assert str(tmp_path) not in artifact.model_card
    assert 0.0 <= artifact.calibration.referral_threshold_mi <= 0.6932
    assert artifact.config.serving.mc_samples == 16 and artifact.config.serving.head_draws == 64  # the CLI's defaults
    assert "16 posterior draws, seed 20260, each with 64 draws of the final layer (1024 posterior samples" \
        in artifact.model_card
    assert "Storage: μ and ρ in fp32" in artifact.model_card and "Δρ/(lr·steps) = " in artifact.model_card
    stored = load_file(str(art / "weights.safetensors"))  # the bytes on disk, not the loaded copy
    assert stored and all(t.dtype == torch.float32 for t in stored.values() if t.is_floating_point())
    # The artifact's weights are the run's best weights.
    model = artifact.build_model()
    net = materialise_draws(model, mc_samples=16, seed=artifact.config.serving.draw_seed, head_draws=64)
    assert net(torch.zeros(1, 3, 32, 32)).shape == (16 * 64, 1, 1)
    # calibration scored with the draws the artifact now hands out (TrainConfig.serving_draws before it existed)
    assert TrainConfig.load(tmp_path / "run" / "config.json").serving_draws() == artifact.serving_draws()
    # The run kept the test draws its report was computed from: re-evaluating them gives the same numbers.
    draws = load_draws(tmp_path / "run" / "eval_test" / DRAWS_FILENAME)
    saved = json.loads((tmp_path / "run" / "eval_test" / "evaluation.json").read_text())
    assert draws.probs.shape == (16 * 64, saved["n_images"]) and len(draws.ids) == saved["n_images"]
    assert all(i.endswith(".jpeg") for i in draws.ids)
    assert evaluate_predictions(draws.probs, draws.labels, n_bootstrap=0).auc == pytest.approx(saved["auc"])

    out = tmp_path / "eval"
    assert train_main(["evaluate", "--artifact", str(art), "--data", str(tiny_data), "--out", str(out),
                       "--n-bootstrap", "5"]) == 0
    report = json.loads((out / "evaluation.json").read_text())
    assert report["n_images"] == 48
    assert (out / "referral_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    graph = tmp_path / "graph.onnx"
    assert train_main(["export", "--artifact", str(art), "--out", str(graph)]) == 0
    assert 0 < graph.stat().st_size < 1_000_000

    # A finished run is re-scored with other head draws without retraining: same weights, new calibration.
    weights = (art / "weights.safetensors").read_bytes()
    assert train_main(["fit", "--data", str(tiny_data), "--out", str(tmp_path / "run"), "--artifact", str(art),
                       "--width", "2", "--input-size", "32", "--epochs", "2", "--batch-size", "8",
                       "--eval-samples", "2", "--no-progress", "--rho-init", "-3", "--head-draws", "4",
                       "--device", "cpu"]) == 0
    rescored = load_artifact(art)
    assert rescored.config.serving.head_draws == 4 and rescored.sha256 != artifact.sha256
    assert (art / "weights.safetensors").read_bytes() == weights
    assert load_draws(tmp_path / "run" / "eval_test" / DRAWS_FILENAME).probs.shape == (16 * 4, saved["n_images"])


def test_head_draws_are_a_serving_setting_and_older_runs_read_as_one(tmp_path: Path) -> None:
    cfg = _config(tmp_path, tmp_path / "run", head_draws=64)
    assert "head_draws" not in cfg.resume_key()  # re-scoring a finished run with other head draws is allowed
    saved = cfg.to_dict()
    saved.pop("head_draws")  # a run directory written before head draws existed
    assert TrainConfig.from_dict(saved).head_draws == 1
    with pytest.raises(ValueError, match="head_draws must be >= 1"):
        _config(tmp_path, tmp_path / "run", head_draws=0)


@pytest.mark.parametrize("k", [0, 257])
def test_a_serving_k_the_artifact_would_refuse_is_refused_before_training(tmp_path: Path, k: int) -> None:
    with pytest.raises(ValueError, match=r"mc_samples must be in \[1, 256\]"):
        _config(tmp_path, tmp_path / "run", mc_samples=k)


@pytest.mark.training
def test_baseline_family_is_evaluated_without_a_serving_artifact(tiny_data: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert train_main(["fit", "--data", str(tiny_data), "--out", str(out), "--model", "dropout_vgg16_star",
                       "--width", "2", "--input-size", "32", "--epochs", "1", "--batch-size", "8",
                       "--eval-samples", "2", "--no-progress", "--device", "cpu"]) == 0
    assert "artifact: none" in capsys.readouterr().out
    assert not (out / "artifact").exists()
    report = json.loads((out / "eval_val" / "evaluation.json").read_text())
    assert report["n_images"] > 0
    assert json.loads((out / "history.json").read_text())[0]["phase"] == "nll_means"


def test_mc_probabilities_refuses_head_draws_for_a_baseline() -> None:
    from models.nn.registry import create_model
    from training.predict import mc_probabilities

    model = create_model("dropout_vgg16_star", width=2, input_size=32)
    with pytest.raises(ValueError, match="only a Bayesian model's last layer has a posterior"):
        mc_probabilities(model, [], mean=(0.5,) * 3, std=(0.2,) * 3, draws=ServingDraws(2, 0, 4))  # type: ignore[arg-type]


def test_the_cpu_suite_trains_on_the_cpu_on_a_gpu_machine_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact-resume comparisons are bitwise CPU facts; on a GPU machine these tests must not drift to
    cuda (tests/gpu/test_training_cuda.py covers the CUDA side)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert Trainer(_config(tmp_path, tmp_path / "run"), progress=False).device == torch.device("cpu")


def test_a_cuda_trainer_runs_ieee_fp32_with_deterministic_cudnn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """Exact resume on CUDA needs fixed cuDNN kernels, and fp32 there must not be TF32 (flags only: no GPU)."""
    from models.platform.cuda import MathFlags, apply_math_flags, current_math_flags, ieee_fp32_in_force

    saved = current_math_flags()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    apply_math_flags(MathFlags(conv_fp32="tf32", matmul_fp32="tf32", cudnn_benchmark=True, cudnn_deterministic=False))
    try:
        trainer = Trainer(_config(tmp_path, tmp_path / "run", device="cuda"), progress=False)
        assert trainer.device.type == "cuda" and trainer.config.precision == "fp32"
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark and ieee_fp32_in_force()
    finally:
        apply_math_flags(saved)


def test_training_bf16_on_a_gpu_counts_only_native_support(monkeypatch: pytest.MonkeyPatch) -> None:
    from training.loop import training_runtime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    on_gpu = TrainConfig(data="d", out="o", device="cuda", precision="auto")
    assert training_runtime(on_gpu).precision == "fp32"
    with pytest.raises(ValueError, match=r"this GPU has no native bf16 \(Tesla T4"):
        training_runtime(replace(on_gpu, precision="bf16"))
