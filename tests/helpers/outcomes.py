"""A tiny artifact calibrated so that each of the four screening outcomes occurs, and one image per outcome.

The thresholds are set the way the real calibration sets them, from the scores of a small "validation"
set, never by patching code: the tiny untrained network scores six generated fundus photographs; the MI
threshold is placed between the most uncertain image and the next (that image is then
``grader_review_uncertain``), and the decision threshold between the two most probable of the remaining
five (the top one is ``refer_referable_dr``, the lowest ``no_referable_dr``). A uniform blank image fails the
quality gate (``retake_ungradable``). The artifact is then saved with those thresholds in its
``calibration.json`` (same seed, same weights), and the scores are checked again through the saved artifact.
"""

from __future__ import annotations

import math
from pathlib import Path

from support.artifacts import build_e2e_artifact, build_tiny_artifact
from support.images import blank_png, fundus_png

OUTCOMES = ("refer_referable_dr", "grader_review_uncertain", "retake_ungradable", "no_referable_dr")
CANDIDATE_SEEDS = range(6)
MIN_RELATIVE_GAP = 1e-3  # thresholds sit between values at least this far apart (float noise is ~1e-7)


def _scores(model_dir: Path, images: dict[int, bytes]) -> dict[int, tuple[float, float]]:
    """(probability, MI) per candidate image through the shared scoring path."""
    from service.inference.loading import load_scorer
    from service.inference.prepare import prepare_image
    from service.inference.spec import ScorerSpec

    scorer = load_scorer(ScorerSpec(model_dir=model_dir, backend="torch", device="cpu"))
    prepared = {k: prepare_image(png, scorer.pipeline) for k, png in images.items()}
    assert all(p.quality.gradable for p in prepared.values()), "candidate fundus images must be gradable"
    keys = list(prepared)
    scores = scorer.score_batch([prepared[k] for k in keys])
    return {k: (s.probability, s.mutual_information) for k, s in zip(keys, scores, strict=True)}


def _between(hi: float, lo: float) -> float:
    """A threshold between two values, refusing a gap too small to be robust."""
    assert hi > lo * (1 + MIN_RELATIVE_GAP) + 1e-12, f"values too close to separate: {hi!r} vs {lo!r}"
    return math.sqrt(hi * lo) if lo > 0 else hi / 2


def build_outcome_artifact(directory: Path) -> tuple[Path, dict[str, bytes]]:
    """Save the calibrated tiny artifact in ``directory``; return it and one PNG per outcome."""
    images = {seed: fundus_png(seed=seed) for seed in CANDIDATE_SEEDS}
    build_e2e_artifact(directory)  # provisional thresholds; only the weights matter for the scores
    scores = _scores(directory, images)
    by_mi = sorted(scores, key=lambda k: scores[k][1], reverse=True)
    uncertain, rest = by_mi[0], by_mi[1:]
    mi_threshold = _between(scores[uncertain][1], scores[rest[0]][1])
    by_p = sorted(rest, key=lambda k: scores[k][0], reverse=True)
    decision = (scores[by_p[0]][0] + scores[by_p[1]][0]) / 2
    assert scores[by_p[0]][0] - scores[by_p[1]][0] > 1e-4, "probabilities too close to separate"
    build_tiny_artifact(
        directory,
        name="tiny-radial-e2e",
        intended_use="End-to-end tests only: an untrained tiny network with no clinical meaning.",
        referral_threshold_mi=mi_threshold,
        decision_threshold=decision,
        target_referral_rate=1 / len(images),
        dataset=f"tests: {len(images)} generated fundus images (training.synthetic seeds "
        f"{CANDIDATE_SEEDS.start}-{CANDIDATE_SEEDS.stop - 1}); thresholds set so each outcome occurs",
        model_card="# Tiny e2e model\n\nUntrained; calibrated on six generated images for the outcome tests.\n",
    )
    assert _scores(directory, images) == scores  # same seed, same weights: the saved artifact agrees
    return directory, {
        "refer_referable_dr": images[by_p[0]],
        "grader_review_uncertain": images[uncertain],
        "retake_ungradable": blank_png(),
        "no_referable_dr": images[by_p[-1]],
    }
