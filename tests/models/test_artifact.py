"""The artifact format: round trips, verification against the manifest, and config validation."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from models.artifact import (
    MANIFEST_FILE,
    ArtifactConfig,
    ArtifactError,
    Calibration,
    load_artifact,
    save_artifact,
)
from models.artifact import storage as artifact_storage
from models.artifact.schema import ServingDraws
from models.image.transform import ImageTransform
from models.nn.draws import materialise_draws
from models.nn.sampling import seeded
from models.nn.vgg import VGGConfig, VGGStar, build_vgg16_star, mc_logits
from support.artifacts import edit_config, resign

ARCH = VGGConfig(width=4, input_size=64, layer="radial", rho_init=-4.0)
CARD = "# Tiny test model\n\nIntended use: tests only. Trained on nothing.\n"


def make_model(arch: VGGConfig = ARCH, seed: int = 0) -> VGGStar:
    torch.manual_seed(seed)
    return build_vgg16_star(arch)


def make_config(arch: VGGConfig = ARCH, **overrides: Any) -> ArtifactConfig:
    fields: dict[str, Any] = {
        "name": "tiny-radial",
        "version": "0.0.1",
        "architecture": arch,
        "input": ImageTransform(size=arch.input_size, mean=(0.5, 0.4, 0.3), std=(0.2, 0.2, 0.25)),
        "posterior": arch.layer,
        "prior": {"kind": "unit_gaussian"},
        "training_data": "synthetic",
        "intended_use": "Unit tests of the artifact format; not for clinical use.",
        "created": "2026-11-21T12:00:00Z",
    }
    # the serving section's fields by their config.json names: mc_samples, draw_seed, head_draws, test_time_flip
    serving = {k: overrides.pop(k) for k in ("mc_samples", "draw_seed", "head_draws", "test_time_flip")
               if k in overrides}
    fields["serving"] = ServingDraws(**{"mc_samples": 16, "draw_seed": 1234, **serving})
    fields.update(overrides)
    return ArtifactConfig(**fields)


CALIBRATION = Calibration(
    referral_threshold_mi=0.05,
    target_referral_rate=0.2,
    achieved_referral_rate=0.21,
    decision_threshold=0.5,
    validation={"auc": {"0.0": 0.81, "0.2": 0.88}, "ece": 0.04},
    dataset="synthetic validation split, 200 images",
)


def save(directory: Path, model: VGGStar | None = None, **kwargs: Any) -> str:
    model = model if model is not None else make_model()
    kwargs.setdefault("config", make_config(model.config))
    kwargs.setdefault("calibration", CALIBRATION)
    kwargs.setdefault("model_card", CARD)
    return save_artifact(directory, model=model, **kwargs)


def test_round_trip_fp32_is_exact(tmp_path: Path) -> None:
    model = make_model()
    sha = save(tmp_path / "a", model)
    art = load_artifact(tmp_path / "a")
    assert art.sha256 == sha == hashlib.sha256((tmp_path / "a" / MANIFEST_FILE).read_bytes()).hexdigest()
    assert art.config == make_config() and art.calibration == CALIBRATION and art.model_card == CARD
    loaded, original = art.state_dict(), model.state_dict()
    assert loaded.keys() == original.keys()
    for name, tensor in original.items():
        assert loaded[name].dtype == torch.float32
        assert torch.equal(loaded[name], tensor), name
    files = json.loads((tmp_path / "a" / MANIFEST_FILE).read_text())
    assert files["format"] == "radscreen-artifact/1"
    assert set(files["files"]) == {"weights.safetensors", "config.json", "calibration.json", "MODEL_CARD.md"}


def test_config_json_layout(tmp_path: Path) -> None:
    save(tmp_path / "a")
    data = json.loads((tmp_path / "a" / "config.json").read_text())
    assert data["architecture"]["builder"] == "vgg16_star" and data["architecture"]["width"] == 4
    assert data["input"]["size"] == 64 and data["input"]["channel_order"] == "RGB"
    assert data["classes"] == {"positive": "referable", "definition": "EyePACS grade >= 2"}
    assert data["serving"] == {"mc_samples": 16, "draw_seed": 1234}  # head_draws 1 is left out (as before it)
    assert data["posterior"] == "radial" and data["training_data"] == "synthetic"


def test_head_draws_round_trip_and_default_to_one_for_older_artifacts(tmp_path: Path) -> None:
    save(tmp_path / "a", config=make_config(head_draws=64))
    assert json.loads((tmp_path / "a" / "config.json").read_text())["serving"]["head_draws"] == 64
    assert load_artifact(tmp_path / "a").config.serving.head_draws == 64
    save(tmp_path / "b")  # M = 1: config.json as written before head draws existed
    assert "head_draws" not in json.loads((tmp_path / "b" / "config.json").read_text())["serving"]
    assert load_artifact(tmp_path / "b").config.serving.head_draws == 1


def test_the_artifact_hands_out_its_serving_draws_and_network(tmp_path: Path) -> None:
    """``serving_draws()`` is config.json's ``serving`` section as one value; ``serving_network()`` is the
    posterior drawn exactly as ``materialise_draws`` draws it with those values (the service's network)."""
    save(tmp_path / "a", config=make_config(head_draws=4, mc_samples=3, draw_seed=77))
    art = load_artifact(tmp_path / "a")
    serving = json.loads((tmp_path / "a" / "config.json").read_text())["serving"]
    assert art.serving_draws() == ServingDraws(serving["mc_samples"], serving["draw_seed"], serving["head_draws"])
    assert art.serving_draws(mc_samples=5) == ServingDraws(5, 77, 4)  # another K, the same seed and M
    net = art.serving_network()
    x = torch.randn(2, 3, ARCH.input_size, ARCH.input_size)
    reference = materialise_draws(art.build_model(), mc_samples=3, seed=77, head_draws=4)
    with torch.no_grad():
        assert torch.equal(net(x), reference(x)) and net(x).shape == (3 * 4, 2, 1)
        other_seed = materialise_draws(art.build_model(), mc_samples=3, seed=78, head_draws=4)
        assert not torch.equal(net(x), other_seed(x))  # the seed really reaches the draws
    assert art.serving_network(mc_samples=2, strategy="loop").mc_samples == 2



def test_architecture_is_built_through_the_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``architecture.builder`` names a models.nn.registry entry; build_model() calls that entry, no other."""
    from models.nn import registry

    save(tmp_path / "a")
    built: list[VGGConfig] = []

    def recording_builder(config: VGGConfig) -> VGGStar:
        built.append(config)
        return build_vgg16_star(config)

    monkeypatch.setitem(registry.ARCHITECTURES, "vgg16_star", recording_builder)
    art = load_artifact(tmp_path / "a")
    assert art.config.builder == "vgg16_star"
    art.build_model()
    assert built == [ARCH]
    with pytest.raises(ArtifactError, match=r"architecture\.builder.*expected one of: vgg16_star"):
        make_config(builder="vgg19")


def test_round_trip_fp16_is_close_and_half_size(tmp_path: Path) -> None:
    model = make_model()
    save(tmp_path / "a32", model)
    save(tmp_path / "a16", model, weights_dtype=torch.float16)
    loaded = load_artifact(tmp_path / "a16").state_dict()
    for name, tensor in model.state_dict().items():
        assert loaded[name].dtype == torch.float32
        torch.testing.assert_close(loaded[name], tensor, rtol=1e-3, atol=1e-4)
    size32 = (tmp_path / "a32" / "weights.safetensors").stat().st_size
    size16 = (tmp_path / "a16" / "weights.safetensors").stat().st_size
    assert size16 < 0.6 * size32


def test_identity_is_deterministic_and_tracks_content(tmp_path: Path) -> None:
    model = make_model()
    assert save(tmp_path / "a", model) == save(tmp_path / "b", model)
    other = dataclasses.replace(CALIBRATION, decision_threshold=0.4)
    changed = save(tmp_path / "c", model, calibration=other)
    assert changed != save(tmp_path / "a", model, overwrite=True)


def test_built_model_reproduces_original_under_same_seed(tmp_path: Path) -> None:
    model = make_model().eval()
    save(tmp_path / "a", model)
    built = load_artifact(tmp_path / "a").build_model()
    assert not built.training
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad(), seeded(model, 7):
        expected = mc_logits(model, x, 4)  # [S, B, O]
    with torch.no_grad(), seeded(built, 7):
        got = mc_logits(built, x, 4)
    assert torch.equal(got, expected)
    assert expected[0].ne(expected[1]).any()  # the draws really differ, so the check is not vacuous


def test_tampered_weights_are_refused(tmp_path: Path) -> None:
    save(tmp_path / "a")
    path = tmp_path / "a" / "weights.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    pattern = (r"^weights\.safetensors: sha256 mismatch \(expected [0-9a-f]{64}, got [0-9a-f]{64}\) — "
               r"the artifact was modified or corrupted")
    with pytest.raises(ArtifactError, match=pattern):
        load_artifact(tmp_path / "a")


def test_weights_tampered_after_loading_are_refused_when_read(tmp_path: Path) -> None:
    save(tmp_path / "a")
    art = load_artifact(tmp_path / "a")
    (tmp_path / "a" / "weights.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(ArtifactError, match=r"weights\.safetensors: sha256 mismatch"):
        art.build_model()


def test_edited_config_is_refused(tmp_path: Path) -> None:
    save(tmp_path / "a")
    path = tmp_path / "a" / "config.json"
    path.write_text(path.read_text().replace("Unit tests", "Clinical screening"))
    with pytest.raises(ArtifactError, match=r"config\.json: sha256 mismatch"):
        load_artifact(tmp_path / "a")


@pytest.mark.parametrize("name", ["calibration.json", "MODEL_CARD.md", "weights.safetensors"])
def test_missing_file_is_named(tmp_path: Path, name: str) -> None:
    save(tmp_path / "a")
    (tmp_path / "a" / name).unlink()
    with pytest.raises(ArtifactError, match=f"{name}: listed in manifest.json but missing"):
        load_artifact(tmp_path / "a")


def test_missing_manifest_and_unlisted_required_file(tmp_path: Path) -> None:
    save(tmp_path / "a")
    manifest = json.loads((tmp_path / "a" / MANIFEST_FILE).read_text())
    del manifest["files"]["calibration.json"]
    (tmp_path / "a" / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"manifest\.json: does not list required.*calibration\.json"):
        load_artifact(tmp_path / "a")
    (tmp_path / "a" / MANIFEST_FILE).unlink()
    with pytest.raises(ArtifactError, match=r"manifest\.json: missing"):
        load_artifact(tmp_path / "a")


def test_manifest_cannot_point_outside_the_directory(tmp_path: Path) -> None:
    save(tmp_path / "a")
    manifest = json.loads((tmp_path / "a" / MANIFEST_FILE).read_text())
    manifest["files"]["../secret"] = "0" * 64
    (tmp_path / "a" / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"manifest.json: field 'files' lists '\.\./secret'"):
        load_artifact(tmp_path / "a")


def test_unlisted_extra_file_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sha = save(tmp_path / "a")
    (tmp_path / "a" / "notes.txt").write_text("scratch")
    with caplog.at_level(logging.WARNING, logger="models.artifact"):
        art = load_artifact(tmp_path / "a")
    assert art.sha256 == sha
    assert "notes.txt" in caplog.text and "not in the manifest" in caplog.text


def test_missing_directory_and_missing_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ArtifactError, match="does not exist"):
        load_artifact(tmp_path / "nope")
    monkeypatch.setattr(artifact_storage, "DEFAULT_ARTIFACT_DIR", tmp_path / "default")
    with pytest.raises(ArtifactError, match=r"embedded default artifact is missing.*name an artifact directory"):
        load_artifact()


def test_save_refuses_to_clobber_without_overwrite(tmp_path: Path) -> None:
    save(tmp_path / "a")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save(tmp_path / "a")
    save(tmp_path / "a", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # no staging or retired directories left


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(posterior="radal"),
         "config.json: field 'posterior': Unknown posterior 'radal'; expected one of: gaussian, radial"),
        (lambda d: d["serving"].pop("draw_seed"), "config.json: field 'serving.draw_seed' is missing"),
        (lambda d: d["serving"].update(head_draws=0), "field 'serving.head_draws' must be in [1, 4096], got 0"),
        (lambda d: d["serving"].update(head_draws="64"), "field 'serving.head_draws' must be an integer"),
        (lambda d: d["input"].update(mean=[0.5, 0.5]), "config.json: field 'input.mean' must be a list of 3"),
        (lambda d: d["input"].update(std=[0.2, 0.0, 0.2]), "config.json: field 'input.std' must be > 0"),
        (lambda d: d["input"].update(size=128), "config.json: field 'input.size' is 128 but architecture"),
        (lambda d: d["architecture"].update(width="4"), "field 'architecture.width' must be an int"),
        (lambda d: d["architecture"].update(depth=16), "field 'architecture.depth' is not a VGG"),
        (lambda d: d["architecture"].update(builder="resnet"), "field 'architecture.builder' is 'resnet'"),
        (lambda d: d.update(training_data="eyepacs"), "field 'training_data' must be 'synthetic'"),
        (lambda d: d.update(posterior="gaussian"), "config.json: field 'architecture.layer' is 'radial' but"),
        (lambda d: d.update(format_version=2), "config.json: field 'format_version' is 2"),
    ],
)
def test_invalid_config_field_is_named(tmp_path: Path, edit: Any, message: str) -> None:
    save(tmp_path / "a")
    edit_config(tmp_path / "a", edit)
    with pytest.raises(ArtifactError, match=re.escape(message)):
        load_artifact(tmp_path / "a")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("referral_threshold_mi", 0.9, "field 'referral_threshold_mi' must be in [0, ln 2]"),
        ("decision_threshold", 1.0, "calibration.json: field 'decision_threshold' must be in (0, 1)"),
        ("target_referral_rate", "0.2", "calibration.json: field 'target_referral_rate' must be a finite"),
    ],
)
def test_invalid_calibration_field_is_named(tmp_path: Path, field: str, value: Any, message: str) -> None:
    save(tmp_path / "a")
    path = tmp_path / "a" / "calibration.json"
    data = json.loads(path.read_text())
    data[field] = value
    path.write_text(json.dumps(data))
    resign(tmp_path / "a")
    with pytest.raises(ArtifactError) as info:
        load_artifact(tmp_path / "a")
    assert message in str(info.value)


def test_weights_that_do_not_fit_the_architecture_are_named(tmp_path: Path) -> None:
    save(tmp_path / "a")
    edit_config(tmp_path / "a", lambda d: d["architecture"].update(width=8))
    art = load_artifact(tmp_path / "a")
    message = "weights.safetensors: does not match the architecture in config.json"
    with pytest.raises(ArtifactError, match=re.escape(message)):
        art.build_model()


def test_in_code_validation_uses_the_same_messages() -> None:
    with pytest.raises(ArtifactError, match="Unknown posterior 'radal'; expected one of: gaussian, radial"):
        make_config(posterior="radal")
    with pytest.raises(ValueError, match="weights_dtype"):
        save_artifact("unused", model=make_model(), config=make_config(), calibration=CALIBRATION,
                      model_card=CARD, weights_dtype=torch.bfloat16)
