"""The markdown of the real-eyes Table 1 (``benchmarks/table1_real.py``'s ``results.json`` -> ``table1_real.md``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def _pct(fractions: Sequence[float]) -> tuple[str, str]:
    head = " | ".join(f"{round(f * 100)} %" for f in fractions)
    return head, "|---" * (len(fractions) + 1) + "|"


def _pm(v: float, se: float) -> str:
    if not math.isfinite(v):
        return "–"
    return f"{v:.3f} ± {se:.3f}" if math.isfinite(se) else f"{v:.3f}"


def _ci(d: dict[str, list[float]]) -> list[str]:
    return [f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]" if math.isfinite(v) else "–"
            for v, lo, hi in zip(d["difference"], d["ci_low"], d["ci_high"], strict=True)]


def _group_tables(rows: dict[str, Any], group: str, fractions: Sequence[float], baseline: str) -> list[str]:
    head, sep = _pct(fractions)
    present = {k: r["groups"][group] for k, r in rows.items() if "auc" in r["groups"].get(group, {})}
    if not present:
        return [f"**{group}**: no row has both classes among these eyes", ""]
    g0 = next(iter(present.values()))
    out = [f"#### {group}: {g0['n']} test eyes, {g0['n_referable']} referable", "",
           "AUC of the kept eyes by share referred (each row by its own uncertainty; ± bootstrap SE)", "",
           f"| method | {head} |", sep]
    out += [f"| {k} | " + " | ".join(_pm(v, s) for v, s in zip(g["auc"], g["auc_se"], strict=True)) + " |"
            for k, g in present.items()]
    out += ["", "Accuracy of the kept eyes (p̄ ≥ 0.5 called referable)", "", f"| method | {head} |", sep]
    out += [f"| {k} | " + " | ".join(_pm(v, s) for v, s in zip(g["accuracy"], g["accuracy_se"], strict=True))
            + " |" for k, g in present.items()]
    out += ["", "AUC: own referral − random referral (paired bootstrap, 95 % interval)", "",
            f"| method | {head} |", sep]
    out += [f"| {k} | " + " | ".join(_ci(g["vs_random"]["auc"])) + " |" for k, g in present.items()]
    versus = {k: r["vs_radial"][group]["auc"] for k, r in rows.items() if group in r.get("vs_radial", {})}
    if versus:
        out += ["", f"AUC: row − {baseline} (each by its own referral; paired bootstrap on the same eyes, 95 % "
                "interval)", "", f"| method | {head} |", sep]
        out += [f"| {k} | " + " | ".join(_ci(d)) + " |" for k, d in versus.items()]
    return [*out, ""]


def _summary(rows: dict[str, Any], groups: Sequence[str], max_missed: float) -> list[str]:
    out = [f"Calibration, screening and cost (the screening point: on the pooled validation eyes, at most "
           f"{max_missed:.0%} of referable eyes answered \"no referable DR\", deferral by the row's own uncertainty; "
           "shown on each group's test eyes as non-referable answered automatically / referable missed)", "",
           "| method | " + " | ".join(f"ECE {g}" for g in groups) + " | "
           + " | ".join(f"auto / missed {g}" for g in groups)
           + " | uncertainty, ODIR other disease vs normal (AUROC) | CPU s (epochs' wall s) |",
           "|---" * (2 * len(groups) + 3) + "|"]
    for k, r in rows.items():
        eces = [f"{r['groups'][g]['ece']:.3f}" if "ece" in r["groups"].get(g, {}) else "–" for g in groups]
        shares = []
        for g in groups:
            s = r["groups"].get(g, {}).get("screening")
            shares.append(f"{s['auto_negative_share']:.1%} / {s['missed_share']:.1%}" if s else "–")
        ovn = r.get("other_vs_normal")
        other = f"{ovn['auroc']:.3f}" if ovn else "–"
        out.append(f"| {k} | " + " | ".join(eces) + " | " + " | ".join(shares) + f" | {other} | "
                   f"{r['cpu_seconds']:,.0f} ({r['epoch_wall_seconds']:,.0f}) |")
    return [*out, ""]


def render(results: dict[str, Any]) -> str:
    b, rows, fractions = results["budget"], results["rows"], results["fractions"]
    out = [f"REAL eyes ({results['manifest']}): VGG-16* width {b['width']}, {b['input_size']} px, "
           f"{b['epochs']} epochs x {b['steps_per_epoch']} steps of {b['batch_size']} images for every run; test "
           f"scoring with the serving draws (ensembles: their members' draws); {b['n_bootstrap']} bootstrap "
           "resamples.", ""]
    if results["unfinished"]:
        out += ["**Unfinished rows** (their runs are not all fitted; no figure is given for them): "
                + "; ".join(f"{k} (waiting for {', '.join(v)})" for k, v in results["unfinished"].items()), ""]
    if not rows:
        return "\n".join(out) + "\n"
    groups = list(next(iter(rows.values()))["groups"])
    for group in groups:
        out += _group_tables(rows, group, fractions, results["baseline"])
    max_missed = next(iter(rows.values()))["operating_point_val"]["max_missed_share"]
    out += _summary(rows, groups, max_missed)
    return "\n".join(out) + "\n"
