"""Validation rules for the decision threshold, applied to test eyes: how many referable test eyes each answers
``no_referable_dr`` against the product's 5 % target, and how many non-referable eyes it answers automatically
(benchmarks/operating_rules.py scores the eyes; docs/results-real-eyes.md, section 3, has the figures).

- ``point ≤ X %``: :func:`training.evaluation.operating_point.screening_operating_point` with
  ``max_missed_share`` X;
- ``upper95 ≤ 5 %``: the largest validation miss share whose one-sided 95 % Clopper-Pearson bound is at most the
  target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import binomtest

from training.evaluation.operating_point import clopper_pearson_upper, outcome_shares, screening_operating_point

TARGET = 0.05  # the product's bound on referable test eyes answered no_referable_dr


@dataclass(frozen=True)
class Eyes:
    """p̄, MI (nats), label (0/1) and source of a set of eyes, each ``[N]``."""

    probability: np.ndarray
    mutual_information: np.ndarray
    label: np.ndarray
    source: np.ndarray

    def where(self, mask: np.ndarray) -> Eyes:
        return Eyes(self.probability[mask], self.mutual_information[mask], self.label[mask], self.source[mask])


def upper_bound_share(n_referable: int, target: float = TARGET) -> float:
    """The largest miss share k / n whose one-sided 95 % upper bound is at most ``target`` (0 when none is)."""
    k = 0
    while k + 1 <= n_referable and clopper_pearson_upper(k + 1, n_referable) <= target:
        k += 1
    return k / n_referable if clopper_pearson_upper(k, n_referable) <= target else 0.0


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson 95 % interval of a share k / n (nan, nan when n is 0)."""
    if n == 0:
        return float("nan"), float("nan")
    ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
    return float(ci.low), float(ci.high)


def rule_rows(val: Eyes, test: Eyes, point_shares: Sequence[float] = (0.03, 0.02, 0.01)) -> list[dict[str, Any]]:
    """One row per rule: the thresholds chosen on ``val`` (pooled) and what they do on ``test``, pooled and per
    source."""
    n_pos = int((val.label == 1).sum())
    rules = [(f"point ≤ {s:.0%}", s) for s in point_shares]
    rules.append((f"upper95 ≤ {TARGET:.0%}", upper_bound_share(n_pos)))
    rows = []
    for name, share in rules:
        op = screening_operating_point(val.probability, val.mutual_information, val.label, max_missed_share=share)
        row: dict[str, Any] = {"rule": name, "max_missed_share": share, "decision_threshold": op.decision_threshold,
                               "referral_threshold_mi": op.referral_threshold_mi,
                               "val_missed_share": op.missed_share, "val_missed_upper95": op.missed_share_upper95,
                               "val_auto_negative_share": op.auto_negative_share, "test": {}}
        for source in ["pooled", *sorted(set(test.source.tolist()))]:
            part = test if source == "pooled" else test.where(test.source == source)
            s = outcome_shares(part.probability, part.mutual_information, part.label,
                               decision_threshold=op.decision_threshold, referral_threshold_mi=op.referral_threshold_mi)
            n_ref = int((part.label == 1).sum())
            row["test"][source] = {**s, "n_referable": n_ref, "missed_ci95": wilson(int(s["missed"]), n_ref)}
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    sources = list(rows[0]["test"])
    head = ["rule", "threshold", "validation: missed / auto"] + [f"test {s}: missed (95 % CI) / auto" for s in sources]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["rule"], f"{r['decision_threshold']:.4f}",
                 f"{r['val_missed_share']:.1%} (≤ {r['val_missed_upper95']:.1%}) / {r['val_auto_negative_share']:.1%}"]
        for s in sources:
            t = r["test"][s]
            lo, hi = t["missed_ci95"]
            cells.append(f"{t['missed']} of {t['n_referable']} = {t['missed_share']:.1%} ({lo:.1%}-{hi:.1%}) / "
                         f"{t['auto_negative_share']:.1%}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
