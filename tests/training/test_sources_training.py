"""Training on a two-source manifest: exact resume with the weighted sampler, per-source validation per epoch,
Δρ/(lr·steps) per layer, and per-source test reports and card."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from training.cli import main as train_main
from training.config import TrainConfig
from training.data import read_synthetic
from training.data.prepare import prepare_data, read_rows
from training.data.sources import NATURAL_COPY, STRETCHED_COPY, write_sources_manifest
from training.finalise import finalise_run
from training.loop import Trainer


@pytest.fixture()
def two_source_manifest(tiny_data: Path, tmp_path: Path) -> Path:
    """The 48 tiny synthetic images as two sources: even patients 'odir', odd ones 'eyepacs' (two copies)."""
    rows = []
    for row in read_synthetic(tiny_data):
        odd = int(row.patient_id) % 2
        copy = (NATURAL_COPY, STRETCHED_COPY)[int(row.patient_id) // 2 % 2] if odd else None
        rows.append(replace(row, source=("odir", "eyepacs")[odd], copy=copy))
    return write_sources_manifest(rows, tmp_path / "two-sources.csv")


def _config(data: Path, out: Path, **kw: object) -> TrainConfig:
    base: dict[str, object] = dict(data=str(data), out=str(out), layout="manifest", device="cpu", width=2,
                                   input_size=32, epochs=2, nll_epochs=1, batch_size=8, eval_samples=2, mc_samples=4,
                                   checkpoint_every=100, n_bootstrap=10, rho_init=-3.0, lr=1e-3, rho_lr=1e-2,
                                   source_weights={"odir": 0.25, "eyepacs": 0.75}, split=(0.5, 0.25, 0.25),
                                   lr_schedule="cosine", lr_warmup_steps=3)  # the 2.0.0 recipe's schedule
    base.update(kw)
    return TrainConfig(**base)  # type: ignore[arg-type]


@pytest.mark.training
def test_a_weighted_two_source_run_resumes_exactly(two_source_manifest: Path, tmp_path: Path) -> None:
    full_cfg = _config(two_source_manifest, tmp_path / "full")
    data = prepare_data(full_cfg)
    assert {r.source for r in data.val.rows} == {"odir", "eyepacs"}
    assert {r.copy for r in data.val.rows} == {None, NATURAL_COPY, STRETCHED_COPY}
    Trainer(full_cfg, progress=False).fit(data)
    cut_cfg = _config(two_source_manifest, tmp_path / "cut")
    state = Trainer(cut_cfg, progress=False).fit(data, stop_after_steps=4)
    assert (state.epoch, state.step_in_epoch) == (1, 1)  # stopped inside the ELBO epoch
    Trainer(cut_cfg, progress=False).fit(data)
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    history = json.loads((tmp_path / "full" / "history.json").read_text())
    resumed = json.loads((tmp_path / "cut" / "history.json").read_text())
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in history] == \
        [{k: v for k, v in r.items() if k != "seconds"} for r in resumed]
    last = history[-1]
    for group in ("odir", "eyepacs", f"eyepacs/{NATURAL_COPY}", f"eyepacs/{STRETCHED_COPY}"):
        assert f"val_nll/{group}" in last and f"val_n/{group}" in last
    assert last["val_n/odir"] + last["val_n/eyepacs"] == len(data.val)
    ratios = {k: v for k, v in last.items() if k.startswith("rho_ratio/")}
    assert "rho_ratio/head" in ratios and len(ratios) == 14  # 13 convolutions and the head
    assert all(0 <= v <= 1.0001 for v in ratios.values())  # Adam moves a ρ by at most ≈ lr per step

    result = finalise_run(full_cfg, data=data, command="radscreen-train fit --layout manifest ...")
    for split, dataset in (("val", data.val), ("test", data.test)):
        by_source = json.loads((tmp_path / "full" / f"eval_{split}" / "by_source.json").read_text())
        assert {"pooled", "odir", "eyepacs"} <= set(by_source)
        assert by_source["odir"]["n_images"] + by_source["eyepacs"]["n_images"] == by_source["pooled"]["n_images"] \
            == len(dataset)
    assert result.artifact_dir is not None
    card = (result.artifact_dir / "MODEL_CARD.md").read_text()
    assert "## Per source" in card and "| test | eyepacs |" in card and "| validation | odir |" in card
    assert "Sampling weights by source: eyepacs 0.75, odir 0.25" in card
    assert "Referable = grade >= 2 (moderate NPDR or worse)" in card
    assert "| head |" in card and "Δρ/(lr·steps) (σ set by the optimiser above 0.9)" in card

    # evaluate on the whole manifest: the figures per source and per copy as well as pooled
    out = tmp_path / "eval"
    assert train_main(["evaluate", "--artifact", str(result.artifact_dir), "--layout", "manifest", "--data",
                       str(two_source_manifest), "--out", str(out), "--n-bootstrap", "5", "--no-progress"]) == 0
    evaluated = json.loads((out / "by_source.json").read_text())
    assert evaluated["pooled"]["n_images"] == 48
    assert evaluated[f"eyepacs/{NATURAL_COPY}"]["n_images"] + evaluated[f"eyepacs/{STRETCHED_COPY}"]["n_images"] \
        == evaluated["eyepacs"]["n_images"]


@pytest.mark.training
def test_a_train_only_copy_trains_and_is_never_evaluated(two_source_manifest: Path, tmp_path: Path) -> None:
    cfg = _config(two_source_manifest, tmp_path / "run", train_only_copies=(STRETCHED_COPY,), epochs=1,
                  nll_epochs=0, max_steps_per_epoch=1)
    data = prepare_data(cfg)
    assert STRETCHED_COPY in {r.copy for r in data.train.rows}
    assert STRETCHED_COPY not in {r.copy for r in [*data.val.rows, *data.test.rows]}
    Trainer(cfg, progress=False).fit(data)
    row = json.loads((tmp_path / "run" / "history.json").read_text())[-1]
    assert f"val_n/eyepacs/{STRETCHED_COPY}" not in row and "val_n/eyepacs" in row


@pytest.mark.training
def test_a_resume_refuses_changed_source_weights(two_source_manifest: Path, tmp_path: Path) -> None:
    cfg = _config(two_source_manifest, tmp_path / "run")
    Trainer(cfg, progress=False).fit(stop_after_steps=2)
    changed = _config(two_source_manifest, tmp_path / "run", source_weights={"odir": 0.5, "eyepacs": 0.5})
    with pytest.raises(ValueError, match="source_weights"):
        Trainer(changed, progress=False).fit()


def test_saved_draw_ids_tell_two_sources_apart_whose_files_are_named_alike(tmp_path: Path) -> None:
    """ODIR and EyePACS both name photographs ``<n>_left.jpg``: the ids of saved draws carry source and copy."""
    from training.data.manifest import ManifestRow
    from training.finalise import image_ids

    odir = ManifestRow(tmp_path / "odir" / "13_left.jpg", 0, "13", "left", 2, source="odir")
    eyepacs = ManifestRow(tmp_path / "eyepacs" / "13_left.jpg", 2, "13", "left", 3, source="eyepacs", copy=NATURAL_COPY)
    plain = ManifestRow(tmp_path / "synth" / "13_left.jpg", 0, "13", "left", 4)
    assert image_ids([odir, eyepacs, plain]) == ["odir/13_left.jpg", f"eyepacs/{NATURAL_COPY}/13_left.jpg",
                                                 "13_left.jpg"]


def test_packed_shards_of_several_sources_name_the_sources_as_the_manifest_does(two_source_manifest: Path,
                                                                                tmp_path: Path) -> None:
    """The card and every response state the training data: a run from shards names each source and its eyes,
    not the shards' file name."""
    from training.finalise import _dataset_description

    packed = tmp_path / "packed"
    assert train_main(["pack", "--data", str(two_source_manifest), "--layout", "manifest", "--out", str(packed),
                       "--input-size", "32"]) == 0
    rows = read_rows(_config(two_source_manifest, tmp_path / "r"))
    unpacked, _, _ = _dataset_description(_config(two_source_manifest, tmp_path / "r"), rows)
    shards, synthetic, _ = _dataset_description(_config(packed, tmp_path / "s", layout="shards"), rows)
    assert shards == f"{unpacked} (packed shards)" and not synthetic
    assert "odir" in shards.lower() and "eyepacs" in shards.lower() and "manifest" not in shards
