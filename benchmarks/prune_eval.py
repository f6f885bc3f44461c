"""Pruning by signal-to-noise on real eyes: the parent and its pruned copies scored on the same photographs.

Sets: the test patients of ODIR and of EyePACS' natural copy (split as ``--run`` split them, rebuilt as
``benchmarks/screening_eval.py`` does) and the 54 IDRiD photographs. Configurations: the parent (keep 100 %)
and, for each ``--method`` (``snr``: |μ|·√D/σ, ``magnitude``: |μ|, the paper's baseline) and each ``--keep``
share, the parent pruned in memory (``models.nn.pruning.prune_state_dict``: the same dense tensors an artifact
written by ``radscreen-train prune`` loads to). Every configuration is scored with the same serving draws
(the artifact's, or ``--mc-samples``/``--no-flip``/``--head-draws`` overrides) and the same ``--precision``,
so with one draw seed the pruned and the parent's draws share their noise coordinate by coordinate.

Four stages, each resumable (``--stage score`` writes ``<out>/draws/<config>.npz`` and skips those present;
the images are preprocessed once into ``<out>/cache``; the quality gate's verdicts once into ``gate.json``):

* ``snr``: the SNR quantiles of every weight tensor of the parent and the share each configuration keeps of it
  (no scoring; ``<out>/snr.md``);
* ``score``: the draws of every configuration;
* ``sizes``: writes each pruned artifact (``training.pruning.prune_artifact``) under ``<out>/artifacts`` and
  measures its files' size and ``load_artifact`` + ``build_model`` time (median of ``--repeats``);
* ``report``: per set and configuration, AUC (paired bootstrap of the difference from the parent), the
  outcomes at the parent's operating point, flips against the parent, the MI change, and the same at an
  operating point refitted **in sample** on each set's test eyes (the MI threshold that defers the share of
  gradable eyes the parent defers there, then the decision threshold that answers as many eyes
  ``no_referable_dr`` as the parent does there); written to ``<out>/report.json`` and ``<out>/table.md``.

Example (the measurement of docs/results-real-eyes.md, "Pruning by signal-to-noise")::

    OMP_NUM_THREADS=1 nice -n 10 PYTHONPATH=$PWD .venv/bin/python benchmarks/prune_eval.py --stage score \\
        --manifest /work/runs/manifests/odir-eyepacs.csv --run /work/runs/split-2.0.0 --out /work/runs/prune \\
        --mc-samples 16 --no-flip --precision bf16
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.screening_eval import gate_verdicts, manifest_rows
from models.artifact import Artifact, load_artifact
from models.nn.pruning import PRUNE_METHODS, check_method, prune_state_dict, snr_quantiles
from models.outcome.decision import screening_outcome
from support.shared_data import IDRID
from training.data.dataset import ManifestDataset
from training.data.manifest import ManifestRow
from training.data.photos import list_photos
from training.evaluation.ensemble import load_draws, save_draws
from training.evaluation.operating_rules import wilson
from training.evaluation.uncertainty import mc_uncertainty
from training.predict import mc_probabilities

logger = logging.getLogger("prune_eval")
SETS = ("odir", "eyepacs", "idrid")
NO = "no_referable_dr"


def set_rows(manifest: Path, run: Path) -> dict[str, list[ManifestRow]]:
    rows = {s: manifest_rows(manifest, run, "test", s) for s in ("odir", "eyepacs")}
    rows["idrid"] = [ManifestRow(path=p, grade=2, patient_id=p.stem, eye=None, row_no=0, category="idrid")
                     for p in list_photos(IDRID)]
    return rows


def configs(keeps: Sequence[float], methods: Sequence[str]) -> list[tuple[str, str, float]]:
    """(name, method, keep): the parent first, then each method at each share."""
    return [("parent", "none", 1.0)] + [(f"{m}-{round(100 * k)}", m, k) for m in methods for k in keeps]


def score_stage(art: Artifact, rows: dict[str, list[ManifestRow]], out: Path, args: argparse.Namespace) -> None:
    draws = art.serving_draws(args.mc_samples)
    draws = replace(draws, test_time_flip=draws.test_time_flip and not args.no_flip,
                    head_draws=args.head_draws or draws.head_draws)
    logger.info("serving draws: %s; precision %s", draws, args.precision)
    every = [r for s in SETS for r in rows[s]]
    ids = [f"{s}/{r.path.name}" for s in SETS for r in rows[s]]
    dataset = ManifestDataset(every, transform=art.image_transform()).use_cache(out / "cache", workers=args.workers,
                                                                                progress=True)
    parent = art.state_dict()
    (out / "draws").mkdir(parents=True, exist_ok=True)
    for name, method, keep in configs(args.keep, args.method):
        path = out / "draws" / f"{name}-{args.precision}.npz"
        if args.configs and name not in args.configs:
            continue
        if path.is_file():
            logger.info("%s: present, skipped", path.name)
            continue
        model = art.build_model()
        if method != "none":
            model.load_state_dict(prune_state_dict(parent, keep, method=check_method(method)).state, strict=True)
        t = time.perf_counter()
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if args.precision == "bf16" else nullcontext()
        with ctx:
            probs, labels = mc_probabilities(model, dataset, mean=art.config.input.mean, std=art.config.input.std,
                                             draws=draws, progress=True)
        save_draws(path, probs, labels, ids)
        logger.info("%s: %d eyes x %d draws in %.0f s", name, probs.shape[1], probs.shape[0], time.perf_counter() - t)


def gate_stage(rows: dict[str, list[ManifestRow]], out: Path, workers: int) -> dict[str, list[bool]]:
    path = out / "gate.json"
    if not path.is_file():
        verdicts = {s: gate_verdicts(rows[s], workers, None) for s in SETS}
        path.write_text(json.dumps(verdicts) + "\n")
    return {s: list(v) for s, v in json.loads(path.read_text()).items()}


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mann-Whitney AUC with ties counted half."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    pos = labels == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def paired_auc(a: np.ndarray, b: np.ndarray, labels: np.ndarray, n_boot: int, seed: int = 0
               ) -> tuple[float, float, float]:
    """AUC(b) − AUC(a) and its paired bootstrap 95 % interval (the same resampled eyes for both)."""
    rng = np.random.default_rng(seed)
    diffs: list[float] = []
    n = len(labels)
    while len(diffs) < n_boot:
        idx = rng.integers(0, n, n)
        if labels[idx].min() == labels[idx].max():
            continue
        diffs.append(auc(b[idx], labels[idx]) - auc(a[idx], labels[idx]))
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return auc(b, labels) - auc(a, labels), float(lo), float(hi)


def outcomes(p: np.ndarray, mi: np.ndarray, gradable: Sequence[bool], mi_threshold: float, decision: float
             ) -> list[str]:
    return [screening_outcome(gradable=g, mutual_information=float(m), probability=float(q),
                              referral_threshold_mi=mi_threshold, decision_threshold=decision).value
            for q, m, g in zip(p, mi, gradable, strict=True)]


def _shares(out: list[str], labels: np.ndarray | None) -> dict[str, Any]:
    o = np.array(out)
    d: dict[str, Any] = {"uncertain": int((o == "grader_review_uncertain").sum()), "answered_no": int((o == NO).sum())}
    if labels is not None:
        ref = labels == 1
        k, n = int(((o == NO) & ref).sum()), int(ref.sum())
        d["missed"] = [k, n, *wilson(k, n)]
        k, n = int(((o == NO) & ~ref).sum()), int((~ref).sum())
        d["healthy_answered"] = [k, n, *wilson(k, n)]
    return d


def refit_decision(p: np.ndarray, n_no: int) -> float:
    """The decision threshold that answers ``no_referable_dr`` for the ``n_no`` lowest of ``p`` (the eligible
    eyes' probabilities): the parent's count of automatic answers, kept."""
    q = np.sort(p)
    if n_no <= 0:
        return float(q[0]) if len(q) else 0.0
    if n_no >= len(q):
        return float(np.nextafter(q[-1], np.inf))
    return float((q[n_no - 1] + q[n_no]) / 2)


def report_stage(art: Artifact, rows: dict[str, list[ManifestRow]], gate: dict[str, list[bool]], out: Path,
                 args: argparse.Namespace) -> dict[str, Any]:
    cal = art.calibration
    loaded = {name: load_draws(out / "draws" / f"{name}-{args.precision}.npz")
              for name, _, _ in configs(args.keep, args.method)
              if (out / "draws" / f"{name}-{args.precision}.npz").is_file()}
    if "parent" not in loaded:
        raise SystemExit("no parent draws yet: run --stage score first")
    if args.precision == "fp32" and (out / "draws" / "parent-bf16.npz").is_file():  # the precision's own flips
        loaded["parent-bf16"] = load_draws(out / "draws" / "parent-bf16.npz")
    result: dict[str, Any] = {}
    offsets = np.cumsum([0] + [len(rows[s]) for s in SETS])
    for si, s in enumerate(SETS):
        sl = slice(int(offsets[si]), int(offsets[si + 1]))
        labelled = s != "idrid"
        g = gate[s]
        gmask = np.array(g)
        base = mc_uncertainty(loaded["parent"].probs[:, sl])
        labels = loaded["parent"].labels[sl] if labelled else None
        base_out = outcomes(base.probability, base.mutual_information, g, cal.referral_threshold_mi,
                            cal.decision_threshold)
        refer_share = float((base.mutual_information[gmask] > cal.referral_threshold_mi).mean())
        per: dict[str, Any] = {}
        for name, d in loaded.items():
            u = mc_uncertainty(d.probs[:, sl])
            o = outcomes(u.probability, u.mutual_information, g, cal.referral_threshold_mi, cal.decision_threshold)
            row: dict[str, Any] = {
                "flips": sum(a != b for a, b in zip(o, base_out, strict=True)), "n": len(o),
                "mi_median_ratio": float(np.median(u.mutual_information[gmask])
                                         / np.median(base.mutual_information[gmask])),
                "parent_point": _shares(o, labels)}
            refit = float(np.quantile(u.mutual_information[gmask], 1 - refer_share))
            decision = refit_decision(u.probability[gmask & (u.mutual_information <= refit)],
                                      sum(o == NO for o in base_out))
            o2 = outcomes(u.probability, u.mutual_information, g, refit, decision)
            row["refit_in_sample"] = {"mi_threshold": refit, "decision_threshold": decision, **_shares(o2, labels),
                                      "flips": sum(a != b for a, b in zip(o2, base_out, strict=True))}
            if labels is not None:
                lab = labels[gmask]
                row["auc"] = auc(u.probability[gmask], lab)
                row["auc_diff"] = list(paired_auc(base.probability[gmask], u.probability[gmask], lab, args.n_boot))
            per[name] = row
        result[s] = per
    (out / f"report-{args.precision}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _pct(k: int, n: int) -> str:
    return f"{100 * k / max(n, 1):.1f} %"


def table(result: dict[str, Any], sizes: dict[str, Any]) -> str:
    lines = ["| config | set | AUC (Δ vs parent, 95 % CI) | referable missed | healthy answered | flips vs parent "
             "| MI median ×parent | refit (in-sample): missed / healthy answered / flips | size MiB | load s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in result["odir"]:
        for s in SETS:
            r = result[s][name]
            pp, rf = r["parent_point"], r["refit_in_sample"]
            a = (f"{r['auc']:.3f} ({r['auc_diff'][0]:+.3f}, {r['auc_diff'][1]:+.3f} to {r['auc_diff'][2]:+.3f})"
                 if "auc" in r else "-")
            miss = f"{pp['missed'][0]}/{pp['missed'][1]}" if "missed" in pp else "-"
            healthy = f"{pp['healthy_answered'][0]}/{pp['healthy_answered'][1]}" if "missed" in pp else \
                f"{pp['answered_no']} answered no"
            refit = (f"{rf['missed'][0]} / {rf['healthy_answered'][0]} / {rf['flips']}" if "missed" in rf
                     else f"- / - / {rf['flips']}")
            z = sizes.get(name, {})
            label = "parent in bf16 (vs fp32)" if name == "parent-bf16" else name
            lines.append(f"| {label} | {s} | {a} | {miss} | {healthy} | {r['flips']} ({_pct(r['flips'], r['n'])}) "
                         f"| {r['mi_median_ratio']:.2f} | {refit} | {z.get('mib', '-')} | {z.get('load_s', '-')} |")
    return "\n".join(lines)


def sizes_stage(art: Artifact, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    from training.pruning import prune_artifact

    sizes: dict[str, Any] = {}
    for name, method, keep in configs(args.keep, args.method):
        target = art.directory if method == "none" else out / "artifacts" / name
        if method != "none" and not (target / "manifest.json").is_file():
            prune_artifact(art, target, keep=keep, method=method)
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            load_artifact(target).build_model()
            times.append(time.perf_counter() - t)
        files = {p.name: p.stat().st_size for p in target.iterdir() if p.is_file()}
        sizes[name] = {"bytes": sum(files.values()), "weights_bytes": files["weights.safetensors"],
                       "mib": f"{sum(files.values()) / 2**20:.1f}", "load_s": f"{statistics.median(times):.2f}"}
        logger.info("%s: %s", name, sizes[name])
    (out / "sizes.json").write_text(json.dumps(sizes, indent=2) + "\n")
    return sizes


def snr_stage(art: Artifact, out: Path, args: argparse.Namespace) -> str:
    state = art.state_dict()
    quantiles = snr_quantiles(state)
    shares = {name: prune_state_dict(state, keep, method=check_method(method)).masks
              for name, method, keep in configs(args.keep, args.method) if method != "none"}
    order = sorted(quantiles, key=lambda p: (p.startswith("head"), int(p.split(".")[1]) if p[0] == "f" else 0))
    lines = ["| tensor | D | SNR 5 % | 25 % | median | 75 % | 95 % | median abs(μ)/σ | "
             + " | ".join(f"kept {n}" for n in shares) + " |", "|---|" + "---|" * (7 + len(shares))]
    for p in order:
        q = quantiles[p]
        lines.append(f"| {p} | {int(q['D']):,} | " + " | ".join(f"{q[k]:.2f}" for k in ("q05", "q25", "q50", "q75",
                                                                                         "q95"))
                     + f" | {q['median_abs_mu_over_sigma']:.3f} | "
                     + " | ".join(f"{100 * float(m[p].float().mean()):.1f} %" for m in shares.values()) + " |")
    text = "\n".join(lines)
    (out / "snr.md").write_text(text + "\n")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=("snr", "score", "sizes", "report"), required=True)
    parser.add_argument("--artifact", default=None, help="the parent artifact (default: the embedded model)")
    parser.add_argument("--manifest", type=Path, required=True, help="the multi-source manifest of the split")
    parser.add_argument("--run", type=Path, required=True, help="the run whose config.json split the patients")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keep", type=float, nargs="+", default=[0.5, 0.25, 0.1, 0.05])
    parser.add_argument("--method", nargs="+", default=list(PRUNE_METHODS), choices=PRUNE_METHODS)
    parser.add_argument("--mc-samples", type=int, default=None, help="network draws K (default: the artifact's)")
    parser.add_argument("--head-draws", type=int, default=None, help="head draws M (default: the artifact's)")
    parser.add_argument("--no-flip", action="store_true", help="one view even if the artifact flips")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--configs", nargs="+", default=None,
                        help="score only these configurations (parent, snr-25, ...; default: all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-boot", type=int, default=1000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    art = load_artifact(args.artifact)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "snr":
        print(snr_stage(art, args.out, args))
        return
    rows = set_rows(args.manifest, args.run)
    logger.info("eyes: %s", {s: len(r) for s, r in rows.items()})
    if args.stage == "score":
        gate_stage(rows, args.out, args.workers)
        score_stage(art, rows, args.out, args)
    elif args.stage == "sizes":
        sizes_stage(art, args.out, args)
    else:
        result = report_stage(art, rows, gate_stage(rows, args.out, args.workers), args.out, args)
        sizes_path = args.out / "sizes.json"
        text = table(result, json.loads(sizes_path.read_text()) if sizes_path.is_file() else {})
        (args.out / f"table-{args.precision}.md").write_text(text + "\n")
        print(text)


if __name__ == "__main__":
    main()
