"""End-of-job summary: counts by screening outcome (failed files included), by deferral reason,
distributions of probability and MI, and a plot; every form is titled with the model that scored.

Outcome counts are over every input row: the four screening outcomes of ``models.outcome.decision`` plus
``failed`` (rows with an error: unreadable, not an image, ...), so they always add up to the inputs.
Deferral reasons and MI are over the scored images; the probability distribution only over the *graded*
ones (an ungradable image's probability is not a finding). The thresholds shown come from the model's
calibration (as reported in the ``POST /predict`` body), so the plot marks the same thresholds the
outcome used.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from models.outcome.decision import OUTCOME_TEXT, ScreeningOutcome, is_uncertain
from service.batch.rows import Row, error_kind

FAILED = "failed"  # the by-outcome key of rows that were not scored (see errors_by_type for why)
OUTCOME_ORDER: tuple[str, ...] = (
    ScreeningOutcome.REFER_REFERABLE_DR.value,
    ScreeningOutcome.GRADER_REVIEW_UNCERTAIN.value,
    ScreeningOutcome.RETAKE_UNGRADABLE.value,
    ScreeningOutcome.NO_REFERABLE_DR.value,
    FAILED,
)
OUTCOME_COLOURS: dict[str, str] = {  # same meaning as the clinician page: referable is never green
    ScreeningOutcome.REFER_REFERABLE_DR.value: "#b91c1c",
    ScreeningOutcome.GRADER_REVIEW_UNCERTAIN.value: "#b45309",
    ScreeningOutcome.RETAKE_UNGRADABLE.value: "#6d28d9",
    ScreeningOutcome.NO_REFERABLE_DR.value: "#15803d",
    FAILED: "#4b5563",
}

QUANTILES: tuple[float, ...] = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)


@dataclass
class SummaryBuilder:
    """Accumulates rows (streamed during output assembly) into a summary dictionary."""

    decision_threshold: float | None = None
    referral_threshold_mi: float | None = None
    model: dict[str, Any] = field(default_factory=dict)
    total: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    labels: Counter[str] = field(default_factory=Counter)
    referred: int = 0
    ungradable: int = 0
    probabilities: list[float] = field(default_factory=list)  # graded images only
    mutual_information: list[float] = field(default_factory=list)  # every scored image

    def add(self, row: Row) -> Row:
        """Count one row (returned unchanged, so this can sit in a generator pipeline)."""
        self.total += 1
        kind = error_kind(row)
        if kind is not None:
            self.errors[kind] += 1
            self.outcomes[FAILED] += 1
            return row
        self.outcomes[str(row["outcome"])] += 1
        if row["gradable"]:
            self.probabilities.append(float(row["referable_dr_probability"]))
            self.labels[str(row["label"])] += 1
        self.mutual_information.append(float(row["mutual_information"]))
        self.ungradable += 0 if row["gradable"] else 1
        if row["refer_to_expert"]:
            self.referred += 1
        self.reasons.update(row["referral_reasons"])
        return row

    def add_all(self, rows: Iterable[Row]) -> SummaryBuilder:
        """Count every row of ``rows``."""
        for row in rows:
            self.add(row)
        return self

    def build(self) -> dict[str, Any]:
        """The summary as a JSON-ready dictionary."""
        scored = len(self.mutual_information)

        def rate(n: int) -> float | None:
            return n / scored if scored else None

        return {
            "title": summary_title(self.model),
            "model": self.model,
            "outcomes": {
                key: {
                    "count": self.outcomes.get(key, 0),
                    "share_of_inputs": self.outcomes.get(key, 0) / self.total if self.total else None,
                    "meaning": OUTCOME_TEXT[ScreeningOutcome(key)] if key != FAILED else "not scored: see errors",
                }
                for key in OUTCOME_ORDER
            },
            "counts": {
                "inputs": self.total,
                "scored": scored,
                "errors": sum(self.errors.values()),
                "errors_by_type": dict(sorted(self.errors.items())),
                "ungradable": self.ungradable,
                "by_label_graded": dict(sorted(self.labels.items())),
            },
            # refer_to_expert: the model deferred the image to a human. NOT the referral decision (see
            # "outcomes"), hence not called "referral" here.
            "deferred_to_human": {
                "count": self.referred,
                "rate": rate(self.referred),
                "by_reason": {k: {"count": v, "rate": rate(v)} for k, v in sorted(self.reasons.items())},
                "referral_threshold_mi": self.referral_threshold_mi,
                "decision_threshold": self.decision_threshold,
            },
            "distributions": {
                "referable_dr_probability": _describe(self.probabilities),
                "mutual_information": _describe(self.mutual_information),
            },
        }


def _describe(values: list[float]) -> dict[str, float] | None:
    """Mean and quantiles (q00 = min ... q100 = max) of ``values``; ``None`` when empty."""
    if not values:
        return None
    arr = np.asarray(values, dtype=np.float64)
    out = {"mean": float(arr.mean())}
    out.update({f"q{round(q * 100):02d}": float(v) for q, v in zip(QUANTILES, np.quantile(arr, QUANTILES),
                                                                   strict=True)})
    return out


def summary_title(model: dict[str, Any]) -> str:
    """"Screening outcomes - model <name> <version> (sha256 <12 hex>)", or without a model when unknown."""
    if not model:
        return "Screening outcomes"
    return (f"Screening outcomes - model {model.get('name', '?')} {model.get('version', '?')} "
            f"(sha256 {str(model.get('sha256', ''))[:12]})")


def format_summary(summary: dict[str, Any]) -> str:
    """A few human lines for the terminal: the outcome table first, then reasons and distributions."""
    counts, referral = summary["counts"], summary["deferred_to_human"]
    lines = [summary["title"], f"inputs {counts['inputs']}  scored {counts['scored']}  failed {counts['errors']}"]
    for key, entry in summary["outcomes"].items():
        share = "" if entry["share_of_inputs"] is None else f" ({entry['share_of_inputs']:.1%})"
        lines.append(f"  {key}: {entry['count']}{share}  {entry['meaning']}")
        if key == FAILED:
            lines.extend(f"    {kind}: {n}" for kind, n in counts["errors_by_type"].items())
    if referral["rate"] is not None:
        lines.append(f"deferred to a human (refer_to_expert): {referral['count']} "
                     f"({referral['rate']:.1%} of scored); by reason:")
        for reason, entry in referral["by_reason"].items():
            lines.append(f"  {reason}: {entry['count']} ({entry['rate']:.1%})")
    exams = summary.get("exams")
    if exams:
        lines.append(f"exams (patient visits): {exams['count']}; by exam outcome:")
        lines.extend(f"  {key}: {n}" for key, n in exams["by_outcome"].items())
    for name, dist in summary["distributions"].items():
        if dist:
            label = f"{name} (graded images)" if name == "referable_dr_probability" else name
            lines.append(f"{label}: median {dist['q50']:.4g}  5-95% [{dist['q05']:.4g}, {dist['q95']:.4g}]"
                         f"  mean {dist['mean']:.4g}")
    return "\n".join(lines)


def write_summary_json(path: Path, summary: dict[str, Any]) -> None:
    """Write the summary JSON (pretty, stable key order)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def plot_summary(path: Path, builder: SummaryBuilder, *, bins: int = 40) -> None:
    """PNG titled with the model: outcome counts (failed included), and histograms of the graded images'
    probability (decision threshold marked) and of MI (calibrated threshold marked)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 4.4), dpi=100)
    FigureCanvasAgg(fig)
    ax_o, ax_p, ax_mi = fig.subplots(1, 3)
    fig.suptitle(summary_title(builder.model))
    counts = [builder.outcomes.get(k, 0) for k in OUTCOME_ORDER]
    bars = ax_o.barh(list(OUTCOME_ORDER)[::-1], counts[::-1], color=[OUTCOME_COLOURS[k] for k in OUTCOME_ORDER][::-1])
    ax_o.bar_label(bars, padding=2)
    ax_o.set_xlabel("images")
    ax_o.set_title(f"Screening outcome (n={builder.total})")
    ax_o.set_xlim(0, max([*counts, 1]) * 1.2)
    n = len(builder.probabilities)
    ax_p.hist(builder.probabilities, bins=bins, range=(0.0, 1.0), color="#4477aa")
    ax_p.set_xlabel("referable-DR probability")
    ax_p.set_ylabel("images")
    ax_p.set_title(f"Probability, graded images (n={n})")
    if builder.decision_threshold is not None:
        ax_p.axvline(builder.decision_threshold, color="black", linestyle="--",
                     label=f"decision threshold {builder.decision_threshold:.3g}")
        ax_p.legend(loc="best", fontsize="small", framealpha=0.9)
    # MI lives in [0, ln 2] but is usually far below it: zoom to the data and the threshold.
    mi_top = max([*builder.mutual_information, builder.referral_threshold_mi or 0.0, 1e-6]) * 1.1
    ax_mi.hist(builder.mutual_information, bins=bins, range=(0.0, min(mi_top, float(np.log(2.0)))),
               color="#ee6677")
    ax_mi.set_xlabel("mutual information (nat)")
    ax_mi.set_title("Epistemic uncertainty (MI)")
    if builder.referral_threshold_mi is not None:
        referred = int(is_uncertain(np.asarray(builder.mutual_information, dtype=np.float64),
                                    builder.referral_threshold_mi).sum())
        ax_mi.axvline(builder.referral_threshold_mi, color="black", linestyle="--",
                      label=f"calibrated MI threshold {builder.referral_threshold_mi:.3g} ({referred} above)")
        ax_mi.legend(loc="best", fontsize="small", framealpha=0.9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
