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
from models.compute import Runtime
from models.uncertainty import binary_uncertainty
from service.fhir import to_fhir_bundle
from service.inference.backends import FlipViewsBackend, GuardedBackend
from service.inference.loading import _draws_backend, load_scorer
from service.inference.prepare import PreparedImage, prepare_image
from service.inference.spec import BackendSetting, ScorerSpec
from service.pacs.sr import _algorithm
from service.payload import score_payload
from service.schemas import ModelIdentity
from support.artifacts import build_tiny_artifact, edit_config
from support.images import encode, fundus_like


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("flip")
    return build_tiny_artifact(tmp / "plain"), build_tiny_artifact(tmp / "flip", test_time_flip=True)


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
    assert backend.run(x).shape[0] == 2 * art.config.mc_samples


def test_the_option_is_named_wherever_the_model_is(artifacts: tuple[Path, Path], images: list[PreparedImage]
                                                   ) -> None:
    plain, flip = (load_scorer(ScorerSpec(model_dir=a, backend="torch", device="cpu")) for a in artifacts)
    assert not plain.model_identity.test_time_flip and flip.model_identity.test_time_flip
    body = score_payload(flip.score_batch(images[:1])[0], flip)
    assert ModelIdentity.model_validate(body["model"]).test_time_flip is True  # the documented field
    device = next(e["resource"] for e in to_fhir_bundle({**body, "request_id": "r"})["entry"]
                  if e["resource"]["resourceType"] == "Device")
    views = {p["type"]["coding"][0]["code"]: p["valueQuantity"][0]["value"] for p in device["property"]}["views"]
    assert views == 2  # the FHIR Device says how many orientations each image was scored in
    sr_texts = [str(item.TextValue) for item in _algorithm(body["model"]) if "TextValue" in item]
    assert "draws=16x1x2 (test-time flip)" in sr_texts  # and the DICOM SR's algorithm parameters
    config = json.loads((artifacts[1] / "config.json").read_text())
    assert config["serving"]["test_time_flip"] is True
    # an artifact without the option does not write the key, so older artifacts re-serialise byte for byte
    assert "test_time_flip" not in json.loads((artifacts[0] / "config.json").read_text())["serving"]


def test_a_malformed_option_is_refused_naming_the_field(tmp_path: Path) -> None:
    art = build_tiny_artifact(tmp_path / "bad")
    edit_config(art, lambda c: c["serving"].update(test_time_flip="yes"))
    with pytest.raises(ArtifactError, match=r"serving\.test_time_flip.*true or false"):
        load_artifact(art)

