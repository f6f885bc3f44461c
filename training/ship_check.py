"""The 2.0.0 ship rule, where the weights are: above the warm start on validation from every source, and
``no_referable_dr`` for none of a folder of lesion photographs (IDRiD's 54).

A GPU lease brings back one fp32 artifact at most, so the arm it returns must be one that can ship. This runs on
the node, which has no web stack: the photographs go through the artifact's own preprocessing
(``training.data.dataset``, as the service prepares an image) and serving draws, and each is answered by
``models.outcome.decision.screening_outcome`` with the artifact's thresholds, every photograph taken as gradable. The
quality gate can only turn an answer into ``retake_ungradable``, never into ``no_referable_dr``, so the count
here is an upper bound on what the service would answer ``no_referable_dr``.

    python -m training.ship_check --artifact A --run RUN --photos DIR [--out check.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models.artifact import load_artifact
from models.outcome.decision import ScreeningOutcome, screening_outcome
from training.data.dataset import ManifestDataset
from training.data.manifest import ManifestRow
from training.data.photos import list_photos
from training.evaluation.uncertainty import mc_uncertainty
from training.predict import mc_probabilities


@dataclass(frozen=True)
class ShipCheck:
    photos: int
    outcomes: dict[str, int]  # outcome -> photographs, every photograph taken as gradable
    no_referable_dr: list[str]  # the photographs answered no_referable_dr (file names)
    val_auc: dict[str, float]  # pooled and per source, at the run's kept epoch
    start_auc: dict[str, float]  # the same for the warm start (epoch 0 of the run)
    beats_start: bool  # above the warm start on validation from every source
    ships: bool  # beats_start and no photograph answered no_referable_dr


def validation_against_start(run: Path) -> tuple[dict[str, float], dict[str, float]]:
    """The kept epoch's (lowest validation NLL) validation AUCs, pooled and per source, and epoch 0's."""
    history = json.loads((run / "history.json").read_text(encoding="utf-8"))
    scored = [h for h in history if h.get("val_auc") is not None]
    if not scored or scored[0]["epoch"] != 0:
        raise ValueError(f"{run}: no validated epoch 0 (the warm start) in history.json")
    kept = min(scored, key=lambda h: h["val_nll"])

    def aucs(h: dict[str, Any]) -> dict[str, float]:
        return {"pooled": float(h["val_auc"]),
                **{k.split("/", 1)[1]: float(v) for k, v in h.items() if k.startswith("val_auc/") and v is not None}}

    return aucs(kept), aucs(scored[0])


def photo_outcomes(artifact_dir: Path, photos: Path, *, workers: int = 0) -> tuple[dict[str, int], list[str]]:
    artifact = load_artifact(artifact_dir)
    cfg, cal = artifact.config, artifact.calibration
    paths = list_photos(photos)
    if not paths:
        raise ValueError(f"{photos}: no photographs")
    rows = [ManifestRow(path=p, grade=2, patient_id=p.stem, eye=None, row_no=i, category="check")
            for i, p in enumerate(paths)]
    probs, _ = mc_probabilities(artifact.build_model(), ManifestDataset(rows, transform=artifact.image_transform()),
                                mean=cfg.input.mean, std=cfg.input.std, draws=artifact.serving_draws(), workers=workers)
    u = mc_uncertainty(probs)
    outcomes = [screening_outcome(gradable=True, mutual_information=float(mi), probability=float(p),
                                  referral_threshold_mi=cal.referral_threshold_mi,
                                  decision_threshold=cal.decision_threshold)
                for p, mi in zip(u.probability, u.mutual_information, strict=True)]
    counts = Counter(o.value for o in outcomes)
    missed = [p.name for p, o in zip(paths, outcomes, strict=True) if o is ScreeningOutcome.NO_REFERABLE_DR]
    return {o.value: counts.get(o.value, 0) for o in ScreeningOutcome}, missed


def ship_check(artifact: Path, run: Path, photos: Path, *, workers: int = 0) -> ShipCheck:
    kept, start = validation_against_start(run)
    outcomes, missed = photo_outcomes(artifact, photos, workers=workers)
    sources = sorted(k for k in start if k != "pooled")
    beats = all(kept.get(s, -np.inf) > start[s] for s in sources or ["pooled"])
    return ShipCheck(photos=sum(outcomes.values()), outcomes=outcomes, no_referable_dr=missed, val_auc=kept,
                     start_auc=start, beats_start=beats, ships=beats and not missed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--run", type=Path, required=True, help="the artifact's training run (its history.json)")
    parser.add_argument("--photos", type=Path, required=True, help="lesion photographs that must all be referred")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here too")
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        result = ship_check(args.artifact, args.run, args.photos, workers=args.workers)
    except (OSError, ValueError, KeyError) as exc:
        print(f"ship check: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(asdict(result), indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
