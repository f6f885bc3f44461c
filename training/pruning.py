"""``radscreen-train prune``: a pruned copy of an artifact, with a card that names its parent.

The weights are pruned by ``models.nn.pruning`` (one threshold over every Bayesian layer, by SNR |μ|·√D/σ or by
|μ|); biases, config (input contract, serving draws) and the decision thresholds are the parent's. The
parent's precision record is *not* carried over: it was measured on other weights, so the pruned artifact
serves in fp32 until ``benchmarks/drift_real.py --record`` measures it. The card keeps the parent's card
below its own header so the training provenance and limitations travel with the copy.

Example::

    radscreen-train prune --artifact models/default --keep 0.25 --out runs/prune/snr-25 --method snr
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from models.artifact import WEIGHTS_FILE, Artifact, save_artifact
from models.nn.pruning import PruneMethod, PruneResult, check_method, prune_state_dict


def pruned_card(parent: Artifact, result: PruneResult, *, method: PruneMethod, keep: float,
                effect: str | None) -> str:
    """The pruned artifact's MODEL_CARD.md: parent, share kept per layer, method, measured effect (if given)."""
    c = parent.config
    rule = ("signal-to-noise |μ|·√D/σ (D = the elements of the weight's tensor, the radial noise's "
            "per-coordinate scale σ/√D)" if method == "snr" else "magnitude |μ| (the paper's baseline)")
    lines = [
        f"# Model card: {c.name} {c.version}, pruned ({method}, keep {100 * keep:g} %)", "",
        "## Pruning", "",
        f"- Parent: {c.name} {c.version}, artifact sha256 {parent.sha256}, "
        f"weights sha256 {parent.files[WEIGHTS_FILE]}",
        f"- Method: {method} — the weights with the lowest {rule} are removed, one threshold over every "
        "Bayesian layer; biases are kept",
        f"- Share kept: {result.kept} of {result.total} weights ({100 * result.kept_share:.2f} %; asked "
        f"{100 * keep:g} %); lowest score kept {result.threshold:.6g}",
        "- Kept per layer: " + ", ".join(f"{p} {100 * float(m.float().mean()):.1f} %"
                                         for p, m in result.masks.items()),
        "- A removed weight has μ = 0 and σ = 0 (ρ = -200): exactly zero in every served draw. The radial "
        "direction is still normalised over the whole tensor, so a kept weight's noise is the parent's.",
        "- Decision thresholds, input contract and serving draws: the parent's. Precision record: none "
        "(measured on the parent, not on these weights): fp32 only until measured.",
        "- Not for further training: the KL of a weight with σ = 0 is infinite.", "",
        "## Measured effect", "",
        effect.strip() if effect and effect.strip() else "Not measured when this artifact was written "
        "(benchmarks/prune_eval.py measures it on real eyes).", "",
        "## Parent's card", "",
        parent.model_card.strip(), "",
    ]
    return "\n".join(lines)


def prune_artifact(parent: Artifact, out: str | Path, *, keep: float, method: str = "snr",
                   effect: str | None = None, overwrite: bool = False) -> str:
    """Write the pruned copy of ``parent`` to ``out`` and return its sha256."""
    m = check_method(method)
    result = prune_state_dict(parent.state_dict(), keep, method=m)
    model = parent.build_model()
    model.load_state_dict(result.state, strict=True)
    tag = f"prune-{m}-{100 * keep:g}".replace(".", "p")
    config = dataclasses.replace(parent.config, version=f"{parent.config.version}+{tag}", created="")
    calibration = dataclasses.replace(parent.calibration, precision_drift={})
    return save_artifact(out, model=model, config=config, calibration=calibration,
                         model_card=pruned_card(parent, result, method=m, keep=keep, effect=effect),
                         overwrite=overwrite)
