"""Warm start (``--init-from``): a run begins exactly at an artifact's posterior, keeps its input
normalisation, measures Δρ from the artifact's ρ, refuses what does not fit, and names its origin in the card."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from models.artifact import load_artifact
from models.image.preprocessing import LEGACY
from models.nn.vgg import mc_logits
from training.checkpoint import load_checkpoint
from training.cli import main as train_main
from training.config import TrainConfig
from training.data.prepare import prepare_data
from training.finalise import finalise_run
from training.loop import Trainer, build_model
from training.warm_start import load_into

pytestmark = pytest.mark.training

BASE = dict(device="cpu", width=2, input_size=32, batch_size=8, eval_samples=2, mc_samples=4, head_draws=2,
            checkpoint_every=100, n_bootstrap=5, rho_init=-3.0)


def _config(data: Path, out: Path, **kw: object) -> TrainConfig:
    return TrainConfig(data=str(data), out=str(out), **{**BASE, **kw})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def parent(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny trained artifact (1 NLL epoch + 2 ELBO epochs, ρ lr 5e-2 so that ρ has left ρ0 = -3)."""
    root = tmp_path_factory.mktemp("parent")
    cfg = _config(tiny_data, root / "run", epochs=3, rho_lr=5e-2, artifact=str(root / "artifact"),
                  name="parent-model", version="9.9.9")
    Trainer(cfg, progress=False).fit()
    finalise_run(cfg, command="radscreen-train fit --the-parent-command")
    return root / "artifact"


def test_a_warm_started_run_begins_at_the_artifact_and_measures_rho_from_it(tiny_data: Path, parent: Path,
                                                                             tmp_path: Path) -> None:
    artifact = load_artifact(parent)
    stored = artifact.state_dict()
    rho0 = {k: v for k, v in stored.items() if k.endswith("_rho")}
    assert max(float((v + 3.0).abs().max()) for v in rho0.values()) > 0.05  # the parent's ρ really moved

    cfg = _config(tiny_data, tmp_path / "child", epochs=1, nll_epochs=0, lr=1e-3, rho_lr=1e-3,
                  init_from=str(parent), max_steps_per_epoch=3, split_seed=5)  # another split: other stats
    data = prepare_data(cfg)
    own = prepare_data(_config(tiny_data, tmp_path / "x", split_seed=5))
    assert own.mean != artifact.config.input.mean
    # not the run's own statistics
    assert (data.mean, data.std) == (artifact.config.input.mean, artifact.config.input.std)

    state = Trainer(cfg, progress=False).fit(data)
    after = load_checkpoint(tmp_path / "child")
    assert after is not None
    row = state.history[-1]
    rhos = torch.cat([after["model"][k].flatten().double() for k in rho0])
    origin = torch.cat([rho0[k].flatten().double() for k in rho0])
    assert row["rho_shift_mean"] == pytest.approx(float((rhos - origin).abs().mean()), rel=1e-9)
    assert row["rho_budget"] == pytest.approx(3 * 1e-3)
    assert row["rho_shift_max"] <= 3 * 1e-3 * 1.01  # Adam moves each ρ by ≲ lr per step: 3 steps from the artifact
    # σ statistics are those of the model, which starts at the parent's σ, not at softplus(ρ0)
    assert row["sigma/all/mean"] == pytest.approx(float(F.softplus(rhos).mean()), rel=1e-6)
    assert json.loads((tmp_path / "child" / "init.json").read_text())["sha256"] == artifact.sha256


def test_a_warm_up_ramps_the_steps_a_warm_start_takes(tiny_data: Path, parent: Path, tmp_path: Path) -> None:
    cfg = _config(tiny_data, tmp_path / "ramp", epochs=1, nll_epochs=0, lr=1e-3, rho_lr=1e-2,
                  init_from=str(parent), max_steps_per_epoch=3, lr_warmup_steps=4)
    row = Trainer(cfg, progress=False).fit().history[-1]
    budget = 1e-2 * (1 + 2 + 3) / 4  # lr_ρ · (1/4 + 2/4 + 3/4): the ramp's steps, not three full ones
    assert row["rho_budget"] == pytest.approx(budget)
    assert budget * 0.5 < row["rho_shift_max"] <= budget * 1.01


def test_the_starting_point_is_validated_as_epoch_0_and_wins_if_nothing_beats_it(
        tiny_data: Path, parent: Path, tmp_path: Path) -> None:
    art = tmp_path / "artifact"
    # lr 0.5 with no warm-up wrecks the posterior in its first steps: epoch 1 validates worse than epoch 0
    assert train_main(["fit", "--data", str(tiny_data), "--out", str(tmp_path / "run"), "--artifact", str(art),
                       "--width", "2", "--input-size", "32", "--epochs", "1", "--nll-epochs", "0", "--lr", "0.5",
                       "--batch-size", "8", "--eval-samples", "2", "--head-draws", "2", "--no-progress",
                       "--init-from", str(parent), "--rho-init", "-3"]) == 0
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert [(r["epoch"], r["phase"]) for r in history] == [(0, "init"), (1, "elbo")]
    start, parent_run = history[0], json.loads((parent.parent / "run" / "history.json").read_text())
    assert start["rho_shift_mean"] == 0.0 and start["rho_budget"] == 0.0
    best_parent = min(parent_run, key=lambda r: r["val_nll"])  # the parent's artifact holds its best epoch
    assert start["sigma/all/mean"] == pytest.approx(best_parent["sigma/all/mean"], rel=1e-9)
    assert history[1]["val_nll"] > start["val_nll"]
    child, original = load_artifact(art), load_artifact(parent)
    for k, v in original.state_dict().items():  # handed on unchanged
        assert torch.equal(child.state_dict()[k], v), k
    assert "- Best epoch: 0: no epoch of this run improved on the starting point" in child.model_card


def test_zero_learning_rate_leaves_the_artifact_weights_exactly(tiny_data: Path, parent: Path,
                                                                tmp_path: Path) -> None:
    # Adam with an lr this small cannot move an fp32 weight: the run holds exactly the loaded posterior.
    cfg = _config(tiny_data, tmp_path / "still", epochs=1, nll_epochs=0, lr=1e-30, init_from=str(parent),
                  max_steps_per_epoch=1)
    Trainer(cfg, progress=False).fit()
    after = load_checkpoint(tmp_path / "still")
    assert after is not None
    stored = load_artifact(parent).state_dict()
    for k, v in stored.items():
        assert torch.equal(after["model"][k], v), k


def test_the_card_names_the_parent_and_its_training(tiny_data: Path, parent: Path, tmp_path: Path) -> None:
    art = tmp_path / "artifact"
    assert train_main(["fit", "--data", str(tiny_data), "--out", str(tmp_path / "run"), "--artifact", str(art),
                       "--width", "2", "--input-size", "32", "--epochs", "1", "--nll-epochs", "0",
                       "--batch-size", "8", "--eval-samples", "2", "--head-draws", "2", "--no-progress",
                       "--max-steps-per-epoch", "2", "--init-from", str(parent)]) == 0
    child, sha = load_artifact(art), load_artifact(parent).sha256
    card = child.model_card
    assert f"initialised from parent-model 9.9.9 (32 px, sha256 {sha[:12]}…)" in card
    # the card names where the parent was read, without the training machine's folders (…/<last part>)
    assert f"- Initialised from: parent-model 9.9.9 (32 px, sha256 {sha[:12]}…), read from `…/{parent.name}`" in card
    assert str(tmp_path) not in card
    assert "- That model's training: `radscreen-train fit --the-parent-command`." in card
    assert "ρ from parent-model 9.9.9 (mean σ0 = " in card and "rho init -3.0" not in card
    assert (child.config.input.mean, child.config.input.std) == (load_artifact(parent).config.input.mean,
                                                     load_artifact(parent).config.input.std)


def test_what_does_not_fit_is_refused(tiny_data: Path, parent: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    wider = build_model(_config(tiny_data, tmp_path / "x", width=4))
    with pytest.raises(ValueError, match=r"architecture differs.*'width': \(2, 4\)"):
        load_into(wider, str(parent), preprocessing=load_artifact(parent).config.input.preprocessing)
    with pytest.raises(ValueError, match="preprocessing 'fov-local-mean/1', this run uses 'decode to RGB"):
        load_into(build_model(_config(tiny_data, tmp_path / "x")), str(parent), preprocessing=LEGACY)
    # through the CLI: one line, exit status 2, nothing trained
    assert train_main(["fit", "--data", str(tiny_data), "--out", str(tmp_path / "cli"), "--width", "4",
                       "--input-size", "32", "--epochs", "1", "--nll-epochs", "0", "--no-progress",
                       "--init-from", str(parent)]) == 2
    assert "architecture differs" in capsys.readouterr().err
    assert train_main(["fit", "--data", str(tiny_data), "--out", str(tmp_path / "cli2"), "--width", "2",
                       "--input-size", "32", "--epochs", "1", "--no-progress",
                       "--init-from", str(tmp_path / "no-such-artifact")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_resume_must_start_from_the_same_artifact(tiny_data: Path, parent: Path, tmp_path: Path) -> None:
    copy = tmp_path / "parent-copy"
    shutil.copytree(parent, copy)
    cfg = _config(tiny_data, tmp_path / "run", epochs=2, nll_epochs=0, init_from=str(copy), max_steps_per_epoch=2)
    Trainer(cfg, progress=False).fit(stop_after_steps=1)
    # another model now sits at the same path: resuming would measure Δρ from the wrong origin
    other = _config(tiny_data, tmp_path / "other", epochs=2, rho_lr=5e-2, artifact=str(tmp_path / "other-art"),
                    name="other-model")
    Trainer(other, progress=False).fit()
    finalise_run(other, command="x")
    shutil.rmtree(copy)
    shutil.copytree(tmp_path / "other-art", copy)
    with pytest.raises(ValueError, match=r"the run started from parent-model 9\.9\.9"):
        Trainer(cfg, progress=False).fit()


def test_a_run_at_another_input_size_starts_from_the_same_weights_and_names_the_artifacts_size(
        tiny_data: Path, parent: Path, tmp_path: Path) -> None:
    """Every layer is a 3x3 convolution or follows the global pooling: the weights apply at any input size, so a
    run may fine-tune a 32 px artifact at 64 px (as the 512 px recipe starts from the 256 px model)."""
    larger = build_model(_config(tiny_data, tmp_path / "x", input_size=64))
    source = load_into(larger, str(parent), preprocessing=load_artifact(parent).config.input.preprocessing)
    stored = load_artifact(parent).state_dict()
    assert all(torch.equal(larger.state_dict()[k].cpu(), v.cpu()) for k, v in stored.items())
    assert source.input_size == 32 and "(32 px, sha256" in source.describe()
    with torch.no_grad():
        assert mc_logits(larger, torch.zeros(2, 3, 64, 64), 2).shape[:2] == (2, 2)  # 32 px weights at 64 px
