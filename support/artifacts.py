"""Tiny real model artifacts for tests: an untrained radial VGG-16* saved with ``models.artifact``.

Every test folder that needs a model on disk builds it here, so the artifact format is exercised the same
way everywhere and the tests never depend on the embedded full-size model. The fixtures differ only in
the arguments (name, MI threshold, seed, ...); the defaults are those of the service tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

TINY_WIDTH = 4
TINY_SIZE = 64
DEFAULT_VALIDATION: Mapping[str, Any] = MappingProxyType({"note": "none (untrained test model)"})


def build_tiny_artifact(
    directory: Path,
    *,
    name: str = "tiny-radial-test",
    version: str = "0.0.1",
    intended_use: str = "Tests only: an untrained tiny network with no clinical meaning.",
    referral_threshold_mi: float = 0.002,
    target_referral_rate: float = 0.2,
    decision_threshold: float = 0.5,
    dataset: str = "none: test fixture",
    rho_init: float = -2.5,
    seed: int = 0,
    draw_seed: int = 1234,
    validation: Mapping[str, Any] | None = DEFAULT_VALIDATION,
    model_card: str = "# Tiny test model\n\nUntrained; for tests only.\n",
    width: int = TINY_WIDTH,
    input_size: int = TINY_SIZE,
    head_draws: int = 1,
    preprocessing: str | None = None,
    test_time_flip: bool = False,
    mc_samples: int | None = None,
    pass_budget: int | None = None,
) -> Path:
    """Save an untrained radial VGG-16* artifact (``width`` channels, ``input_size`` px) and return its path.

    ``seed`` fixes the weights (two seeds give two artifacts with different sha256); ``rho_init`` sets the
    posterior spread, so the mutual information is visible (~1e-3 nats at -2.5). A ``referral_threshold_mi``
    far below that refers every gradable image, which lets tests see the referral path deterministically.
    ``validation=None`` stores an empty validation record. ``preprocessing``: the contract named in the config
    (default: the artifact format's default). ``test_time_flip``: the serving option (each image and its mirror).
    ``mc_samples``: the serving draws (default: the 16 passes of the budget, 16 draws x 1 view or 8 x 2).
    An existing ``directory`` is replaced.
    """
    import torch

    from models.artifact import PASS_BUDGET, ArtifactConfig, Calibration, ServingDraws, save_artifact
    from models.image.transform import ImageTransform
    from models.nn.vgg import VGGConfig, build_vgg16_star

    torch.manual_seed(seed)
    arch = VGGConfig(width=width, input_size=input_size, layer="radial", rho_init=rho_init)
    model = build_vgg16_star(arch)
    contract: dict[str, Any] = {"preprocessing": preprocessing} if preprocessing else {}
    config = ArtifactConfig(
        name=name,
        version=version,
        architecture=arch,
        input=ImageTransform(size=input_size, mean=(0.45, 0.25, 0.15), std=(0.25, 0.15, 0.1), **contract),
        serving=ServingDraws(mc_samples=mc_samples if mc_samples is not None else (8 if test_time_flip else 16),
                             draw_seed=draw_seed, head_draws=head_draws, test_time_flip=test_time_flip),
        posterior="radial",
        prior={"kind": "unit_gaussian"},
        training_data="synthetic",
        intended_use=intended_use,
        pass_budget=pass_budget if pass_budget is not None else PASS_BUDGET,
    )
    calibration = Calibration(
        referral_threshold_mi=referral_threshold_mi,
        target_referral_rate=target_referral_rate,
        decision_threshold=decision_threshold,
        validation=dict(validation or {}),
        dataset=dataset,
    )
    save_artifact(directory, model=model, config=config, calibration=calibration, model_card=model_card,
                  overwrite=True)
    return directory


def build_e2e_artifact(directory: Path, *, referral_threshold_mi: float = 0.002, seed: int = 0) -> Path:
    """The tiny artifact of the end-to-end service tests (tests.helpers.service_process), named tiny-radial-e2e.

    A threshold far below the network's typical MI (~1e-3 at rho_init -2.5) makes every gradable image
    "uncertain", so tests can see the referral path deterministically.
    """
    return build_tiny_artifact(
        directory,
        name="tiny-radial-e2e",
        intended_use="End-to-end tests only: an untrained tiny network with no clinical meaning.",
        referral_threshold_mi=referral_threshold_mi,
        seed=seed,
        model_card="# Tiny e2e model\n\nUntrained; for tests only.\n",
    )


def resign(directory: Path) -> None:
    """Recompute the manifest after a deliberate edit (simulates a consistently-hashed but bad artifact)."""
    import hashlib
    import json

    from models.artifact import MANIFEST_FILE

    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    for name in manifest["files"]:
        manifest["files"][name] = hashlib.sha256((directory / name).read_bytes()).hexdigest()
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest))


def edit_config(directory: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """Apply ``edit`` to ``config.json`` and re-hash the manifest: a consistent artifact with the edited values."""
    import json

    path = directory / "config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    resign(directory)
