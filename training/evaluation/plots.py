"""PNG plots of an evaluation report (referral curves, reliability diagram, MI histogram) and of a method
comparison (seed 001 Table 1).

Figures are built with ``matplotlib.figure.Figure`` and the Agg canvas directly (no ``pyplot``), so
plotting never touches global backend state and works on headless machines and in threads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from training.evaluation.report import EvaluationReport

STRATEGY_STYLE: dict[str, tuple[str, str, str]] = {  # label, colour, marker
    "mutual_information": ("Mutual information (epistemic)", "#1f77b4", "o"),
    "predictive_entropy": ("Predictive entropy (total)", "#ff7f0e", "s"),
    "random": ("Random (baseline)", "#7f7f7f", "^"),
}
DPI = 120


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI, format="png")


def _threshold_line(ax: Axes, report: EvaluationReport) -> None:
    rate = report.referral_threshold.achieved_rate * 100
    ax.axvline(rate, color="#2ca02c", linestyle=":", linewidth=1.5,
               label=f"MI threshold refers {rate:.1f} %")


def plot_referral_curves(report: EvaluationReport, path: str | Path) -> Path:
    """AUC and accuracy on retained images vs % referred, one line per strategy, ±1 bootstrap SE bars."""
    fig = Figure(figsize=(11, 5.0), layout="constrained")
    ax_auc, ax_acc = fig.subplots(1, 2)
    for strategy, curve in report.curves.items():
        label, colour, marker = STRATEGY_STYLE.get(strategy, (strategy, None, "o"))
        x = np.asarray(curve.fractions) * 100  # [F] percent referred
        for ax, y, se in ((ax_auc, curve.auc, curve.auc_se), (ax_acc, curve.accuracy, curve.accuracy_se)):
            ax.errorbar(x, y, yerr=np.nan_to_num(np.asarray(se)), label=label, color=colour,
                        marker=marker, markersize=4, capsize=3, linewidth=1.5)
    for ax, name in ((ax_auc, "ROC-AUC"), (ax_acc, f"Accuracy (threshold {report.decision_threshold:g})")):
        _threshold_line(ax, report)
        ax.set_xlabel("Images referred to an expert (%)")
        ax.set_ylabel(f"{name} on retained images")
        ax.set_title(f"{name.split(' (')[0]} vs referral")
        ax.grid(True, alpha=0.3)
    handles, labels = ax_auc.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=9, frameon=False)
    fig.suptitle(
        f"Referral by uncertainty — N = {report.n_images} images ({report.n_positive} referable), "
        f"S = {report.n_predictions} predictions per image; error bars ±1 SE "
        f"({report.n_bootstrap} bootstrap resamples)",
        fontsize=10,
    )
    out = Path(path)
    _save(fig, out)
    return out


def plot_reliability(report: EvaluationReport, path: str | Path) -> Path:
    """Reliability diagram: observed frequency of referable DR vs predicted probability, with bin counts."""
    rel = report.reliability
    edges = np.asarray(rel.edges)  # [n_bins + 1]
    width = np.diff(edges)  # [n_bins]
    count = np.asarray(rel.count)
    freq = np.asarray(rel.observed_frequency)
    conf = np.asarray(rel.mean_predicted)
    fig = Figure(figsize=(6, 6.6), layout="constrained")
    ax, ax_n = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    filled = count > 0
    ax.bar(edges[:-1][filled], freq[filled], width=width[filled], align="edge", color="#1f77b4",
           alpha=0.75, edgecolor="white", label="Observed frequency")
    ax.bar(edges[:-1][filled], conf[filled] - freq[filled], bottom=freq[filled], width=width[filled],
           align="edge", color="#d62728", alpha=0.25, edgecolor="#d62728", hatch="//",
           label="Gap to mean predicted")
    ax.plot([0, 1], [0, 1], color="black", linestyle="--", linewidth=1, label="Perfect calibration")
    ax.plot(conf[filled], freq[filled], "o", color="#1f77b4", markersize=4)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("Fraction referable (observed)")
    ax.set_title(f"Reliability diagram — ECE = {report.ece:.3f} ({rel.n_bins} equal-width bins)")
    ax.legend(loc="upper left", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax_n.bar(edges[:-1], count, width=width, align="edge", color="#7f7f7f", edgecolor="white")
    ax_n.set_xlabel("Predicted probability of referable DR (mean over MC samples)")
    ax_n.set_ylabel("Images")
    ax_n.grid(True, alpha=0.3)
    out = Path(path)
    _save(fig, out)
    return out


def plot_mi_histogram(report: EvaluationReport, path: str | Path) -> Path:
    """Distribution of mutual information for correctly vs incorrectly classified images (each sums to 1)."""
    h = report.mi_histogram
    edges = np.asarray(h.edges)
    fig = Figure(figsize=(7, 4.4), layout="constrained")
    ax = fig.subplots()
    for counts, label, colour, mean in (
        (h.count_correct, "Correct", "#1f77b4", report.mean_mi_correct),
        (h.count_incorrect, "Incorrect", "#d62728", report.mean_mi_incorrect),
    ):
        c = np.asarray(counts, dtype=np.float64)
        total = int(c.sum())
        share = c / total if total else c
        ax.stairs(share, edges, fill=True, alpha=0.35, color=colour,
                  label=f"{label} (n = {total}, mean MI = {mean:.3g} nat)")
        ax.stairs(share, edges, color=colour, linewidth=1.5)
    thr = report.referral_threshold
    ax.axvline(thr.threshold, color="#2ca02c", linestyle=":", linewidth=1.5,
               label=f"Referral threshold {thr.threshold:.3g} nat ({thr.achieved_rate * 100:.1f} % referred)")
    ax.set_xlabel("Mutual information (nat)")
    ax.set_ylabel("Share of images in group")
    ax.set_title(f"Epistemic uncertainty by outcome (decision threshold {report.decision_threshold:g})")
    ax.legend(loc="best", fontsize=9)
    ax.grid(True, alpha=0.3)
    out = Path(path)
    _save(fig, out)
    return out


def plot_method_comparison(rows: Mapping[str, Mapping[str, Any]], fractions: Sequence[float], path: str | Path,
                           title: str) -> Path:
    """Seed 001 Table 1 as a figure: AUC and accuracy on the retained images vs % referred, one line per
    method (±1 bootstrap SE), and each method's OOD AUROC (uncertainty on real photographs vs synthetic test
    images; 0.5 = no signal). ``rows[label]`` holds ``auc``, ``auc_se``, ``accuracy``, ``accuracy_se`` (one
    value per fraction) and ``ood_auroc``, as ``benchmarks/table1.py`` writes them to results.json."""
    x = np.asarray(fractions, dtype=np.float64) * 100  # [F] percent referred
    fig = Figure(figsize=(15, 5.0), layout="constrained")
    ax_auc, ax_acc, ax_ood = fig.subplots(1, 3, width_ratios=(1, 1, 0.8))
    colours = [f"C{i}" for i in range(len(rows))]
    for (label, row), colour in zip(rows.items(), colours, strict=True):
        for ax, key in ((ax_auc, "auc"), (ax_acc, "accuracy")):
            y, se = np.asarray(row[key], np.float64), np.asarray(row[f"{key}_se"], np.float64)  # [F], [F]
            if y.shape != x.shape:
                raise ValueError(f"{label}: {key} has {y.size} values for {x.size} fractions")
            ax.errorbar(x, y, yerr=np.nan_to_num(se), label=label, color=colour, marker="o", markersize=4,
                        capsize=3, linewidth=1.5)
    for ax, name in ((ax_auc, "ROC-AUC"), (ax_acc, "Accuracy")):
        ax.set_xlabel("Test images referred by uncertainty (%)")
        ax.set_ylabel(f"{name} on retained images")
        ax.set_title(f"{name} vs referral")
        ax.grid(True, alpha=0.3)
    labels = list(rows)
    ood = [float(rows[k]["ood_auroc"]) for k in labels]
    ax_ood.barh(np.arange(len(labels)), ood, color=colours)
    ax_ood.axvline(0.5, color="black", linestyle="--", linewidth=1, label="no signal")
    ax_ood.set_yticks(np.arange(len(labels)), labels, fontsize=8)
    ax_ood.invert_yaxis()
    ax_ood.set_xlim(0, 1)
    ax_ood.set_xlabel("AUROC: real photographs vs synthetic test images")
    ax_ood.set_title("Out-of-distribution signal")
    ax_ood.grid(True, axis="x", alpha=0.3)
    handles, names = ax_auc.get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=min(len(names), 4), fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=10)
    out = Path(path)
    _save(fig, out)
    return out
