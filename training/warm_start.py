"""Warm start: begin a run from a trained artifact's posterior instead of a fresh initialisation.

``radscreen-train fit --init-from models/default --nll-epochs 0 ...`` loads μ, ρ and buffers from the
artifact (verified against its manifest) and trains on from there with a fresh optimiser.  Uses: continuing a
model whose run directory (and exact-resume checkpoint) is gone, and fine-tuning the synthetic default on
real photographs.

What the warm start keeps from the artifact, so that its learned features still mean what they meant:
- the architecture (refused if the run asks for another family or width). The input size may change: every
  layer is a 3x3 convolution or follows the global mean+max pooling, so the same weights apply at any size, and
  fine-tuning at a higher resolution than the artifact was trained at is the usual way to use one (Touvron et
  al. 2019, "Fixing the train-test resolution discrepancy"); the record names the artifact's size;
- the input pipeline: the preprocessing must be the same, and the artifact's channel mean/std replace
  the statistics the run would compute from its own training split.

The run's Δρ/(lr·steps) is measured from the artifact's ρ (per weight), over this run's steps only: the
question "did the optimiser or the ELBO set σ in this run?" is about this run's movement.  The model card
names the artifact (name, version, sha256) and the command that trained it, so provenance is a chain.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from models.artifact import Artifact, ArtifactError, load_artifact
from models.nn.vgg import VGGStar

INIT_FILE = "init.json"  # in the run directory: which artifact the run started from
_ARCHITECTURE_FREE = ("rho_init", "strategy", "input_size")  # not part of the weights' shapes


@dataclass(frozen=True)
class InitSource:
    """The artifact a run starts from, as recorded in the run directory and the model card."""

    directory: str
    name: str
    version: str
    sha256: str
    training_command: str | None  # the artifact card's "Command:" line, if it has one
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    preprocessing: str
    sigma_mean: float | None  # mean σ = softplus(ρ) of the artifact's posterior: the run's σ0
    input_size: int | None = None  # the artifact's input side (None in records written before it was kept)

    def describe(self) -> str:
        size = f"{self.input_size} px, " if self.input_size else ""
        return f"{self.name} {self.version} ({size}sha256 {self.sha256[:12]}…)"


def _card_command(card: str) -> str | None:
    for line in card.splitlines():
        if line.startswith("- Command: `") and line.endswith("`"):
            return line[len("- Command: `"):-1]
    return None


def _open(directory: str, preprocessing: str) -> Artifact:
    try:
        artifact = load_artifact(directory)
    except ArtifactError as exc:
        raise ValueError(f"--init-from {directory}: {exc}") from None
    if artifact.config.input.preprocessing != preprocessing:
        raise ValueError(f"--init-from {directory}: the artifact was trained with preprocessing "
                         f"{artifact.config.input.preprocessing!r}, this run uses {preprocessing!r}; its features "
                         "would not fit the new input (pass --preprocessing to match)")
    return artifact


def input_statistics(directory: str, *, preprocessing: str) -> tuple[tuple[float, float, float],
                                                                     tuple[float, float, float]]:
    """The artifact's channel (mean, std): a warm-started run normalises with these, not its own."""
    cfg = _open(directory, preprocessing).config
    return tuple(cfg.input.mean), tuple(cfg.input.std)  # type: ignore[return-value]


def load_into(model: nn.Module, directory: str, *, preprocessing: str) -> InitSource:
    """Copy the artifact's weights into ``model`` (strictly; same architecture up to ρ₀ and strategy)."""
    artifact = _open(directory, preprocessing)
    if not isinstance(model, VGGStar):
        raise ValueError(f"--init-from {directory}: only a VGG-16* run can start from an artifact")
    try:
        stored = artifact.build_model()
    except ArtifactError as exc:
        raise ValueError(f"--init-from {directory}: {exc}") from None
    mine = {k: v for k, v in asdict(model.config).items() if k not in _ARCHITECTURE_FREE}
    theirs = {k: v for k, v in asdict(stored.config).items() if k not in _ARCHITECTURE_FREE}
    diff = {k: (theirs.get(k), mine[k]) for k in mine if mine[k] != theirs.get(k)}
    if diff:
        raise ValueError(f"--init-from {directory}: the artifact's architecture differs from this run's "
                         f"(artifact, run): {diff}")
    model.load_state_dict(stored.state_dict(), strict=True)
    cfg = artifact.config
    return InitSource(directory=str(directory), name=cfg.name, version=cfg.version, sha256=artifact.sha256,
                      training_command=_card_command(artifact.model_card), mean=tuple(cfg.input.mean),  # type: ignore[arg-type]
                      std=tuple(cfg.input.std), preprocessing=cfg.input.preprocessing,  # type: ignore[arg-type]
                      sigma_mean=initial_sigma_mean(rho_reference(model)), input_size=stored.config.input_size)


def save_init_record(run_dir: Path, source: InitSource) -> None:
    (run_dir / INIT_FILE).write_text(json.dumps(asdict(source), indent=2) + "\n")


def load_init_record(run_dir: Path) -> InitSource | None:
    path = run_dir / INIT_FILE
    if not path.is_file():
        return None
    d: dict[str, Any] = json.loads(path.read_text())
    d["mean"], d["std"] = tuple(d["mean"]), tuple(d["std"])
    return InitSource(**d)


def check_same_source(run_dir: Path, source: InitSource) -> None:
    """A resumed warm-started run must start from the very artifact it started from (same sha256)."""
    recorded = load_init_record(run_dir)
    if recorded is not None and recorded.sha256 != source.sha256:
        raise ValueError(f"{run_dir}: the run started from {recorded.describe()}, but --init-from now holds "
                         f"sha256 {source.sha256[:12]}…; use a new --out directory or --restart")


def rho_reference(model: nn.Module) -> dict[str, Tensor]:
    """Every ρ parameter of ``model`` as it is now (detached copies): the origin of this run's Δρ."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith("_rho")}


def initial_sigma_mean(reference: dict[str, Tensor]) -> float | None:
    """Mean σ = softplus(ρ) over the reference ρ (None if the model has no ρ)."""
    if not reference:
        return None
    return float(torch.nn.functional.softplus(torch.cat([r.flatten().double() for r in reference.values()])).mean())
