"""What a screening programme sees: outcomes per eye, per grade, per category and per patient.

Takes one record per photograph (its p̄ and MI from the serving draws, whether the quality gate passed it,
the outcome the service answered, and the truth: grade, category, patient, eye) and computes the figures
a programme judges a screening product by:

- AUC with a bootstrap 95 % interval on the gradable eyes;
- the four outcomes by truth: a referable eye is **missed** only when answered ``no_referable_dr``
  (deferred or ungradable eyes go to a human), and the workload saving is the share of non-referable
  eyes answered ``no_referable_dr``;
- outcomes by DR grade and the referral rate among eyes with another eye disease (false positives of a
  DR screen);
- whether MI flags eyes unlike the training data: MI on other-disease eyes against normal eyes (AUROC);
- per patient (a patient is referable if either eye is), with the visit's outcome from the exam rule
  passed in (``exam_rule``), so the figure is the one the clinic acts on.

Pure numpy; the caller scores the photographs (``benchmarks/screening_eval.py`` runs the service's own
decode, quality gate and outcome rule).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

OUTCOMES = ("refer_referable_dr", "grader_review_uncertain", "retake_ungradable", "no_referable_dr")
NO_REFERABLE = "no_referable_dr"


@dataclass(frozen=True)
class EyeRecord:
    """One scored photograph and its truth (``grade`` None: unknown, e.g. an ungraded set)."""

    image: str
    probability: float
    mutual_information: float
    gradable: bool
    outcome: str
    grade: int | None = None
    category: str | None = None
    patient: str | None = None
    eye: str | None = None

    @property
    def referable(self) -> bool | None:
        return None if self.grade is None else self.grade >= 2


ExamRule = Callable[[dict[str, list[str]]], str]  # {eye: [photograph outcomes]} -> the visit's outcome


def bootstrap_auc(labels: np.ndarray, scores: np.ndarray, *, n_bootstrap: int = 1000,
                  seed: int = 0) -> tuple[float, float, float]:
    """AUC and its 95 % percentile bootstrap interval (resamples holding one class are skipped)."""
    auc = float(roc_auc_score(labels, scores))
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_bootstrap):
        idx = rng.integers(0, labels.size, labels.size)
        if 0 < labels[idx].sum() < idx.size:
            values.append(roc_auc_score(labels[idx], scores[idx]))
    low, high = np.percentile(values, [2.5, 97.5]) if values else (float("nan"), float("nan"))
    return auc, float(low), float(high)


def outcome_counts(records: Sequence[EyeRecord]) -> dict[str, int]:
    counts = Counter(r.outcome for r in records)
    return {o: int(counts.get(o, 0)) for o in OUTCOMES}


def _shares(records: Sequence[EyeRecord]) -> dict[str, float]:
    n = max(len(records), 1)
    return {o: c / n for o, c in outcome_counts(records).items()}


def screening_summary(records: Sequence[EyeRecord], *, exam_rule: ExamRule | None = None,
                      n_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """All figures of the module docstring for ``records`` (a JSON-ready dict)."""
    graded = [r for r in records if r.referable is not None]
    out: dict[str, Any] = {"n_images": len(records), "n_gradable": sum(r.gradable for r in records),
                           "outcomes": outcome_counts(records)}
    cats = sorted({r.category for r in records if r.category})
    out["gradable_by_category"] = {c: _gradable_share([r for r in records if r.category == c]) for c in cats}
    if not graded:
        mi = np.array([r.mutual_information for r in records])
        out["mi_median"] = float(np.median(mi)) if mi.size else float("nan")
        return out
    pos = [r for r in graded if r.referable]
    neg = [r for r in graded if not r.referable]
    out["n_referable"], out["n_non_referable"] = len(pos), len(neg)
    ok = [r for r in graded if r.gradable]
    y = np.array([int(bool(r.referable)) for r in ok])
    if 0 < y.sum() < y.size:
        auc, low, high = bootstrap_auc(y, np.array([r.probability for r in ok]), n_bootstrap=n_bootstrap, seed=seed)
        out["auc_gradable"] = {"auc": auc, "ci_low": low, "ci_high": high, "n": int(y.size)}
    out["outcomes_referable"] = _shares(pos)
    out["outcomes_non_referable"] = _shares(neg)
    out["missed_share"] = out["outcomes_referable"][NO_REFERABLE]  # referable eyes answered no_referable_dr
    out["auto_negative_share"] = out["outcomes_non_referable"][NO_REFERABLE]
    out["by_grade"] = {str(g): {"n": len(sel), **_shares(sel)}
                       for g in range(5) if (sel := [r for r in graded if r.grade == g])}
    by_cat = {c: [r for r in graded if r.category == c] for c in cats}
    out["by_category"] = {c: {"n": len(sel), **_shares(sel)} for c, sel in by_cat.items()}
    out["mi_other_vs_normal"] = _mi_other_vs_normal(records)
    if exam_rule is not None and any(r.patient for r in graded):
        out["per_patient"] = per_patient(graded, exam_rule)
    return out


def _gradable_share(records: Sequence[EyeRecord]) -> dict[str, float]:
    return {"n": len(records), "gradable": sum(r.gradable for r in records),
            "share": sum(r.gradable for r in records) / max(len(records), 1)}


def _mi_other_vs_normal(records: Sequence[EyeRecord]) -> dict[str, float] | None:
    other = [r.mutual_information for r in records if r.category == "other_non_dr" and r.gradable]
    normal = [r.mutual_information for r in records if r.category == "normal_fundus" and r.gradable]
    if not other or not normal:
        return None
    y = np.r_[np.ones(len(other)), np.zeros(len(normal))]
    return {"median_other": float(np.median(other)), "median_normal": float(np.median(normal)),
            "auroc": float(roc_auc_score(y, np.r_[other, normal])), "n_other": len(other), "n_normal": len(normal)}


def per_patient(records: Sequence[EyeRecord], exam_rule: ExamRule) -> dict[str, Any]:
    """Patients (referable if either eye is) and the outcome of their visit under ``exam_rule``."""
    visits: dict[str, list[EyeRecord]] = defaultdict(list)
    for r in records:
        visits[str(r.patient)].append(r)
    pos: list[str] = []
    neg: list[str] = []
    for eyes in visits.values():
        by_eye: dict[str, list[str]] = defaultdict(list)
        for r in eyes:
            by_eye[r.eye or "unknown"].append(r.outcome)
        outcome = exam_rule(dict(by_eye))
        (pos if any(r.referable for r in eyes) else neg).append(outcome)
    return {
        "n_patients": len(visits), "n_referable": len(pos), "n_non_referable": len(neg),
        "missed_share": sum(o == NO_REFERABLE for o in pos) / max(len(pos), 1),
        "auto_negative_share": sum(o == NO_REFERABLE for o in neg) / max(len(neg), 1),
        "outcomes_referable": {o: sum(x == o for x in pos) for o in OUTCOMES},
        "outcomes_non_referable": {o: sum(x == o for x in neg) for o in OUTCOMES},
    }
