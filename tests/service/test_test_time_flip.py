"""The test-time flip serving option (``serving.test_time_flip``): each image and its mirror, draws pooled.

Two tiny artifacts with the same weights and draws, one serving with the option: the option's answer must be
the uncertainty of the plain model's draws on the image and on its mirror image taken together, on both
backends and behind the guard band, and the option must be visible wherever the model is named.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from models.artifact import ArtifactError, load_artifact
from models.artifact.schema import GuardBand
from models.nn.uncertainty import binary_uncertainty
from models.platform.compute import Runtime
from service.http.schemas import ModelIdentity
from service.inference.backends import FlipViewsBackend, GuardedBackend
from service.inference.loading import _draws_backend, load_scorer
from service.inference.prepare import PreparedImage, prepare_image
from service.inference.spec import BackendSetting, ScorerSpec
from service.interop.fhir import to_fhir_bundle
from service.pacs.sr import _algorithm
from service.screening.payload import score_payload
from support.artifacts import build_tiny_artifact, edit_config
from support.images import encode, fundus_like


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("flip")
    # the same 8 draws, one view and two: the flip's answer is checked against the plain artifact's draws
    return (build_tiny_artifact(tmp / "plain", mc_samples=8),
            build_tiny_artifact(tmp / "flip", test_time_flip=True))


@pytest.fixture(scope="module")
def images(artifacts: tuple[Path, Path]) -> list[PreparedImage]:
    pipeline = load_scorer(ScorerSpec(model_dir=artifacts[0], backend="torch", device="cpu")).pipeline
    return [prepare_image(encode(fundus_like(seed)), pipeline) for seed in range(4)]


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_the_answer_is_the_uncertainty_of_both_orientations_draws(artifacts: tuple[Path, Path],
                                                                  images: list[PreparedImage],
                                                                  backend: BackendSetting) -> None:
    plain, flip = (load_scorer(ScorerSpec(model_dir=a, backend=backend, device="cpu", precision="fp32"))
                   for a in artifacts)
    x = np.stack([im.pixels for im in images])
    as_taken, mirrored = plain.forward(x), plain.forward(np.ascontiguousarray(x[..., ::-1]))  # [K, B] each
    assert np.abs(as_taken - mirrored).max() > 1e-3  # the mirror is a different input: the test can see it
    pooled = flip.forward(x)
    assert pooled.shape == (2 * as_taken.shape[0], len(images))
    np.testing.assert_allclose(pooled, np.concatenate([as_taken, mirrored]), atol=1e-5)
    expected = binary_uncertainty(torch.from_numpy(np.concatenate([as_taken, mirrored])))
    got = flip.score_batch(images)
    np.testing.assert_allclose([s.probability for s in got], expected.probability.numpy(), atol=1e-5)
    np.testing.assert_allclose([s.mutual_information for s in got], expected.mutual_information.numpy(), atol=1e-6)
    # one image scored alone gets the same answer as in the batch (the mirror is taken per image)
    alone = flip.score_batch(images[2:3])[0]
    assert alone.probability == pytest.approx(got[2].probability, abs=1e-6)


def test_the_guard_band_judges_the_pooled_answer(artifacts: tuple[Path, Path]) -> None:
    """Both the fast and the exact backend behind the guard run both orientations: what the guard tests is
    the answer that is served, and an image re-scored in fp32 gets both orientations' fp32 draws."""
    art = load_artifact(artifacts[1])
    runtime = Runtime(device="cpu", precision="bf16", strategy="loop", requested="bf16", reason="test",
                      strategy_reason="test", guard=GuardBand(0.01, 0.001, 0.2))
    backend = _draws_backend(art.serving_network(), "torch", art, ScorerSpec(model_dir=artifacts[1]), runtime)
    assert isinstance(backend, GuardedBackend)
    assert isinstance(backend.fast, FlipViewsBackend) and isinstance(backend.exact, FlipViewsBackend)
    x = np.random.default_rng(0).normal(size=(3, 3, 64, 64)).astype(np.float32)
    assert backend.run(x).shape[0] == 2 * art.config.serving.mc_samples


def test_the_option_is_named_wherever_the_model_is(artifacts: tuple[Path, Path], images: list[PreparedImage]
                                                   ) -> None:
    plain, flip = (load_scorer(ScorerSpec(model_dir=a, backend="torch", device="cpu")) for a in artifacts)
    assert not plain.model_identity.test_time_flip and flip.model_identity.test_time_flip
    body = score_payload(flip.score_batch(images[:1])[0], flip)
    assert ModelIdentity.model_validate(body["model"]).test_time_flip is True  # the documented field
    device = next(e["resource"] for e in to_fhir_bundle({**body, "request_id": "r"})["entry"]
                  if e["resource"]["resourceType"] == "Device")
    props = {p["type"]["coding"][0]["code"]: p["valueQuantity"][0]["value"] for p in device["property"]}
    assert props["views"] == 2  # the FHIR Device says how many orientations each image was scored in
    assert (props["mc-samples"], props["passes"], props["pass-budget"]) == (8, 16, 16)  # and the passes they cost
    sr_texts = [str(item.TextValue) for item in _algorithm(body["model"]) if "TextValue" in item]
    assert "draws=8x1x2 (test-time flip)" in sr_texts  # and the DICOM SR's algorithm parameters
    config = json.loads((artifacts[1] / "config.json").read_text())
    assert config["serving"]["test_time_flip"] is True
    # an artifact without the option does not write the key, so older artifacts re-serialise byte for byte
    assert "test_time_flip" not in json.loads((artifacts[0] / "config.json").read_text())["serving"]


def test_a_malformed_option_is_refused_naming_the_field(tmp_path: Path) -> None:
    art = build_tiny_artifact(tmp_path / "bad")
    edit_config(art, lambda c: c["serving"].update(test_time_flip="yes"))
    with pytest.raises(ArtifactError, match=r"serving\.test_time_flip.*true or false"):
        load_artifact(art)



def test_the_pass_budget_bounds_draws_times_views(tmp_path: Path) -> None:
    """16 passes per image is the design's budget: an artifact spends it as draws x views, states a larger
    budget only explicitly, and the service's K override cannot exceed it."""
    flip = load_artifact(build_tiny_artifact(tmp_path / "flip", test_time_flip=True))
    assert (flip.serving_draws().passes, flip.serving_draws().split_text()) == (16, "8 draws × 2 views")
    with pytest.raises(ArtifactError, match=r"32 forward passes per image \(16 draws × 2 views\), over its pass "
                                            r"budget of 16"):
        build_tiny_artifact(tmp_path / "over", test_time_flip=True, mc_samples=16)
    explicit = load_artifact(build_tiny_artifact(tmp_path / "explicit", test_time_flip=True, mc_samples=16,
                                                 pass_budget=32))
    assert explicit.config.pass_budget == 32
    assert json.loads((tmp_path / "explicit" / "config.json").read_text())["serving"]["pass_budget"] == 32
    # the budget is written only when it is not the design's, so older artifacts re-serialise byte for byte
    assert "pass_budget" not in json.loads((tmp_path / "flip" / "config.json").read_text())["serving"]
    with pytest.raises(ArtifactError, match=r"mc_samples=12: 12 draws × 2 views is 24 forward passes per image, "
                                            r"over the artifact's pass budget of 16; use at most 8 draws"):
        load_scorer(ScorerSpec(model_dir=tmp_path / "flip", backend="torch", device="cpu", mc_samples=12))
    scorer = load_scorer(ScorerSpec(model_dir=tmp_path / "flip", backend="torch", device="cpu", mc_samples=4))
    identity = ModelIdentity.model_validate(scorer.model_identity.to_dict())
    assert (identity.mc_samples, identity.passes, identity.pass_budget) == (4, 8, 16)


def test_an_artifact_from_before_the_budget_keeps_its_passes(tmp_path: Path) -> None:
    """2.0.0 served 16 draws x 2 views with no budget in its config: it still loads, with its own 32 passes as
    its budget, so the service and its card can say it is over the design's 16."""
    art = build_tiny_artifact(tmp_path / "legacy", test_time_flip=True, mc_samples=16, pass_budget=32)
    edit_config(art, lambda c: c["serving"].pop("pass_budget"))
    legacy = load_artifact(art)
    assert (legacy.config.pass_budget, legacy.serving_draws().passes) == (32, 32)
    assert load_scorer(ScorerSpec(model_dir=art, backend="torch", device="cpu")).model_identity.to_dict()[
        "passes"] == 32
