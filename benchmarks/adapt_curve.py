"""The adaptation curve: a parent that never saw a programme, adapted with 50-400 of that programme's graded eyes.

For each number of site eyes and each mode of ``radscreen-train adapt`` (recalibrate, posterior-prior, finetune) it
writes the site's labels file (nested: a smaller site's patients are a subset of a larger one's), runs ``adapt``
in-process, then scores the site artifact on

- the **new programme's test patients** (AUC, referable eyes missed and non-referable eyes answered automatically
  at the site artifact's thresholds, and whether the card's cross-fitted promise holds there), and
- the **old programme's test patients** (forgetting: AUC and its paired patient-bootstrap difference from the
  parent),

each on the eyes the quality gate passes. Every stage is kept in ``--out`` (site runs, scores per weights, gate
verdicts), so a run stopped anywhere continues when started again with the same command; ``--order`` puts the
cells wanted first. A cell the adapt guards refuse (too few referable eyes for the bound) is reported as refused
with the guard's words.

Example (the parent 1.0.0 was trained on ODIR-5K only; the new programme is EyePACS's natural photographs)::

    .venv/bin/python benchmarks/adapt_curve.py --parent runs/artifact-1.0.0 \\
        --manifest runs/manifests/odir-eyepacs.csv --out runs/adapt-curve --sizes 400 200 100 50
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from models.artifact import WEIGHTS_FILE, Artifact, load_artifact
from models.image.quality import assess_quality
from models.outcome.decision import is_referable, is_uncertain
from training.adapt import AdaptError, AdaptRequest, TuneOptions, adapt
from training.config import TrainConfig
from training.data.dataset import ManifestDataset
from training.data.manifest import ManifestRow
from training.data.prepare import read_rows
from training.data.splits import split_by_source
from training.evaluation.cross_fit import bootstrap_weights, interval, patient_groups, weighted_aucs
from training.evaluation.operating_rules import wilson
from training.evaluation.uncertainty import mc_uncertainty
from training.predict import mc_probabilities


def site_rows(manifest: Path, source: str, copy: str | None) -> tuple[list[ManifestRow], list[ManifestRow],
                                                                          list[ManifestRow]]:
    """(the new programme's pool: training and validation patients, its test patients, the old programme's test
    patients), split within each source as the project's runs split them (70/15/15, seed 0)."""
    rows = read_rows(TrainConfig(data=str(manifest), out="unused", layout="manifest", include_other_disease=True))
    split = split_by_source(rows, (0.7, 0.15, 0.15), seed=0)

    def new(part: list[ManifestRow]) -> list[ManifestRow]:
        return [r for r in part if r.source == source and (copy is None or r.copy == copy)]

    return new(split.train + split.val), new(split.test), [r for r in split.test if r.source != source]


def nested_sites(pool: list[ManifestRow], sizes: list[int], seed: int) -> dict[int, list[ManifestRow]]:
    """Each size's eyes: whole patients in one seeded order until the size is reached (smaller sites nest)."""
    patients = sorted({r.patient_id for r in pool})
    order = [patients[i] for i in np.random.default_rng(seed).permutation(len(patients))]
    by_patient: dict[str, list[ManifestRow]] = {}
    for r in pool:
        by_patient.setdefault(r.patient_id, []).append(r)
    sites = {}
    for size in sizes:
        eyes: list[ManifestRow] = []
        for p in order:
            if len(eyes) >= size:
                break
            eyes += by_patient[p]
        sites[size] = eyes
    return sites


def write_labels(rows: list[ManifestRow], path: Path, root: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["image", "grade", "patient", "eye"])
        for r in rows:
            w.writerow([r.path.relative_to(root).as_posix(), r.grade, r.patient_id, r.eye or ""])


def gradable(rows: list[ManifestRow], artifact: Artifact, out: Path) -> list[ManifestRow]:
    """The rows the quality gate passes (verdicts kept in ``out/gate-test.json``)."""
    path = out / "gate-test.json"
    known: dict[str, bool] = json.loads(path.read_text()) if path.is_file() else {}
    transform = artifact.image_transform()
    for r in rows:
        if str(r.path) not in known:
            known[str(r.path)] = bool(assess_quality(transform.decode(r.path)).gradable)
    path.write_text(json.dumps(known))
    return [r for r in rows if known[str(r.path)]]


def scores(artifact: Artifact, rows: list[ManifestRow], out: Path, name: str) -> np.ndarray:
    """``[S, N]`` draws through the artifact's transform and serving draws, kept per weights and set."""
    path = out / "scores" / f"{name}-{artifact.files[WEIGHTS_FILE][:16]}.npy"
    if path.is_file():
        return np.load(path)
    dataset = ManifestDataset(rows, transform=artifact.image_transform()).use_cache(out / "cache", progress=True)
    inp = artifact.image_transform()
    probs, _ = mc_probabilities(artifact.build_model(), dataset, mean=inp.mean, std=inp.std,
                                draws=artifact.serving_draws(), progress=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, probs)
    return probs


def figures(artifact: Artifact, probs: np.ndarray, rows: list[ManifestRow], parent_probs: np.ndarray,
            n_bootstrap: int = 1000) -> dict[str, Any]:
    """AUC (patient bootstrap), outcomes at the artifact's thresholds, and the AUC's paired change from the parent."""
    y = np.asarray([r.referable for r in rows], dtype=np.int64)
    u, pu = mc_uncertainty(probs), mc_uncertainty(parent_probs)
    group = patient_groups([r.patient_id for r in rows])
    weights = bootstrap_weights(group, n_bootstrap, np.random.default_rng(0))
    a, pa = weighted_aucs(u.probability, y, weights), weighted_aucs(pu.probability, y, weights)
    cal = artifact.calibration
    negative = ~is_referable(u.probability, cal.decision_threshold) & ~is_uncertain(u.mutual_information,
                                                                                    cal.referral_threshold_mi)
    missed, auto = int((negative & (y == 1)).sum()), int((negative & (y == 0)).sum())
    auc = float(roc_auc_score(y, u.probability))
    return {"eyes": int(y.size), "referable": int(y.sum()),
            "auc": interval(auc, a).__dict__,
            "delta_auc": interval(auc - float(roc_auc_score(y, pu.probability)), a - pa).__dict__,
            "missed": missed, "missed_share": missed / max(int(y.sum()), 1),
            "missed_wilson": wilson(missed, int(y.sum())), "auto": auto,
            "auto_share": auto / max(int((y == 0).sum()), 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--parent", type=Path, required=True, help="an artifact that never saw the new programme")
    ap.add_argument("--manifest", type=Path, required=True, help="the multi-source manifest (odir-eyepacs.csv)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--source", default="eyepacs", help="the new programme")
    ap.add_argument("--copy", default="natural-1024", help="its image copy (none: every copy)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[400, 200, 100, 50])
    ap.add_argument("--modes", nargs="+", default=["recalibrate", "posterior-prior", "finetune"])
    ap.add_argument("--miss-share", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=TuneOptions().epochs)
    ap.add_argument("--prior-weight", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    parent = load_artifact(args.parent)
    pool, new_test, old_test = site_rows(args.manifest, args.source, None if args.copy == "none" else args.copy)
    root = Path(str(Path(pool[0].path).parent))
    sites = nested_sites(pool, args.sizes, args.seed)
    new_test, old_test = gradable(new_test, parent, out), gradable(old_test, parent, out)
    print(f"pool {len(pool)} eyes; new-programme test {len(new_test)} gradable eyes "
          f"({sum(r.referable for r in new_test)} referable); old-programme test {len(old_test)}", flush=True)
    base = {"new": scores(parent, new_test, out, "new"), "old": scores(parent, old_test, out, "old")}
    results: dict[str, Any] = {"parent": {"name": parent.config.name, "version": parent.config.version,
                                          "sha256": parent.sha256,
                                          "new": figures(parent, base["new"], new_test, base["new"]),
                                          "old": figures(parent, base["old"], old_test, base["old"])},
                               "cells": {}}
    for size in args.sizes:
        labels = out / "sites" / f"n{size}.csv"
        write_labels(sites[size], labels, root)
        for mode in args.modes:
            cell = f"n{size}-{mode}"
            started = time.monotonic()
            req = AdaptRequest(parent=args.parent, labels=labels, image_root=root, mode=mode, out=out / cell,
                               run_dir=out / "runs" / cell, miss_share=args.miss_share,
                               tune=TuneOptions(epochs=args.epochs, prior_weight=args.prior_weight, seed=args.seed),
                               seed=args.seed, version=f"{parent.config.version}+{cell}")
            try:
                if not (out / cell / "manifest.json").is_file():
                    adapt(req, command=f"benchmarks/adapt_curve.py ... ({cell})")
            except AdaptError as exc:
                results["cells"][cell] = {"size": size, "mode": mode, "refused": str(exc)}
                print(f"{cell}: refused: {exc}", flush=True)
                continue
            site = load_artifact(out / cell)
            op = site.calibration.validation["site"]["operating_point"]
            new = figures(site, scores(site, new_test, out, "new"), new_test, base["new"])
            results["cells"][cell] = {
                "size": size, "mode": mode, "eyes": len(sites[size]), "seconds": round(time.monotonic() - started),
                "promise": {"missed": op["missed"], "automatic": op["automatic"]},
                # a promise about misses is one-sided: the test share within the interval or below it
                "promise_holds": bool(new["missed_share"] <= op["missed"]["high"] + 1e-9),
                "new": new, "old": figures(site, scores(site, old_test, out, "old"), old_test, base["old"])}
            print(f"{cell}: {json.dumps(results['cells'][cell])}", flush=True)
            (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
