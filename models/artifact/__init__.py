"""The model artifact: the one thing training hands to serving.

An artifact is a directory::

    weights.safetensors   state_dict of the Bayesian model (mu and rho of every layer), fp32 or fp16
    config.json           architecture (registry name + its arguments), input contract, class meaning,
                          posterior, prior, serving draws (K, seed), training-data provenance, intended use
    calibration.json      MI referral threshold, target/achieved referral rate, decision threshold,
                          validation metrics, dataset description
    MODEL_CARD.md         human-readable card (intended use, data provenance, limitations)
    manifest.json         {"format": "radscreen-artifact/1", "files": {name: sha256}}; "radscreen-artifact/2"
                          when pruned weight tensors are stored packed (models.nn.pruning)

Two modules: ``schema`` (what ``config.json`` and ``calibration.json`` hold, typed and validated) and
``storage`` (atomic save, manifest, verification, load, and building the network through
``models.nn.registry``). The model's identity is the sha256 of ``manifest.json``'s bytes.

Example::

    sha = save_artifact("models/default", model=model, config=cfg, calibration=cal, model_card=card)
    art = load_artifact("models/default")
    net = art.build_model()            # VGGStar in eval mode, fp32, weights loaded strictly
"""

from models.artifact.schema import (
    CALIBRATION_FILE,
    CONFIG_FILE,
    CONFIG_FORMAT_VERSION,
    DEFAULT_PREPROCESSING,
    MANIFEST_FILE,
    MODEL_CARD_FILE,
    PASS_BUDGET,
    POSTERIORS,
    REQUIRED_FILES,
    WEIGHTS_FILE,
    ArtifactConfig,
    ArtifactError,
    Calibration,
    ServingDraws,
)
from models.artifact.storage import (
    ARTIFACT_FORMAT,
    DEFAULT_ARTIFACT_DIR,
    PACKED_ARTIFACT_FORMAT,
    WEIGHT_DTYPES,
    Artifact,
    load_artifact,
    replace_artifact_file,
    replace_calibration,
    replace_config,
    replace_model_card,
    save_artifact,
)

__all__ = [
    "ARTIFACT_FORMAT",
    "CALIBRATION_FILE",
    "CONFIG_FILE",
    "CONFIG_FORMAT_VERSION",
    "DEFAULT_ARTIFACT_DIR",
    "DEFAULT_PREPROCESSING",
    "MANIFEST_FILE",
    "MODEL_CARD_FILE",
    "PACKED_ARTIFACT_FORMAT",
    "PASS_BUDGET",
    "POSTERIORS",
    "REQUIRED_FILES",
    "WEIGHTS_FILE",
    "WEIGHT_DTYPES",
    "Artifact",
    "ArtifactConfig",
    "ArtifactError",
    "Calibration",
    "ServingDraws",
    "load_artifact",
    "replace_artifact_file",
    "replace_calibration",
    "replace_config",
    "replace_model_card",
    "save_artifact",
]
