"""``radscreen-train adapt`` on a tiny artifact and generated photographs: the site artifact loads in the service,
the posterior-prior's KL is to the parent's posterior, small or broken data are refused with what is needed,
and a run killed mid-way resumes to the same weights."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from models.artifact import WEIGHTS_FILE, load_artifact
from models.nn.priors import PosteriorPrior
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import ScorerSpec
from support.artifacts import build_tiny_artifact
from support.images import blank_png, encode, fundus_like, fundus_png
from training.adapt import AdaptError, AdaptRequest, TuneOptions, adapt, needed_referable, read_site_labels
from training.adapt.run import Mode
from training.adapt.site import check_enough
from training.checkpoint import CHECKPOINT_FILE
from training.cli import main
from training.loop import Trainer


def _site(root: Path, *, patients: int = 20, extra_rows: list[dict[str, str]] | None = None) -> Path:
    """Two photographs per patient, a referable patient every other one; a labels file beside them."""
    images = root / "images"
    images.mkdir(parents=True)
    rows = []
    for p in range(patients):
        for k, eye in enumerate(("left", "right")):
            name = f"{p:03d}_{eye}.png"
            (images / name).write_bytes(fundus_png(2 * p + k, size=192))  # gradable photographs
            rows.append({"image": name, "grade": str(3 if p % 2 else 0), "patient": f"P{p}", "eye": eye,
                         "camera": "ignored"})
    rows += extra_rows or []
    labels = root / "labels.csv"
    with labels.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["image", "grade", "referable", "patient", "eye", "camera"])
        writer.writeheader()
        writer.writerows(rows)
    return labels


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_artifact(tmp_path_factory.mktemp("parent") / "art", head_draws=2, mc_samples=4,
                               validation={"operating_point": {"max_missed_share": 0.25}, "auc": 0.5})


def _request(tmp: Path, parent: Path, labels: Path, mode: Mode, name: str = "adapted", **kw: object) -> AdaptRequest:
    tune = TuneOptions(epochs=3, batch_size=8, precision="fp32", lr=1e-3)
    return AdaptRequest(parent=parent, labels=labels, image_root=labels.parent / "images", mode=mode,
                        out=tmp / name, run_dir=tmp / f"{name}.run", tune=tune, repeats=20, **kw)  # type: ignore[arg-type]


def _weights_sha(directory: Path) -> str:
    return hashlib.sha256((directory / WEIGHTS_FILE).read_bytes()).hexdigest()


def test_recalibrate_keeps_the_weights_and_serves(tmp_path: Path, parent: Path) -> None:
    labels = _site(tmp_path / "site", extra_rows=[{"image": "dark.png", "grade": "0", "patient": "X"}])
    (tmp_path / "site" / "images" / "dark.png").write_bytes(blank_png(192))
    result = adapt(_request(tmp_path, parent, labels, "recalibrate"), command="radscreen-train adapt ...",
                   progress=False)
    site, par = load_artifact(tmp_path / "adapted"), load_artifact(parent)
    assert _weights_sha(tmp_path / "adapted") == _weights_sha(parent)
    assert site.calibration.decision_threshold == result.promise.decision_threshold
    assert site.calibration.validation["parent"] == par.calibration.validation
    record = site.calibration.validation["site"]
    assert record["refused_by_quality_gate"] and sum(record["refused_by_quality_gate"].values()) == 1
    assert record["gradable"]["eyes"] == 40 and record["parent"]["sha256"] == par.sha256
    assert site.config.serving_draws() == par.config.serving_draws()
    assert site.calibration.precision_drift == {}
    card = site.model_card
    assert par.sha256 in card and "recalibrate" in card and "Promise (out of sample)" in card
    assert "P3" not in card and "003_left" not in card and str(tmp_path) not in card  # counts only
    scorer = load_scorer(ScorerSpec(model_dir=tmp_path / "adapted", backend="torch", device="cpu", precision="fp32"))
    photo = (labels.parent / "images" / "000_left.png").read_bytes()
    assert 0.0 <= scorer.score_batch([prepare_image(photo, scorer.pipeline)])[0].probability <= 1.0


def test_posterior_prior_is_the_parents_posterior(tmp_path: Path, parent: Path) -> None:
    labels = _site(tmp_path / "site")
    adapt(_request(tmp_path, parent, labels, "posterior-prior", miss_share=0.25), command="adapt",
          progress=False)
    site = load_artifact(tmp_path / "adapted")
    assert site.config.prior["kind"] == "parent_posterior"
    assert site.config.prior["sha256"] == load_artifact(parent).sha256
    assert _weights_sha(tmp_path / "adapted") != _weights_sha(parent)  # the weights moved
    # the trainer's prior, rebuilt on the finished run (resumed from its checkpoint), is the parent's, not the run's
    config = json.loads((tmp_path / "adapted.run" / "tune" / "config.json").read_text())
    from training.config import TrainConfig
    from training.data.dataset import ManifestDataset
    from training.data.prepare import PreparedData
    from training.data.splits import DataSplit

    cfg = TrainConfig.from_dict(config)
    art = load_artifact(parent)
    empty = ManifestDataset([], transform=art.image_transform())
    rows = [e.row(labels.parent / "images") for e in read_site_labels(labels, labels.parent / "images").eyes[:2]]
    probe = ManifestDataset(rows, transform=art.image_transform())
    run = Trainer(cfg, progress=False)._start(PreparedData(DataSplit([], [], []), probe, probe, empty,
                                                          art.config.input.mean, art.config.input.std))
    assert isinstance(run.prior, PosteriorPrior)
    expected = PosteriorPrior.from_model(art.build_model())
    for name, mu in expected.mu.items():
        torch.testing.assert_close(run.prior.mu[name], mu)
        torch.testing.assert_close(run.prior.sigma[name], expected.sigma[name])
    moved = dict(run.model.named_parameters())
    assert any(not torch.equal(moved[n + "_mu"], expected.mu[n]) for n in expected.mu)  # the run's own posterior


def test_finetune_keeps_sigma(tmp_path: Path, parent: Path) -> None:
    labels = _site(tmp_path / "site")
    adapt(_request(tmp_path, parent, labels, "finetune", miss_share=0.25), command="adapt", progress=False)
    tuned, par = load_artifact(tmp_path / "adapted").state_dict(), load_artifact(parent).state_dict()
    rhos = [k for k in par if k.endswith("_rho")]
    assert all(torch.equal(tuned[k], par[k]) for k in rhos)  # σ kept: the means alone were fitted
    assert any(not torch.equal(tuned[k], par[k]) for k in par if k.endswith("_mu"))


def test_a_killed_run_resumes_to_the_same_weights(tmp_path: Path, parent: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    labels = _site(tmp_path / "site")
    adapt(_request(tmp_path, parent, labels, "posterior-prior", name="whole", miss_share=0.25), command="adapt",
          progress=False)
    original = Trainer.train_step
    calls = {"n": 0}

    def dies_at_step_5(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:  # in the second epoch, after the first epoch's checkpoint
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "train_step", dies_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        adapt(_request(tmp_path, parent, labels, "posterior-prior", name="killed", miss_share=0.25),
              command="adapt", progress=False)
    assert not (tmp_path / "killed").exists()
    assert (tmp_path / "killed.run" / "tune" / CHECKPOINT_FILE).is_file()  # what the second call resumes from
    monkeypatch.setattr(Trainer, "train_step", original)
    adapt(_request(tmp_path, parent, labels, "posterior-prior", name="killed", miss_share=0.25), command="adapt",
          progress=False)
    assert _weights_sha(tmp_path / "killed") == _weights_sha(tmp_path / "whole")
    a, b = (load_artifact(tmp_path / n).calibration for n in ("whole", "killed"))
    assert (a.decision_threshold, a.referral_threshold_mi) == (b.decision_threshold, b.referral_threshold_mi)


def test_too_few_referable_eyes_are_refused_with_the_number_needed(tmp_path: Path, parent: Path) -> None:
    labels = _site(tmp_path / "site", patients=6)  # 6 referable eyes
    with pytest.raises(AdaptError, match=r"hold 6 referable eyes; a miss-share bound of 10% needs at least 20"):
        adapt(_request(tmp_path, parent, labels, "recalibrate", miss_share=0.1), command="adapt", progress=False)
    assert not (tmp_path / "adapted.run" / "scores-parent").exists()  # refused before any scoring
    assert needed_referable(0.05) == 40 and needed_referable(0.02) == 100 and needed_referable(0.25) == 8


def test_needed_is_enough() -> None:
    from training.adapt.site import SiteEye

    eyes = [SiteEye(i, f"{i}.png", i < 8, None, f"p{i}", None) for i in range(20)]
    check_enough(eyes, 0.25, "eyes")  # exactly the number needed passes
    with pytest.raises(AdaptError, match="needs at least 8"):
        check_enough(eyes[1:], 0.25, "eyes")


def test_the_labels_file_rows_are_counted_not_guessed(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    for name in ("a.png", "b.png", "c.png"):
        (images / name).write_bytes(encode(fundus_like(1)))
    (tmp_path / "secret.png").write_bytes(encode(fundus_like(2)))
    labels = tmp_path / "labels.csv"
    labels.write_text("Image,Grade,Referable,Patient\n"
                      "a.png,1,1,P1\n"         # referable wins over the grade (macular oedema)
                      "b.png,3,,P1\n"
                      "c.png,7,,P2\n"          # not a grade
                      "missing.png,0,,P3\n"
                      "b.png,3,,P1\n"          # the same file again
                      "../secret.png,0,,P4\n"  # outside the image folder
                      ",0,,P5\n"
                      "c.png,,,P2\n")          # no label
    site = read_site_labels(labels, images)
    assert [(e.image, e.referable, e.grade) for e in site.eyes] == [("a.png", True, 1), ("b.png", True, 3)]
    assert site.skipped == {"grade not 0-4": [4], "missing file": [5], "duplicate image": [6],
                            "image outside the image folder": [7], "no image": [8], "no label": [9]}
    assert site.eyes[0].row(images).referable and site.eyes[0].row(images).grade == 1


def test_a_labels_file_without_the_columns_is_one_line(tmp_path: Path, parent: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "images").mkdir()
    labels = tmp_path / "labels.csv"
    labels.write_text("file,dr\nx.png,0\n")
    code = main(["adapt", "--from", str(parent), "--data", str(labels), "--image-root", str(tmp_path / "images"),
                 "--mode", "recalibrate", "--artifact", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "needs an 'image' column and a 'grade' (0-4) or 'referable' (0/1) column" in err


def test_a_resumed_run_with_other_options_is_refused(tmp_path: Path, parent: Path) -> None:
    labels = _site(tmp_path / "site", patients=6)
    with pytest.raises(AdaptError):
        adapt(_request(tmp_path, parent, labels, "recalibrate", miss_share=0.1), command="adapt", progress=False)
    with pytest.raises(AdaptError, match="holds a run with other options"):
        adapt(_request(tmp_path, parent, labels, "finetune", miss_share=0.1), command="adapt", progress=False)


def test_the_promise_is_cross_fitted() -> None:
    """In sample the bound holds by construction; the cross-fitted miss share is what eyes that chose nothing see."""
    from training.adapt import site_promise

    rng = np.random.default_rng(0)
    y = (rng.random(400) < 0.3).astype(int)
    p = np.clip(0.3 * y + rng.normal(0.3, 0.15, y.size), 0.01, 0.99)
    probs = np.stack([np.clip(p + rng.normal(0, 0.01, y.size), 0, 1) for _ in range(8)])
    patients = [f"p{i // 2}" for i in range(y.size)]
    promise = site_promise(probs, y, patients, miss_share=0.05, parent_probs=probs, parent_thresholds=(0.5, 1.0),
                           repeats=50)
    assert promise.in_sample["missed_share"] <= 0.05
    assert promise.missed.low <= promise.missed.value <= promise.missed.high
    assert promise.missed.value > promise.in_sample["missed_share"]  # optimism in sample, visible out of it
    assert promise.n_patients == 200 and promise.n_referable == int(y.sum())
