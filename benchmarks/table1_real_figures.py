"""The figures of the real-eyes Table 1: referral curves per source, uncertainty against p̄, ODIR's
other-disease eyes against its normal eyes, and the posterior-width trajectories (``training.trajectories``).

Each takes what ``table1_real_rows`` computed (or the runs' histories) and writes one small PNG.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from training.evaluation.by_source import POOLED
from training.trajectories import load_history, plot_runs

DPI = 80


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path


def plot_referral(rows: Mapping[str, Mapping[str, Any]], fractions: Sequence[float], path: Path, title: str) -> Path:
    """AUC of the kept test eyes against % referred by each row's own uncertainty (±1 bootstrap SE), one panel
    per group of eyes (pooled, then each source)."""
    names = list(next(iter(rows.values()))["groups"])
    fig = Figure(figsize=(5 * len(names), 4.2), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(names), sharey=False))
    x = np.asarray(fractions) * 100  # [F]
    for ax, group in zip(axes, names, strict=True):
        for k, (label, row) in enumerate(rows.items()):
            g = row["groups"].get(group, {})
            if "auc" in g:
                ax.errorbar(x, g["auc"], yerr=np.nan_to_num(np.asarray(g["auc_se"], np.float64)), label=label,
                            color=f"C{k}", marker="o", markersize=3, capsize=2, linewidth=1.2)
        n = next((r["groups"][group]["n"] for r in rows.values() if group in r["groups"]), 0)
        ax.set(title=f"{group} test eyes (n = {n})", xlabel="% referred by the row's uncertainty",
               ylabel="AUC of the kept eyes")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def plot_uncertainty_vs_probability(eyes: Mapping[str, Mapping[str, np.ndarray]], path: Path) -> Path:
    """Per row: its uncertainty against p̄ for each test eye, referable and non-referable eyes apart."""
    fig = Figure(figsize=(3.2 * len(eyes), 3.2), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(eyes)))
    for ax, (label, e) in zip(axes, eyes.items(), strict=True):
        score = np.maximum(e["score"], 1e-12)  # [N] nats; log axis
        for cls, colour, name in ((0, "C0", "non-referable"), (1, "C3", "referable")):
            sel = e["label"] == cls
            ax.scatter(e["probability"][sel], score[sel], s=3, alpha=0.5, color=colour, label=name)
        ax.set(title=label, xlabel="p̄ (referable)", yscale="log")
        ax.title.set_fontsize(8)
    axes[0].set_ylabel("uncertainty (MI; entropy for det./deep ens.), nat")
    axes[0].legend(fontsize=7, markerscale=3)
    return _save(fig, path)


def plot_other_disease(eyes: Mapping[str, Mapping[str, np.ndarray]], aurocs: Mapping[str, float | None],
                       path: Path) -> Path:
    """Per row: the uncertainty of ODIR's normal, other-disease and DR-keyword test eyes (box plots), with the
    AUROC of other-disease against normal eyes in the title."""
    cats = (("normal_fundus", "normal"), ("other_non_dr", "other disease"), ("dr_keyword", "DR"))
    fig = Figure(figsize=(2.6 * len(eyes), 3.2), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(eyes)))
    for ax, (label, e) in zip(axes, eyes.items(), strict=True):
        odir = e["source"] == "odir"
        data = [np.maximum(e["score"][odir & (e["category"] == c)], 1e-12) for c, _ in cats]
        ax.boxplot([d for d in data if d.size], tick_labels=[n for (_, n), d in zip(cats, data, strict=True) if d.size],
                   showfliers=False)
        auroc = aurocs.get(label)
        ax.set(yscale="log", title=f"{label}\nother vs normal AUROC {auroc:.2f}" if auroc is not None else label)
        ax.title.set_fontsize(8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("uncertainty, nat (ODIR test eyes)")
    return _save(fig, path)


def plot_sigma(run_dirs: Mapping[str, Path], path: Path) -> Path:
    """The posterior-width (σ), training NLL and KL/N trajectories of the Bayesian runs."""
    return plot_runs({label: load_history(d) for label, d in run_dirs.items()}, path)


def groups_order(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Pooled first, then the sources as the rows hold them."""
    names = list(next(iter(rows.values()))["groups"]) if rows else []
    return [POOLED, *[n for n in names if n != POOLED]] if POOLED in names else names
