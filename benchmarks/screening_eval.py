"""The screening evaluation of an artifact on real and synthetic eyes, through the service's own path.

For each image set it scores every photograph with the artifact's serving draws (the preprocessing the
service runs, ``training.data.dataset.load_image``), runs the service's decode and quality gate
(``service.inference``), and answers the service's outcome (``screening_outcome`` with the artifact's
calibration). Then ``training.evaluation.screening.screening_summary`` gives AUC with a bootstrap interval,
the four outcomes by truth, by grade and by category, MI on other-disease eyes against normal ones and the
per-patient figures under the exam rule; ``evaluate_predictions`` the referral curves (MI against random
and entropy, paired bootstrap), ECE and the reliability diagram on the gradable eyes. Written to
``--out/<set>/`` (summary.json, evaluation.json, PNGs) and printed as one markdown table, sets side by side.

Sets: ``odir`` (the test patients of the training run's patient split, rebuilt from ``--run``'s
config.json, or its validation patients with ``--odir-split val``), ``eyepacs`` (the same for EyePACS'
natural copy in the multi-source ``--manifest``, split within each source as the 2.0.0 recipe splits it),
``idrid`` (54 photographs with lesions, no per-image grades: outcomes and MI only) and ``synthetic`` (a
folder written by ``radscreen-train synth``).
When ``--run`` holds saved draws for the ODIR split (``eval_test/draws.npz`` from training), they are used
instead of scoring again (same draws, same preprocessing).

Example::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/screening_eval.py --artifact models/default --run runs/odir-v1 \\
        --sets odir idrid synthetic --synthetic data/synth-test --out runs/eval-default
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.quality_real import to_measures  # the sibling benchmark that measures the gate
from models.artifact import Artifact, load_artifact
from models.image.decode import DECODE_SIDE
from models.image.quality import assess_quality, judge
from models.outcome.decision import Eye, ScreeningOutcome, exam_decision, screening_outcome
from service.inference.imaging import decode_rgb
from support.shared_data import IDRID
from training.config import TrainConfig
from training.data.dataset import ManifestDataset
from training.data.manifest import ManifestRow, read_odir, read_synthetic
from training.data.photos import list_photos
from training.data.prepare import read_rows
from training.data.sources import keep_copies
from training.data.splits import split_by_patient, split_by_source
from training.evaluation import evaluate_predictions, write_report
from training.evaluation.ensemble import load_draws
from training.evaluation.screening import EyeRecord, screening_summary
from training.evaluation.uncertainty import mc_uncertainty
from training.predict import mc_probabilities


def exam_outcome(eyes: dict[str, list[str]]) -> str:
    """The visit's outcome from its photographs' outcomes: the service's exam rule (models.outcome.decision)."""
    photos = {Eye(eye): [ScreeningOutcome(o) for o in outcomes] for eye, outcomes in eyes.items() if eye in set(Eye)}
    return exam_decision(photos).outcome.value


def _gate(path: str) -> bool:
    data = Path(path).read_bytes()
    rgb = decode_rgb(data, max_pixels=50_000_000, max_bytes=len(data) + 1, size=DECODE_SIDE)
    return assess_quality(rgb).gradable


def odir_rows(run: Path, which: str, manifest: Path | None = None) -> list[ManifestRow]:
    """ODIR's ``which`` patients as ``run`` split them: from its ODIR labels, or, for a run trained on a
    multi-source manifest, that manifest's ODIR rows split within the source (``manifest_rows``)."""
    config = TrainConfig.load(run / "config.json")
    if config.layout == "manifest":
        return manifest_rows(manifest or Path(config.data), run, which, "odir")
    root = Path(config.data)
    rows = read_odir(root / "labels.csv" if root.is_dir() else root, include_other_disease=config.include_other_disease,
                     verify_images=False)
    split = split_by_patient(rows, config.split, seed=config.effective_split_seed)
    return split.test if which == "test" else split.val


def manifest_rows(manifest: Path, run: Path, which: str, source: str) -> list[ManifestRow]:
    """The ``which`` patients of ``source`` in a multi-source manifest, split as ``run`` split it (within each
    source, ``split_by_source``); the stretched EyePACS copy is never evaluated (``--train-only-copy``)."""
    config = TrainConfig.load(run / "config.json")
    rows = read_rows(TrainConfig(data=str(manifest), out="unused", layout="manifest",
                                 include_other_disease=config.include_other_disease))
    split = split_by_source(rows, config.split, seed=config.effective_split_seed)
    part = keep_copies(split.test if which == "test" else split.val, ["stretched-256"])
    return [row for row in part if row.source == source]


def score(artifact: Artifact, rows: Sequence[ManifestRow], cache: Path) -> np.ndarray:
    cfg = artifact.config
    dataset = ManifestDataset(rows, transform=artifact.image_transform())
    dataset.use_cache(cache, workers=2, progress=True)
    probs, _ = mc_probabilities(artifact.build_model(), dataset, mean=cfg.input.mean, std=cfg.input.std,
                                draws=artifact.serving_draws(), progress=True)
    return probs  # [S, N]


def gate_verdicts(rows: Sequence[ManifestRow], workers: int, measures: Path | None) -> list[bool]:
    """The quality gate's verdict per row: from ``benchmarks/quality_real.py``'s measures (judged with the
    current thresholds) where it holds the image, else decoded and measured here."""
    known: dict[str, bool] = {}
    if measures is not None and measures.is_file():
        with measures.open(newline="") as f:
            known = {Path(r["image"]).name: judge(to_measures(r)).gradable for r in csv.DictReader(f)}
    todo = [str(r.path) for r in rows if r.path.name not in known]
    if todo:
        with ProcessPoolExecutor(workers) as pool:
            known.update(zip((Path(p).name for p in todo), pool.map(_gate, todo, chunksize=16), strict=True))
    return [known[r.path.name] for r in rows]


def evaluate_set(name: str, rows: Sequence[ManifestRow], probs: np.ndarray, artifact: Artifact, out: Path,
                 *, labelled: bool, workers: int, measures: Path | None = None) -> dict[str, Any]:
    cal = artifact.calibration
    gradable = gate_verdicts(rows, workers, measures)
    unc = mc_uncertainty(probs)
    records = []
    for i, row in enumerate(rows):
        p, mi = float(unc.probability[i]), float(unc.mutual_information[i])
        outcome = screening_outcome(gradable=gradable[i], mutual_information=mi, probability=p,
                                    referral_threshold_mi=cal.referral_threshold_mi,
                                    decision_threshold=cal.decision_threshold).value
        records.append(EyeRecord(image=row.path.name, probability=p, mutual_information=mi, gradable=gradable[i],
                                 outcome=outcome, grade=row.grade if labelled else None, category=row.category,
                                 patient=row.patient_id, eye=row.eye))
    summary = screening_summary(records, exam_rule=exam_outcome if name in ("odir", "eyepacs") else None)
    (out / name).mkdir(parents=True, exist_ok=True)
    if labelled:
        keep = np.array(gradable)
        labels = np.array([int(r.referable) for r in rows])[keep]
        report = evaluate_predictions(probs[:, keep], labels, n_bootstrap=200,
                                      decision_threshold=cal.decision_threshold,
                                      referral_threshold_mi=cal.referral_threshold_mi)
        write_report(report, out / name)
        summary["evaluation"] = report.calibration_summary()["validation"]
        summary["paired"] = [
            {"a": d.a, "b": d.b, "metric": d.metric, "fractions": list(d.fractions),
             "difference": list(d.difference), "ci_low": list(d.ci_low), "ci_high": list(d.ci_high)}
            for d in report.paired_differences]
    (out / name / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _auc_cell(s: dict[str, Any]) -> str:
    a = s.get("auc_gradable")
    return f"{a['auc']:.3f} ({a['ci_low']:.3f}-{a['ci_high']:.3f})" if a else "-"


def table(summaries: dict[str, dict[str, Any]]) -> str:
    names = list(summaries)
    rows = [("images", lambda s: str(s["n_images"])),
            ("gradable", lambda s: _pct(s["n_gradable"] / max(s["n_images"], 1))),
            ("AUC, gradable (95 % CI)", _auc_cell),
            ("referable eyes answered no_referable_dr", lambda s: _pct(s.get("missed_share"))),
            ("non-referable eyes answered no_referable_dr", lambda s: _pct(s.get("auto_negative_share"))),
            ("all eyes: refer / uncertain / retake / no referable", lambda s: " / ".join(
                str(s["outcomes"][o]) for o in ("refer_referable_dr", "grader_review_uncertain", "retake_ungradable",
                                                "no_referable_dr"))),
            ("ECE (calibrated floor)", lambda s: (f"{s['evaluation']['ece']:.3f} "
                                                  f"({s['evaluation']['ece_calibrated_floor']:.3f})")
             if "evaluation" in s else "-"),
            ("patients missed / auto-answered", lambda s: (f"{_pct(s['per_patient']['missed_share'])} / "
                                                           f"{_pct(s['per_patient']['auto_negative_share'])}")
             if "per_patient" in s else "-")]
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += [f"| {label} | " + " | ".join(fn(summaries[n]) for n in names) + " |" for label, fn in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", default=None, help="artifact directory (default: the embedded model)")
    parser.add_argument("--run", type=Path, default=None, help="training run of the artifact (its split, its draws)")
    parser.add_argument("--sets", nargs="+", default=["odir", "idrid"],
                        choices=("odir", "eyepacs", "idrid", "synthetic"))
    parser.add_argument("--odir-split", choices=("test", "val"), default="test",
                        help="which patients of the split the odir and eyepacs sets hold")
    parser.add_argument("--manifest", type=Path, default=None,
                        help="the multi-source manifest (radscreen-train manifest) of --sets eyepacs")
    parser.add_argument("--synthetic", type=Path, default=None, help="folder from radscreen-train synth")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quality-measures", type=Path, default=None,
                        help="measures.csv of benchmarks/quality_real.py: ODIR gate verdicts without decoding again")
    args = parser.parse_args()
    artifact = load_artifact(args.artifact)
    cache = args.out / "cache"
    summaries: dict[str, dict[str, Any]] = {}
    for name in args.sets:
        if name == "odir":
            if args.run is None:
                raise SystemExit("--sets odir needs --run (the training run whose patient split to use)")
            rows = odir_rows(args.run, args.odir_split, args.manifest)
            saved = args.run / f"eval_{args.odir_split}" / "draws.npz"
            if saved.is_file():
                draws = load_draws(saved)
                if list(draws.ids) != [r.path.name for r in rows]:
                    raise SystemExit(f"{saved} does not hold the images of this split in this order")
                probs = draws.probs
            else:
                probs = score(artifact, rows, cache)
            labelled = True
        elif name == "eyepacs":
            if args.run is None or args.manifest is None:
                raise SystemExit("--sets eyepacs needs --run (its patient split) and --manifest")
            rows = manifest_rows(args.manifest, args.run, args.odir_split, "eyepacs")
            probs, labelled = score(artifact, rows, cache), True
        elif name == "idrid":
            rows = [ManifestRow(path=p, grade=2, patient_id=p.stem, eye=None, row_no=0, category="idrid")
                    for p in list_photos(IDRID)]
            probs, labelled = score(artifact, rows, cache), False
        else:
            if args.synthetic is None:
                raise SystemExit("--sets synthetic needs --synthetic FOLDER")
            rows = list(read_synthetic(args.synthetic, verify_images=False))
            probs, labelled = score(artifact, rows, cache), True
        summaries[name] = evaluate_set(name, rows, probs, artifact, args.out, labelled=labelled, workers=args.workers,
                                       measures=args.quality_measures if name == "odir" else None)
    print(table(summaries))
    (args.out / "table.md").write_text(table(summaries) + "\n")


if __name__ == "__main__":
    main()
