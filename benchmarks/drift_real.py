"""Reduced-precision drift on REAL eyes: bf16 and int8 against fp32, the record ``auto`` decides from.

Scores real photographs — a seeded sample of the ODIR-5K *validation* patients of the model's own patient
split (70/15/15, split seed 0, as the model card states) plus the 54 IDRiD lesion photographs — through the
served path (decode, quality gate, preprocessing, the K fixed draws, the outcome rule) in fp32 (torch, the
reference), ONNX Runtime fp32, torch bf16 (where this CPU runs it natively) and ONNX Runtime int8 (its
activation range table calibrated on ``--calibration`` photographs of the *training* patients). Per path:
max |Δp̄|, max |ΔMI|, flips of the label, of the MI referral and of the four outcomes, the images flipped
(with fp32's p̄ and MI), and the share of images within the largest shift of either threshold.

**The guard band.** A reduced path re-scores in fp32 every image whose p̄ or MI lies within a band around
its threshold; outside the band the shift cannot cross the threshold unless it exceeds the band. The band is
``--guard-factor`` x the largest relative shift measured, scaled to the thresholds (:func:`band_of`); it is
*checked* by two-fold cross-validation (the band set on one half of the images must leave no flip on the
other half). A path may serve under ``auto`` only when
its guarded outcome flips are zero in both folds and on all images; the record says so.

    .venv/bin/python benchmarks/drift_real.py --odir 300 --calibration 32 --save runs/drift-real.npz
    .venv/bin/python benchmarks/drift_real.py ... --record     # writes int8_ranges.json + the records

``--record`` writes the records into the artifact's ``calibration.json`` (``precision_drift``) and the int8
range table into the artifact (both listed in its manifest; the sha256 changes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.artifact import (
    Artifact,
    Calibration,
    load_artifact,
    replace_artifact_file,
    replace_calibration,
    replace_model_card,
)
from models.nn.uncertainty import binary_uncertainty_from_logits
from models.outcome.decision import is_referable, is_uncertain, screening_outcome
from models.platform.cpu import detect_cpu
from models.serving.int8 import INT8_RANGES_FILE, Int8DrawnSession, calibrate_ranges
from service.inference.imaging import ImagePipeline, ImageRejected
from service.inference.loading import load_scorer
from service.inference.prepare import PreparedImage, prepare_image
from service.inference.spec import ScorerSpec
from support.shared_data import IDRID, ODIR, missing_reason
from training.data.manifest import ManifestRow, read_odir
from training.data.splits import split_by_patient

SPLIT = (0.7, 0.15, 0.15)


def odir_split(seed: int) -> Any:
    rows = read_odir(ODIR / "labels.csv", include_other_disease=True, verify_images=False)
    return split_by_patient(rows, SPLIT, seed=seed)


def sample(rows: Sequence[ManifestRow], n: int, seed: int) -> list[Path]:
    order = np.random.default_rng(seed).permutation(len(rows))[:n]
    return [Path(rows[i].path) for i in sorted(order)]


@dataclasses.dataclass
class Scored:
    p: np.ndarray
    mi: np.ndarray
    seconds_per_image: float


def prepare(paths: Sequence[Path], pipe: ImagePipeline) -> tuple[list[PreparedImage], list[str]]:
    prepared, names = [], []
    for path in paths:
        try:
            prepared.append(prepare_image(path.read_bytes(), pipe))
            names.append(f"{path.parent.name}/{path.name}")
        except ImageRejected as exc:
            print(f"  {path.name}: refused by the decoder ({exc.problem_type}); not counted")
    return prepared, names


def run_path(forward: Any, pixels: np.ndarray, batch: int) -> Scored:
    forward(pixels[:1])
    start = time.perf_counter()
    logits = np.concatenate([forward(pixels[i:i + batch]) for i in range(0, len(pixels), batch)], axis=1)
    secs = (time.perf_counter() - start) / len(pixels)
    unc = binary_uncertainty_from_logits(torch.from_numpy(logits))
    return Scored(unc.probability.numpy().astype(np.float64), unc.mutual_information.numpy().astype(np.float64),
                  secs)


def outcomes(s: Scored, gradable: np.ndarray, dec: float, thr: float) -> np.ndarray:
    return np.array([screening_outcome(gradable=bool(g), mutual_information=float(m), probability=float(p),
                                       referral_threshold_mi=thr, decision_threshold=dec).value
                     for p, m, g in zip(s.p, s.mi, gradable, strict=True)])


def guarded(ref: Scored, got: Scored, band_p: float, band_mi: float, dec: float, thr: float) -> Scored:
    """``got`` with every image inside the band around either threshold replaced by the fp32 answer."""
    near = (np.abs(got.p - dec) <= band_p) | (np.abs(got.mi - thr) <= band_mi)
    return Scored(np.where(near, ref.p, got.p), np.where(near, ref.mi, got.mi), got.seconds_per_image)


def near_share(got: Scored, band_p: float, band_mi: float, dec: float, thr: float) -> float:
    return float(((np.abs(got.p - dec) <= band_p) | (np.abs(got.mi - thr) <= band_mi)).mean())


def band_of(ref: Scored, got: Scored, idx: np.ndarray, dec: float, thr: float, factor: float) -> tuple[float, float]:
    """The guard band's half-widths around the two thresholds, from the shifts on images ``idx``.

    Shifts scale with the answer: a shift δ of the logits moves p̄ by ~p̄(1-p̄)·δ, and MI, the draws'
    disagreement, shifts in proportion to itself. So the largest *relative* shifts are measured (|Δp̄| over
    p̄(1-p̄), |ΔMI| over MI) and scaled to the thresholds, times ``factor``.
    """
    rel_p = np.abs(got.p - ref.p)[idx] / np.maximum(ref.p * (1 - ref.p), 1e-12)[idx]
    rel_mi = np.abs(got.mi - ref.mi)[idx] / np.maximum(ref.mi, 1e-12)[idx]
    return factor * float(rel_p.max()) * dec * (1 - dec), factor * float(rel_mi.max()) * thr


def record(name: str, ref: Scored, got: Scored, gradable: np.ndarray, names: list[str], dec: float, thr: float,
           factor: float, photographs: str) -> dict[str, Any]:
    dp, dmi = np.abs(got.p - ref.p), np.abs(got.mi - ref.mi)
    label_flips = int((is_referable(got.p, dec) != is_referable(ref.p, dec)).sum())
    referral_flips = int((is_uncertain(got.mi, thr) != is_uncertain(ref.mi, thr)).sum())
    o_ref, o_got = outcomes(ref, gradable, dec, thr), outcomes(got, gradable, dec, thr)
    flipped = np.flatnonzero(o_ref != o_got)
    every = np.arange(len(ref.p))
    band_p, band_mi = band_of(ref, got, every, dec, thr, factor)
    folds = []
    for fit in (every[every % 2 == 0], every[every % 2 == 1]):
        check = np.setdiff1d(every, fit)
        g = guarded(ref, got, *band_of(ref, got, fit, dec, thr, factor), dec, thr)
        folds.append(int((outcomes(g, gradable, dec, thr)[check] != o_ref[check]).sum()))
    g_all = guarded(ref, got, band_p, band_mi, dec, thr)
    guarded_flips = int((outcomes(g_all, gradable, dec, thr) != o_ref).sum())
    share = near_share(got, band_p, band_mi, dec, thr)
    print(f"{name:<22}{got.seconds_per_image:>8.3f}{dp.max():>10.2e}{dmi.max():>10.2e}"
          f"{label_flips:>7}{referral_flips:>7}"
          f"{len(flipped):>7}{100 * share:>8.1f}%{folds[0]:>5}{folds[1]:>4}{guarded_flips:>5}")
    for i in flipped:
        print(f"    flip {names[i]}: fp32 {o_ref[i]} (p̄ {ref.p[i]:.4f}, MI {ref.mi[i]:.3e}) -> {o_got[i]} "
              f"(p̄ {got.p[i]:.4f}, MI {got.mi[i]:.3e})")
    return {
        "images": len(ref.p),
        "photographs": photographs,
        "label_flips": label_flips,
        "referral_flips": referral_flips,
        "outcome_flips": len(flipped),
        "max_abs_dp": float(dp.max()),
        "max_abs_dmi": float(dmi.max()),
        "seconds_per_image": got.seconds_per_image,
        "guard_band": {"factor": factor, "probability": band_p, "mutual_information": band_mi,
                       "share_rescored": share, "cross_validated_flips": folds,
                       "outcome_flips": guarded_flips},
    }


CARD_SECTION = "## Reduced precision (measured on real photographs)"


def card_section(cal: Calibration, command: str, machine: str) -> str:
    """The model card's section on the recorded precisions: what was measured and what may serve."""
    permits = cal.permits()
    lines = [CARD_SECTION, f"- Measured {date.today().isoformat()} on {machine} against fp32: `{command}`."]
    for prec, r in sorted(cal.precision_drift.items()):
        head = (f"- {prec}: on {r['photographs'] if 'photographs' in r else str(r['images']) + ' images'}, "
                f"max |Δp̄| {r['max_abs_dp']:.2g}, max |ΔMI| {r['max_abs_dmi']:.2g} nat, "
                f"{r.get('outcome_flips', 0)} of {r['images']} outcomes changed")
        permit = permits.get(prec)
        if permit is None:
            lines.append(f"{head}. Not permitted: `RADSCREEN_PRECISION=auto` never serves it.")
        elif permit.guard is None:
            lines.append(f"{head}. Permitted as it is where the CPU runs it natively.")
        else:
            g = permit.guard
            lines.append(f"{head}. Permitted with fp32 re-scoring of every image whose {prec} p̄ lies within "
                         f"{g.probability:.2g} of the decision threshold or whose MI lies within "
                         f"{g.mutual_information:.2g} nat of the MI threshold ({g.share_rescored:.0%} of these "
                         "photographs), which left no outcome changed, also when the band was set on one half and "
                         "checked on the other.")
    return "\n".join(lines) + "\n"


def with_section(card: str, section: str) -> str:
    """``card`` with its precision section replaced (or inserted before the validation section)."""
    parts = card.split("\n## ")
    kept = [parts[0]] + [f"## {x}" for x in parts[1:] if not f"## {x}".startswith(CARD_SECTION)]
    at = next((i for i, x in enumerate(kept) if x.startswith("## Validation")), len(kept))
    kept.insert(at, section)
    return "\n".join(x.rstrip("\n") + "\n" for x in kept)


def write_records(art: Artifact, records: dict[str, dict[str, Any]], ranges: Path | None, command: str,
                  machine: str) -> str:
    cal = dataclasses.replace(art.calibration, precision_drift={**art.calibration.precision_drift, **records})
    if ranges is not None and "int8" in cal.permits():  # the table ships only with a path that may serve
        replace_artifact_file(art.directory, INT8_RANGES_FILE, ranges.read_bytes())
    replace_calibration(art.directory, cal)
    return replace_model_card(art.directory, with_section(art.model_card, card_section(cal, command, machine)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=None, help="artifact (default: the embedded model)")
    p.add_argument("--odir", type=int, default=300, help="ODIR validation-patient photographs (seeded sample)")
    p.add_argument("--no-idrid", action="store_true", help="leave out the 54 IDRiD photographs")
    p.add_argument("--calibration", type=int, default=64,
                   help="ODIR training-patient photographs for int8's ranges (half of them referable)")
    p.add_argument("--split-seed", type=int, default=0, help="the model's patient split seed (model card)")
    p.add_argument("--seed", type=int, default=2026, help="sampling seed")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--guard-factor", type=float, default=2.0)
    p.add_argument("--paths", nargs="+", default=["onnxruntime-fp32", "torch-bf16", "onnxruntime-int8"])
    p.add_argument("--save", type=Path, default=None, help="write per-image p̄/MI of every path (npz)")
    p.add_argument("--save-ranges", type=Path, default=None, help="copy the int8 range table here")
    p.add_argument("--record", action="store_true", help="write the records (and int8 ranges) into the artifact")
    args = p.parse_args()
    if not (ODIR / "labels.csv").exists():
        raise SystemExit(missing_reason(ODIR))

    cpu = detect_cpu()
    print(f"CPU: {cpu.summary()}")
    ref_scorer = load_scorer(ScorerSpec(model_dir=args.model_dir, backend="torch", device="cpu", precision="fp32",
                                        strategy="loop", threads=args.threads))
    art = load_artifact(args.model_dir)
    cal = art.calibration
    dec, thr = cal.decision_threshold, cal.referral_threshold_mi
    split = odir_split(args.split_seed)
    odir_prepared, odir_names = prepare(sample(split.val, args.odir, args.seed), ref_scorer.pipeline)
    idrid_prepared, idrid_names = ([], []) if args.no_idrid else prepare(sorted(IDRID.glob("*.jpg")),
                                                                           ref_scorer.pipeline)
    prepared, names = odir_prepared + idrid_prepared, odir_names + idrid_names
    photographs = (f"{len(odir_prepared)} ODIR-5K validation-patient photographs (split seed {args.split_seed}, "
                   f"sample seed {args.seed}) + {len(idrid_prepared)} IDRiD lesion photographs")
    pixels = np.stack([im.pixels for im in prepared]).astype(np.float32)
    gradable = np.array([im.quality.gradable for im in prepared])
    print(f"{art.config.name} {art.config.version} ({art.sha256[:12]}): {photographs}; {gradable.sum()} gradable; "
          f"decision threshold {dec:.4g}, MI threshold {thr:.3g} nat")

    ref = run_path(ref_scorer.backend.run, pixels, args.batch)
    print(f"fp32 p̄ within 0.01 of the decision threshold: {(np.abs(ref.p - dec) < 0.01).mean():.1%}; "
          f"MI within 10 % of its threshold: {(np.abs(ref.mi - thr) < 0.1 * thr).mean():.1%}")
    print(f"{'path':<22}{'s/img':>8}{'max|dp|':>10}{'max|dMI|':>10}{'label':>7}{'refer':>7}{'outc.':>7}"
          f"{'in band':>9}{'cv flips':>9}{'guard':>5}")
    print(f"{'torch fp32 (ref)':<22}{ref.seconds_per_image:>8.3f}")
    results: dict[str, Scored] = {"torch-fp32": ref}
    records: dict[str, dict[str, Any]] = {}
    ranges_file: Path | None = None
    net = art.serving_network()
    for path in args.paths:
        backend, precision = path.split("-")
        if precision == "bf16" and not cpu.native_bf16:
            print(f"{path:<22}skipped: this CPU has no native bf16")
            continue
        if precision == "int8":
            referable = [r for r in split.train if r.referable]
            others = [r for r in split.train if not r.referable]
            half = args.calibration // 2  # as many referable as not: their activations reach furthest
            calib, _ = prepare(sample(referable, half, args.seed + 1) + sample(others, args.calibration - half,
                                                                               args.seed + 2), ref_scorer.pipeline)
            cal_pixels = np.stack([im.pixels for im in calib]).astype(np.float32)
            ranges_file = Path(tempfile.mkdtemp(prefix="radscreen-ranges-")) / INT8_RANGES_FILE
            start = time.perf_counter()
            calibrate_ranges(net, [cal_pixels[i:i + args.batch] for i in range(0, len(cal_pixels), args.batch)],
                             ranges_file)
            session = Int8DrawnSession(net, ranges_file, intra_op_threads=args.threads)
            print(f"  int8: ranges from {len(calib)} training-patient photographs, calibrated and quantised "
                  f"in {time.perf_counter() - start:.0f} s")
            forward = session.run
        else:
            scorer = load_scorer(ScorerSpec(model_dir=args.model_dir, backend=backend, device="cpu",
                                            precision=precision, strategy="loop", threads=args.threads), cpu=cpu)
            forward = scorer.backend.run
        results[path] = got = run_path(forward, pixels, args.batch)
        records[precision] = record(path, ref, got, gradable, names, dec, thr, args.guard_factor, photographs)
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        np.savez(args.save, names=np.array(names), gradable=gradable,
                 **{f"{k}_p": v.p for k, v in results.items()}, **{f"{k}_mi": v.mi for k, v in results.items()})
        print(f"per-image figures: {args.save}")
    if args.save_ranges and ranges_file is not None:
        shutil.copy(ranges_file, args.save_ranges)
    records.pop("fp32", None)  # ONNX Runtime fp32 is fp32: its row checks the served fp32 path, no record
    print(json.dumps(records, indent=1))
    if args.record:
        command = "benchmarks/drift_real.py " + " ".join(a for a in sys.argv[1:] if a != "--record")
        sha = write_records(art, records, ranges_file if "int8" in records else None, command, cpu.summary())
        print(f"recorded {sorted(records)} in {art.directory}; new sha256 {sha}")


if __name__ == "__main__":
    main()
