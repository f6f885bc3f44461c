"""Validation and test per source as well as pooled: the groups, their metrics and the shared thresholds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from training.data import ManifestRow
from training.evaluation import evaluate_predictions
from training.evaluation.by_source import (
    POOLED,
    by_source_summary,
    evaluate_by_source,
    per_source_metrics,
    source_groups,
)


def _rows(sources: Sequence[tuple[str | None, str | None]], labels: np.ndarray) -> list[ManifestRow]:
    return [ManifestRow(Path(f"/{i}.jpg"), 3 if y else 0, str(i), None, i + 2, source=s, copy=c)
            for i, ((s, c), y) in enumerate(zip(sources, labels, strict=True))]


def _case(seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[ManifestRow]]:
    """400 'odir' eyes ranked perfectly, 300 'eyepacs' eyes (two copies) ranked at random: [S=8, N=700]."""
    rng = np.random.default_rng(seed)
    y = (rng.random(700) < 0.3).astype(np.int64)
    centre = np.where(y == 1, 0.8, 0.2)
    centre[400:] = rng.uniform(0.1, 0.9, 300)  # eyepacs: the score ignores the label
    probs = np.clip(centre[None, :] + rng.normal(0, 0.01, (8, 700)), 0.001, 0.999)
    sources = [("odir", None)] * 400 + [("eyepacs", "natural-1024"), ("eyepacs", "stretched-256")] * 150
    return probs, y, _rows(sources, y)


def test_groups_are_each_source_and_each_copy_of_a_source_with_several() -> None:
    _, y, rows = _case()
    groups = source_groups(rows)
    assert list(groups) == ["eyepacs", "eyepacs/natural-1024", "eyepacs/stretched-256", "odir"]
    assert len(groups["odir"]) == 400 and len(groups["eyepacs"]) == 300
    assert len(groups["eyepacs/natural-1024"]) == len(groups["eyepacs/stretched-256"]) == 150
    assert source_groups(_rows([("odir", None)] * 5, y[:5])) == {}  # one source: the pooled report says it all


def test_each_source_gets_its_own_figures_at_the_pooled_thresholds() -> None:
    probs, y, rows = _case()
    pooled = evaluate_predictions(probs, y, n_bootstrap=20, decision_threshold=0.5)
    reports = evaluate_by_source(probs, y, rows, decision_threshold=0.5,
                                 referral_threshold_mi=float(pooled.referral_threshold.threshold), n_bootstrap=20)
    assert reports["odir"].auc > 0.999  # ranked perfectly
    assert abs(reports["eyepacs"].auc - 0.5) < 0.1  # ranked at random
    assert reports["eyepacs"].auc < reports[POOLED].auc < reports["odir"].auc
    assert reports[POOLED].auc == pooled.auc
    assert {r.n_images for r in reports.values()} == {700, 400, 300, 150}
    summary = by_source_summary(reports, probs, y, rows, decision_threshold=0.5,
                                referral_threshold_mi=float(pooled.referral_threshold.threshold))
    for name, row in summary.items():
        assert row["n_referable"] == int(y[np.arange(700) if name == POOLED else source_groups(rows)[name]].sum())
        assert set(row["outcomes"]) >= {"missed_share", "auto_negative_share", "uncertain_share"}
    assert summary["odir"]["outcomes"]["missed_share"] == 0.0  # every referable odir eye is above 0.5
    assert summary["eyepacs"]["outcomes"]["missed_share"] > 0.2  # a random ranking misses many
    one_class = _rows([("odir", None)] * 3 + [("eyepacs", None)] * 3, np.array([1, 0, 1, 0, 0, 0]))
    flat = np.full((2, 6), 0.5)
    assert "eyepacs" not in evaluate_by_source(flat, np.array([1, 0, 1, 0, 0, 0]), one_class, decision_threshold=0.5,
                                               referral_threshold_mi=0.1, n_bootstrap=5)
    counted = by_source_summary({}, flat, np.array([1, 0, 1, 0, 0, 0]), one_class, decision_threshold=0.5,
                                referral_threshold_mi=0.1)
    assert counted["eyepacs"]["n_images"] == 3 and counted["eyepacs"]["n_referable"] == 0  # counted, no AUC


def test_per_epoch_metrics_name_each_group() -> None:
    probs, y, rows = _case()
    metrics = per_source_metrics(probs, y, rows)
    assert metrics["val_n/odir"] == 400 and metrics["val_auc/odir"] is not None and metrics["val_auc/odir"] > 0.999
    p = probs.mean(axis=0)[:400].clip(1e-7, 1 - 1e-7)
    nll = -(y[:400] * np.log(p) + (1 - y[:400]) * np.log(1 - p)).mean()
    assert metrics["val_nll/odir"] is not None and np.isclose(metrics["val_nll/odir"], nll)
    one_class = _rows([("odir", None), ("eyepacs", None), ("eyepacs", None)], np.array([1, 0, 0]))
    assert per_source_metrics(np.full((2, 3), 0.5), np.array([1, 0, 0]), one_class)["val_auc/odir"] is None
