"""Patient-level screening figures: both eyes of each patient through the exam rule, next to the per-eye figures.

Scores every photograph of the chosen patients through the service's own path
(``service.inference.scoring``: decode, quality gate, the artifact's preprocessing, the K serving draws, the
calibrated per-image outcome), combines each patient's eyes with the one exam rule (``models.outcome.decision``) and
prints, for patients and for eyes side by side:

- **sensitivity**: of the patients (eyes) with referable DR, the share NOT answered ``no_referable_dr``
  (a referable patient is missed only when the exam answers ``no_referable_dr``; ``grader_review_uncertain``
  and ``retake_ungradable`` send the patient to a human, so they are not misses), and the share referred
  outright (``refer_referable_dr``);
- **answered automatically**: of the patients (eyes) without referable DR, the share answered
  ``no_referable_dr`` (no human needed), and the share sent to a human or referred;
- the full outcome table by truth, with Wilson 95 % intervals on the shares.

A patient is referable when any of their eyes is (``referable`` column, DR grade >= 2). Only patients with
both eyes in the labels file are scored unless ``--allow-one-eye`` (a one-eye visit can never be
``no_referable_dr``, which would understate the automatic share). A photograph the service refuses is counted
and its patient left out of the patient figures (said in the output).

Which patients: ``--patients FILE`` (one id per line, or a CSV with a ``patient`` column: a split file), or the
test split recomputed the way training makes it (``--split test --split-seed 0 --split-fractions 0.7,0.15,0.15``,
``training.data.split_by_patient`` over the labels file); ``--limit N`` keeps N of them (the first N after a
seeded shuffle, ``--limit-seed``), for a quick run.

Example (the ODIR labels; 40 test patients, the embedded default model)::

    .venv/bin/python benchmarks/exam_outcomes.py --labels ../shared/data/odir-5k/labels.csv \\
        --split test --split-seed 0 --limit 40 --model-dir models/default --json exam_outcomes.json
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.artifact import DEFAULT_ARTIFACT_DIR
from models.outcome.decision import EXAM_PRECEDENCE, Eye, ScreeningOutcome, exam_decision
from service.inference.imaging import ImageRejected
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import ScorerSpec

OUTCOMES = [o.value for o in EXAM_PRECEDENCE]
CLEAR = ScreeningOutcome.NO_REFERABLE_DR.value
REFER = ScreeningOutcome.REFER_REFERABLE_DR.value


@dataclass(frozen=True)
class EyeRow:
    patient: str
    eye: Eye
    path: Path
    referable: bool


def read_labels(labels: Path) -> list[EyeRow]:
    """The labels CSV (columns image, patient, eye, referable; image relative to the CSV's folder)."""
    with labels.open(newline="", encoding="utf-8") as fh:
        return [EyeRow(str(r["patient"]).strip(), Eye(r["eye"].strip().lower()), labels.parent / r["image"],
                       r["referable"].strip() == "1") for r in csv.DictReader(fh)]


def read_patient_file(path: Path) -> list[str]:
    """Patient ids: one per line, or a CSV's ``patient`` column."""
    text = path.read_text(encoding="utf-8")
    first = text.splitlines()[0] if text else ""
    if "," in first or first.strip() == "patient":
        with path.open(newline="", encoding="utf-8") as fh:
            return list(dict.fromkeys(str(r["patient"]).strip() for r in csv.DictReader(fh)))
    return [line.strip() for line in text.splitlines() if line.strip()]


def split_patients(labels: Path, split: str, seed: int, fractions: tuple[float, float, float]) -> list[str]:
    """The patients of one split as training makes it (``training.data.split_by_patient``)."""
    from training.data import split_by_patient
    from training.data.manifest import read_manifest

    rows = read_manifest(labels, path_column="image", grade_column="dr_grade", patient_column="patient",
                         eye_column="eye", verify_images=False)
    part = getattr(split_by_patient(rows, fractions, seed=seed), split)
    return list(dict.fromkeys(r.patient_id for r in part))


def wilson(k: int, n: int) -> tuple[float, float] | None:
    """Wilson 95 % interval of k successes in n."""
    if n == 0:
        return None
    z, p = 1.959964, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def share(k: int, n: int) -> dict[str, Any]:
    ci = wilson(k, n)
    return {"k": k, "n": n, "share": k / n if n else None, "ci95": ci}


def figures(outcomes: list[str], truth: list[bool]) -> dict[str, Any]:
    """Sensitivity, automatic share and the outcome table for one level (patients or eyes)."""
    pos = [o for o, t in zip(outcomes, truth, strict=True) if t]
    neg = [o for o, t in zip(outcomes, truth, strict=True) if not t]
    return {
        "sensitivity_not_cleared": share(sum(o != CLEAR for o in pos), len(pos)),
        "referred_outright": share(sum(o == REFER for o in pos), len(pos)),
        "non_referable_answered_automatically": share(sum(o == CLEAR for o in neg), len(neg)),
        "non_referable_sent_to_human_or_referred": share(sum(o != CLEAR for o in neg), len(neg)),
        "table": {"referable": {o: pos.count(o) for o in OUTCOMES},
                  "non_referable": {o: neg.count(o) for o in OUTCOMES}},
    }


def cpu_model() -> str:
    """``lscpu``'s model name and the precision-relevant flags (``models.platform.cpu``)."""
    from models.platform.cpu import detect_cpu

    cpu = detect_cpu()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    name = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name:")),
                cpu.model_name)
    return f"{name} (flags: {', '.join(cpu.flags) or 'none'}; {cpu.isa})"


def fmt(entry: dict[str, Any]) -> str:
    if entry["n"] == 0:
        return "n/a (none)"
    lo, hi = entry["ci95"]
    return f"{entry['share']:.1%} ({entry['k']}/{entry['n']}; 95% CI {lo:.1%}-{hi:.1%})"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--labels", type=Path, required=True, help="labels CSV: image, patient, eye, referable")
    p.add_argument("--model-dir", type=Path, default=DEFAULT_ARTIFACT_DIR)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--patients", type=Path, help="patient ids, one per line, or a split CSV with a patient column")
    who.add_argument("--split", choices=("train", "val", "test"), help="recompute this patient split from the labels")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--split-fractions", default="0.7,0.15,0.15")
    p.add_argument("--limit", type=int, default=None, help="keep this many patients (seeded shuffle)")
    p.add_argument("--limit-seed", type=int, default=0)
    p.add_argument("--allow-one-eye", action="store_true", help="also score patients with one labelled eye")
    p.add_argument("--backend", default="auto")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args(argv)

    rows = read_labels(args.labels)
    if args.patients is not None:
        chosen = read_patient_file(args.patients)
        source = f"patients from {args.patients}"
    else:
        fractions = tuple(float(x) for x in args.split_fractions.split(","))
        chosen = split_patients(args.labels, args.split, args.split_seed, fractions)  # type: ignore[arg-type]
        source = f"{args.split} split (split_by_patient seed {args.split_seed}, fractions {args.split_fractions})"
    by_patient: dict[str, list[EyeRow]] = defaultdict(list)
    for r in rows:
        by_patient[r.patient].append(r)
    one_eye = [pt for pt in chosen if len({r.eye for r in by_patient.get(pt, [])}) < 2]
    selected = [pt for pt in chosen if pt in by_patient and (args.allow_one_eye or pt not in one_eye)]
    if args.limit is not None:
        order = np.random.default_rng(args.limit_seed).permutation(len(selected))
        selected = [selected[i] for i in sorted(order[: args.limit].tolist())]
    eyes = [r for pt in selected for r in by_patient[pt]]

    scorer = load_scorer(ScorerSpec(model_dir=args.model_dir, backend=args.backend, device=args.device))
    ident, cal = scorer.model_identity, scorer.calibration
    t0 = time.perf_counter()
    outcome_of: dict[tuple[str, Eye, Path], str] = {}
    refused: list[str] = []
    for start in range(0, len(eyes), args.batch):
        chunk, prepared = [], []
        for r in eyes[start:start + args.batch]:
            try:
                prepared.append(prepare_image(r.path.read_bytes(), scorer.pipeline))
                chunk.append(r)
            except (ImageRejected, OSError) as exc:
                refused.append(f"{r.path.name}: {exc}")
        for r, score in zip(chunk, scorer.score_batch(prepared), strict=True):
            outcome_of[(r.patient, r.eye, r.path)] = score.outcome.value
    seconds = time.perf_counter() - t0

    eye_outcomes = [outcome_of[(r.patient, r.eye, r.path)] for r in eyes if (r.patient, r.eye, r.path) in outcome_of]
    eye_truth = [r.referable for r in eyes if (r.patient, r.eye, r.path) in outcome_of]
    patient_outcomes, patient_truth, left_out = [], [], 0
    for pt in selected:
        members = by_patient[pt]
        if any((r.patient, r.eye, r.path) not in outcome_of for r in members):
            left_out += 1
            continue
        photographs: dict[Eye, list[ScreeningOutcome]] = {Eye.RIGHT: [], Eye.LEFT: []}
        for r in members:
            photographs[r.eye].append(ScreeningOutcome(outcome_of[(r.patient, r.eye, r.path)]))
        patient_outcomes.append(exam_decision(photographs).outcome.value)
        patient_truth.append(any(r.referable for r in members))

    report = {
        "command": " ".join(["benchmarks/exam_outcomes.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "python": platform.python_version(), "backend": scorer.backend.name,
                    "precision": scorer.precision},
        "model": {"name": ident.name, "version": ident.version, "sha256": ident.sha256,
                  "training_data": ident.training_data, "mc_samples": ident.mc_samples,
                  "referral_threshold_mi": cal.referral_threshold_mi, "decision_threshold": cal.decision_threshold},
        "selection": {"source": source, "patients": len(selected), "one_eye_patients_skipped":
                      0 if args.allow_one_eye else len([pt for pt in one_eye if pt in by_patient]),
                      "photographs": len(eyes), "refused_photographs": refused,
                      "patients_left_out_for_refused_photographs": left_out},
        "seconds": round(seconds, 1),
        "patients": figures(patient_outcomes, patient_truth),
        "eyes": figures(eye_outcomes, eye_truth),
    }
    print_report(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def print_report(r: dict[str, Any]) -> None:
    m, s = r["model"], r["selection"]
    print(f"model {m['name']} {m['version']} (sha256 {m['sha256'][:12]}, trained on {m['training_data']}), "
          f"K={m['mc_samples']}, MI threshold {m['referral_threshold_mi']:.3g} nat, decision threshold "
          f"{m['decision_threshold']:.3g}")
    print(f"{s['source']}: {s['patients']} patients, {s['photographs']} photographs "
          f"({s['one_eye_patients_skipped']} one-eye patients skipped, {len(s['refused_photographs'])} photographs "
          f"refused, {s['patients_left_out_for_refused_photographs']} patients left out for them)")
    mach = r["machine"]
    print(f"machine: {mach['cpu']}; {mach['backend']} {mach['precision']}; {r['date']}; scoring took {r['seconds']} s")
    print(f"{'':44s} {'patients (exam rule)':38s} eyes (per photograph)")
    for key, label in (("sensitivity_not_cleared", "referable: not answered no_referable_dr"),
                       ("referred_outright", "referable: refer_referable_dr"),
                       ("non_referable_answered_automatically", "non-referable: answered no_referable_dr"),
                       ("non_referable_sent_to_human_or_referred", "non-referable: human or referred")):
        print(f"{label:44s} {fmt(r['patients'][key]):38s} {fmt(r['eyes'][key])}")
    for level in ("patients", "eyes"):
        table = r[level]["table"]
        print(f"{level} by outcome: " + "; ".join(
            f"{truth} " + ", ".join(f"{o} {n}" for o, n in counts.items()) for truth, counts in table.items()))


if __name__ == "__main__":
    main()
