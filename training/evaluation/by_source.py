"""Validation and test reported per source as well as pooled.

A model trained on several programmes can be good on the pooled images and poor on one programme: the pooled
AUC mixes the programmes' base rates and image looks. So every figure the pooled evaluation gives is also
given per source (the rows' ``source``), and per ``source/copy`` where a source's images come in more than one
copy (EyePACS's natural and contrast-stretched photographs), all at the thresholds set on the pooled
validation images. A source with one class only (no referable eye, say) has no AUC: it reads ``None``.

Example::

    summary = report_by_source(probs, labels, rows, Path("runs/x/eval_test/by_source.json"),
                               decision_threshold=0.07, referral_threshold_mi=1e-3)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.io.atomic import atomic_write_bytes
from training.data.manifest import ManifestRow
from training.evaluation.evaluate import evaluate_predictions
from training.evaluation.operating_point import outcome_shares
from training.evaluation.referral import mann_whitney_auc
from training.evaluation.report import EvaluationReport
from training.evaluation.uncertainty import mc_uncertainty

POOLED = "pooled"


def source_groups(rows: Sequence[ManifestRow]) -> dict[str, np.ndarray]:
    """Index arrays of each source (``unnamed`` for rows without one) and of each ``source/copy`` of a source
    with more than one copy among ``rows``; empty when every row has the same source and copy."""
    keys = [(row.source or "unnamed", row.copy) for row in rows]
    groups: dict[str, list[int]] = {}
    for i, (source, _) in enumerate(keys):
        groups.setdefault(source, []).append(i)
    for source in sorted({s for s, _ in keys}):
        copies = sorted({c or "" for s, c in keys if s == source})
        if len(copies) > 1:
            for i, (s, c) in enumerate(keys):
                if s == source:
                    groups.setdefault(f"{source}/{c or 'unnamed'}", []).append(i)
    if len(groups) == 1:
        return {}
    return {name: np.asarray(idx, dtype=np.int64) for name, idx in sorted(groups.items())}


def per_source_metrics(probs: np.ndarray, labels: np.ndarray, rows: Sequence[ManifestRow],
                       prefix: str = "val") -> dict[str, float | None]:
    """``{prefix}_auc/<group>``, ``{prefix}_nll/<group>`` and ``{prefix}_n/<group>`` for each group of
    :func:`source_groups` (the loop's per-epoch validation row); ``probs`` ``[S, N]``, ``labels`` ``[N]``."""
    out: dict[str, float | None] = {}
    p = np.asarray(probs, dtype=np.float64).mean(axis=0).clip(1e-7, 1 - 1e-7)  # [N]
    y = np.asarray(labels, dtype=np.float64).ravel()
    for name, idx in source_groups(rows).items():
        pg, yg = p[idx], y[idx]
        out[f"{prefix}_nll/{name}"] = float(-(yg * np.log(pg) + (1 - yg) * np.log(1 - pg)).mean())
        auc = mann_whitney_auc(yg.astype(np.int64), pg)
        out[f"{prefix}_auc/{name}"] = None if np.isnan(auc) else float(auc)
        out[f"{prefix}_n/{name}"] = float(len(idx))
    return out


def evaluate_by_source(probs: np.ndarray, labels: np.ndarray, rows: Sequence[ManifestRow], *,
                       decision_threshold: float, referral_threshold_mi: float, n_bootstrap: int = 200,
                       seed: int = 0, target_referral_rate: float = 0.2) -> dict[str, EvaluationReport]:
    """``evaluate_predictions`` of the pooled images and of each group of :func:`source_groups`, every one at
    the given thresholds (set on the pooled validation images); ``probs`` ``[S, N]`` in ``rows``' order. A group
    holding one class only has no AUC and no report here (:func:`by_source_summary` still counts it)."""
    probs, labels = np.asarray(probs), np.asarray(labels)
    groups = {POOLED: np.arange(len(rows)), **source_groups(rows)}
    return {name: evaluate_predictions(probs[:, idx], labels[idx], n_bootstrap=n_bootstrap, seed=seed,
                                       decision_threshold=decision_threshold,
                                       target_referral_rate=target_referral_rate,
                                       referral_threshold_mi=referral_threshold_mi)
            for name, idx in groups.items() if 0 < labels[idx].sum() < len(idx)}


def by_source_summary(reports: dict[str, EvaluationReport], probs: np.ndarray, labels: np.ndarray,
                      rows: Sequence[ManifestRow], *, decision_threshold: float,
                      referral_threshold_mi: float) -> dict[str, dict[str, Any]]:
    """Per group (pooled first): the metrics ``calibration.json`` keeps (``n_images``, AUC, accuracy, ECE,
    referral curves; only ``n_images`` for a one-class group), the referable count, and the screening outcome
    shares at the given thresholds."""
    unc = mc_uncertainty(np.asarray(probs))
    y = np.asarray(labels).ravel()
    groups = {POOLED: np.arange(len(rows)), **source_groups(rows)}
    out: dict[str, dict[str, Any]] = {}
    for name, idx in groups.items():
        report = reports.get(name)
        metrics = report.calibration_summary()["validation"] if report is not None else {"n_images": len(idx)}
        shares = outcome_shares(unc.probability[idx], unc.mutual_information[idx], y[idx],
                                decision_threshold=decision_threshold, referral_threshold_mi=referral_threshold_mi)
        out[name] = {**metrics, "n_referable": int(y[idx].sum()), "outcomes": shares}
    return out


def write_by_source(summary: dict[str, dict[str, Any]], path: Path) -> Path:
    """Write :func:`by_source_summary`'s dict as JSON (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(summary, indent=2) + "\n").encode())
    return path


def report_by_source(probs: np.ndarray, labels: np.ndarray, rows: Sequence[ManifestRow], path: Path, *,
                     decision_threshold: float, referral_threshold_mi: float, n_bootstrap: int = 200, seed: int = 0,
                     target_referral_rate: float = 0.2) -> dict[str, dict[str, Any]] | None:
    """:func:`evaluate_by_source` and :func:`by_source_summary` at the given thresholds, written to ``path``;
    None (nothing written) when ``rows`` hold one source and one copy."""
    if not source_groups(rows):
        return None
    thresholds = {"decision_threshold": decision_threshold, "referral_threshold_mi": referral_threshold_mi}
    reports = evaluate_by_source(probs, labels, rows, n_bootstrap=n_bootstrap, seed=seed,
                                 target_referral_rate=target_referral_rate, **thresholds)
    summary = by_source_summary(reports, probs, labels, rows, **thresholds)
    write_by_source(summary, path)
    return summary
