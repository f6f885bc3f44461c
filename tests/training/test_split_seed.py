"""``split_seed``: ensemble members and seed replicates train on one split while their weights differ."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from training.cli import main as train_main
from training.config import TrainConfig
from training.data.manifest import ManifestRow
from training.data.prepare import prepare_data, read_rows
from training.data.splits import split_by_patient
from training.loop import Trainer


def _config(data: Path, out: Path, **kw: object) -> TrainConfig:
    base: dict[str, object] = dict(data=str(data), out=str(out), width=2, input_size=32, epochs=1, nll_epochs=1,
                                   batch_size=8, eval_samples=2, mc_samples=2, grad_sd_samples=0, n_bootstrap=4)
    base.update(kw)
    return TrainConfig(**base)  # type: ignore[arg-type]


def _paths(rows: Sequence[ManifestRow]) -> list[str]:
    return [str(r.path) for r in rows]


def test_split_seed_fixes_the_split_while_the_weight_seed_changes(tiny_data: Path, tmp_path: Path) -> None:
    a_cfg = _config(tiny_data, tmp_path / "a", seed=0, split_seed=0)
    b_cfg = _config(tiny_data, tmp_path / "b", seed=1, split_seed=0)
    a, b = prepare_data(a_cfg), prepare_data(b_cfg)
    for part in ("train", "val", "test"):
        assert _paths(getattr(a.split, part)) == _paths(getattr(b.split, part))
    Trainer(a_cfg, progress=False).fit(a, stop_after_steps=1)
    Trainer(b_cfg, progress=False).fit(b, stop_after_steps=1)
    wa = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)["model"]
    wb = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["model"]
    assert wa.keys() == wb.keys()
    assert any(not torch.equal(wa[k], wb[k]) for k in wa)  # other initial weights (and data order)
    assert json.loads((tmp_path / "b" / "config.json").read_text())["split_seed"] == 0


def test_without_split_seed_the_split_follows_the_seed_as_before(tiny_data: Path, tmp_path: Path) -> None:
    rows = read_rows(_config(tiny_data, tmp_path))
    for seed in (0, 1):
        cfg = _config(tiny_data, tmp_path, seed=seed)
        assert cfg.split_seed is None and cfg.effective_split_seed == seed
        assert _paths(prepare_data(cfg).split.train) == _paths(split_by_patient(rows, cfg.split, seed=seed).train)
    assert _paths(split_by_patient(rows, (0.7, 0.15, 0.15), seed=0).train) != _paths(
        split_by_patient(rows, (0.7, 0.15, 0.15), seed=1).train)
    # a config.json written before the field existed still loads (split seed = seed)
    old = _config(tiny_data, tmp_path, seed=3).to_dict()
    del old["split_seed"]
    assert TrainConfig.from_dict(old).effective_split_seed == 3


def test_cli_records_the_split_seed(tiny_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert train_main(["fit", "--data", str(tiny_data), "--out", str(out), "--width", "2", "--input-size", "32",
                       "--epochs", "1", "--batch-size", "8", "--seed", "5", "--split-seed", "2",
                       "--stop-after-steps", "1", "--grad-sd-samples", "0", "--no-progress"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert (saved["seed"], saved["split_seed"]) == (5, 2)
