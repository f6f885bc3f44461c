"""One row of the real-eyes Table 1, per source: everything it shows, from its members' saved draws.

A row is a method (one run, or an ensemble of runs whose draws are stacked: ``training.evaluation.ensemble``)
and the uncertainty it refers by (MI, or predictive entropy for a deterministic network and its ensemble).
Every figure is computed from what the runs saved (``eval_val/draws.npz``, ``eval_test/draws.npz``,
``config.json``, ``history.json``), so a row is re-scored from its run directories without any model:

- the referral curves (AUC and accuracy of the kept eyes at 0/10/20/30/50 % referred) and the ECE:
  ``evaluate_predictions``, pooled and for each source's test eyes (``by_source.source_groups``);
- the paired bootstrap of the row's own referral against random referral and against another row (the
  radial one): ``paired_bootstrap`` on the same resampled eyes;
- the screening operating point (at most ``max_missed`` of the referable validation eyes answered "no
  referable DR", as many non-referable eyes answered automatically as possible; deferral by the row's own
  uncertainty): ``screening_operating_point`` on the pooled validation eyes, then ``outcome_shares`` on each
  source's test eyes;
- the uncertainty of ODIR's other-disease eyes against its normal eyes (AUROC, ``ood_auroc``).

The test eyes are matched to their source and category by rebuilding the run's patient split from its
``config.json`` (no image is read) and matching the saved ids (file names).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.table1 import ENTROPY, FRACTIONS, MI
from training.config import TrainConfig
from training.data.manifest import ManifestRow
from training.data.prepare import read_rows, source_split
from training.evaluation import evaluate_predictions, mc_uncertainty
from training.evaluation.by_source import POOLED, source_groups
from training.evaluation.ensemble import DRAWS_FILENAME, SavedDraws, load_draws, stack_members
from training.evaluation.ood import ood_auroc
from training.evaluation.operating_point import outcome_shares, screening_operating_point
from training.evaluation.paired import paired_bootstrap, strategy_arm
from training.evaluation.uncertainty import McUncertainty
from training.finalise import image_ids

__all__ = ["ENTROPY", "FRACTIONS", "MI", "row_differences", "row_metrics", "uncertainty_by_eye"]
OTHER, NORMAL = "other_non_dr", "normal_fundus"


def member_draws(runs_dir: Path, members: Sequence[str], split: str) -> SavedDraws:
    """The row's draws on ``split`` (val or test): one member's, or the members' stacked."""
    return stack_members([load_draws(runs_dir / m / f"eval_{split}" / DRAWS_FILENAME) for m in members])


def split_rows(run_dir: Path, split: str, ids: Sequence[str]) -> list[ManifestRow]:
    """The manifest rows of the run's ``split`` in the order of the saved ``ids`` (the split rebuilt from the
    run's config: the same manifest, fractions, seed and copies give the same patients)."""
    cfg = TrainConfig.load(run_dir / "config.json")
    parts = source_split(read_rows(cfg), cfg)
    rows = parts.val if split == "val" else parts.test
    by_id = dict(zip(image_ids(rows), rows, strict=True))
    missing = [i for i in ids if i not in by_id]
    if missing or len(ids) != len(rows):
        raise ValueError(f"{run_dir}: the saved {split} draws do not match the {split} split rebuilt from its "
                         f"config ({len(ids)} saved, {len(rows)} in the split, e.g. {missing[:3]} unknown)")
    return [by_id[i] for i in ids]


def score_of(unc: McUncertainty, strategy: str) -> np.ndarray:
    return unc.mutual_information if strategy == MI else unc.predictive_entropy  # [N]


def groups_of(rows: Sequence[ManifestRow]) -> dict[str, np.ndarray]:
    """Index arrays: pooled first, then each source (and source/copy) of ``source_groups``."""
    return {POOLED: np.arange(len(rows)), **source_groups(rows)}


def _subset(draws: SavedDraws, idx: np.ndarray) -> SavedDraws:
    return SavedDraws(draws.probs[:, idx], draws.labels[idx], tuple(draws.ids[i] for i in idx))


def _differences(a: SavedDraws, sa: str, b: SavedDraws, sb: str | None, n_bootstrap: int) -> dict[str, Any]:
    """``a`` referring by ``sa`` − ``b`` referring by ``sb`` (None: random), AUC and accuracy of the kept eyes."""
    arm_b = strategy_arm(mc_uncertainty(b.probs), sb or "random", "b")
    res = paired_bootstrap(strategy_arm(mc_uncertainty(a.probs), sa, "a"), arm_b, a.labels, fractions=FRACTIONS,
                           n_bootstrap=n_bootstrap, seed=0)
    return {m: {"difference": list(d.difference), "ci_low": list(d.ci_low), "ci_high": list(d.ci_high)}
            for m, d in res.items()}


def group_metrics(draws: SavedDraws, strategy: str, n_bootstrap: int) -> dict[str, Any]:
    """Referral curves, ECE and the paired difference against random referral, for one group of eyes."""
    report = evaluate_predictions(draws.probs, draws.labels, fractions=FRACTIONS, n_bootstrap=n_bootstrap, seed=0)
    curve = report.curves[strategy]  # type: ignore[index]
    return {"n": int(draws.labels.size), "n_referable": int(draws.labels.sum()), "n_draws": report.n_predictions,
            "auc": list(curve.auc), "auc_se": list(curve.auc_se), "accuracy": list(curve.accuracy),
            "accuracy_se": list(curve.accuracy_se), "ece": report.ece,
            "vs_random": _differences(draws, strategy, draws, None, n_bootstrap)}


def row_metrics(runs_dir: Path, members: Sequence[str], strategy: str, *, n_bootstrap: int,
                max_missed: float = 0.05) -> dict[str, Any]:
    """Everything one row shows, pooled and per source (see the module docstring)."""
    test, val = member_draws(runs_dir, members, "test"), member_draws(runs_dir, members, "val")
    rows = split_rows(runs_dir / members[0], "test", test.ids)
    unc_val, unc_test = mc_uncertainty(val.probs), mc_uncertainty(test.probs)
    point = screening_operating_point(unc_val.probability, score_of(unc_val, strategy), val.labels,
                                      max_missed_share=max_missed)
    groups: dict[str, Any] = {}
    for name, idx in groups_of(rows).items():
        sub = _subset(test, idx)
        entry: dict[str, Any] = (group_metrics(sub, strategy, n_bootstrap) if 0 < sub.labels.sum() < idx.size
                                 else {"n": int(idx.size), "n_referable": int(sub.labels.sum())})
        entry["screening"] = outcome_shares(unc_test.probability[idx], score_of(unc_test, strategy)[idx],
                                            sub.labels, decision_threshold=point.decision_threshold,
                                            referral_threshold_mi=point.referral_threshold_mi)
        groups[name] = entry
    score = score_of(unc_test, strategy)
    category = np.array([r.category or "" for r in rows])
    other_vs_normal = None
    if (category == OTHER).any() and (category == NORMAL).any():
        other_vs_normal = {"auroc": ood_auroc(score[category == NORMAL], score[category == OTHER]),
                           "median_other": float(np.median(score[category == OTHER])),
                           "median_normal": float(np.median(score[category == NORMAL])),
                           "n_other": int((category == OTHER).sum()), "n_normal": int((category == NORMAL).sum())}
    return {"members": list(members), "score": strategy, "groups": groups,
            "operating_point_val": point.as_dict(), "other_vs_normal": other_vs_normal}


def row_differences(runs_dir: Path, members: Sequence[str], strategy: str, base_members: Sequence[str],
                    base_strategy: str, *, n_bootstrap: int) -> dict[str, Any]:
    """This row − the base row (each referring by its own uncertainty), pooled and per source, paired on the
    same test eyes (the members' ids are aligned)."""
    own = member_draws(runs_dir, members, "test")
    both = stack_members([own, member_draws(runs_dir, base_members, "test")])  # [S_a + S_b, N], own's order
    n_a = own.probs.shape[0]
    a = SavedDraws(both.probs[:n_a], both.labels, both.ids)
    b = SavedDraws(both.probs[n_a:], both.labels, both.ids)
    rows = split_rows(runs_dir / members[0], "test", both.ids)
    out: dict[str, Any] = {}
    for name, idx in groups_of(rows).items():
        if 0 < both.labels[idx].sum() < idx.size:
            out[name] = _differences(_subset(a, idx), strategy, _subset(b, idx), base_strategy, n_bootstrap)
    return out


def uncertainty_by_eye(runs_dir: Path, members: Sequence[str], strategy: str) -> dict[str, np.ndarray]:
    """p̄, the row's uncertainty, the label and the source/category of every test eye (for the figures)."""
    test = member_draws(runs_dir, members, "test")
    rows = split_rows(runs_dir / members[0], "test", test.ids)
    unc = mc_uncertainty(test.probs)
    return {"probability": unc.probability, "score": score_of(unc, strategy), "label": test.labels,
            "source": np.array([r.source or "" for r in rows]), "category": np.array([r.category or "" for r in rows])}
