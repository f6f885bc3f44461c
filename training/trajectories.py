"""Compare the posterior trajectories of several runs in one figure (σ, training NLL, KL/N, NLL-gradient SD).

Usage (after two or more ``radscreen-train fit`` runs)::

    python -m training.trajectories runs/radial runs/mfvi --labels radial MFVI --out sigma_trajectories.png

Reads each run's ``history.json`` (written by ``training.loop``); prints one summary line per run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def load_history(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "history.json"
    if not path.is_file():
        raise SystemExit(f"{run_dir}: no history.json (is this a radscreen-train fit run directory?)")
    return list(json.loads(path.read_text()))


def plot_runs(histories: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    """Four panels, one line per run: mean σ (5–95 % band), train NLL, KL/N, SD of the μ-gradient of the NLL."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    panels = (("sigma/all/mean", "mean σ = softplus(ρ)", True), ("train_nll", "training NLL (nat/image)", True),
              ("kl_per_example", "KL / N (nat)", True), ("grad_sd_mu", "SD of ∇μ NLL estimator", True))
    for label, history in histories.items():
        epochs = [r["epoch"] for r in history]
        for ax, (key, title, log) in zip(axes, panels, strict=True):
            line, = ax.plot(epochs, [r.get(key, float("nan")) for r in history], label=label)
            if key == "sigma/all/mean":
                ax.fill_between(epochs, [r["sigma/all/q05"] for r in history], [r["sigma/all/q95"] for r in history],
                                color=line.get_color(), alpha=0.2)
            ax.set(title=title, xlabel="epoch", yscale="log" if log else "linear")
    axes[0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def summary(label: str, history: list[dict[str, Any]]) -> str:
    first_elbo = next((r for r in history if r["phase"] == "elbo"), history[0])
    last = history[-1]
    return (f"{label}: σ {first_elbo['sigma/all/mean']:.3g} -> {last['sigma/all/mean']:.3g}, "
            f"train NLL {first_elbo['train_nll']:.3f} -> {last['train_nll']:.3f}, "
            f"KL/N {first_elbo['kl_per_example']:.4g} -> {last['kl_per_example']:.4g}, "
            f"grad SD(μ) {first_elbo['grad_sd_mu']:.3g} -> {last['grad_sd_mu']:.3g}, "
            f"Δρ/(lr·steps) {last['rho_budget_ratio']:.3f}" + _layer_ratios(last))


def _layer_ratios(row: dict[str, Any]) -> str:
    """The per-layer Δρ/(lr·steps) range of a history row (``rho_ratio/<layer>``), or nothing for older runs."""
    ratios = {k.split("/", 1)[1]: float(v) for k, v in row.items() if k.startswith("rho_ratio/") and v is not None}
    if not ratios:
        return ""
    low, high = min(ratios, key=ratios.__getitem__), max(ratios, key=ratios.__getitem__)
    return f" (per layer {ratios[low]:.3f} {low} to {ratios[high]:.3f} {high})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run directories of radscreen-train fit")
    parser.add_argument("--labels", nargs="+", default=None, help="one label per run (default: folder names)")
    parser.add_argument("--out", type=Path, required=True, help="PNG to write")
    args = parser.parse_args(argv)
    labels = args.labels or [r.name for r in args.runs]
    if len(labels) != len(args.runs):
        raise SystemExit(f"--labels: {len(labels)} labels for {len(args.runs)} runs")
    histories = {label: load_history(run) for label, run in zip(labels, args.runs, strict=True)}
    for label, history in histories.items():
        print(summary(label, history))
    print(f"wrote {plot_runs(histories, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
