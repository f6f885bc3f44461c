"""Re-serve an artifact with other serving draws: same weights, thresholds refitted, card rewritten to match.

``benchmarks/pass_split.py --apply`` uses it when the validation eyes choose another way of spending the pass
budget than the artifact serves. What changes, and what does not:

- ``weights.safetensors`` is copied byte for byte (the posterior is the same);
- ``config.json``: the serving section (K, views, pass budget) and the version;
- ``calibration.json``: both thresholds refitted by the screening operating point on the validation eyes
  scored with the new draws, the validation (and, when given, test) figures at those thresholds, the pass
  split record; the reduced-precision records are dropped because they were measured at the old draws
  (``benchmarks/drift_real.py --record`` measures them again, and until then only fp32 serves);
- ``MODEL_CARD.md``: the title, the serving lines, a line naming the command, the validation, test,
  operating-point and per-source sections; the rest (intended use, data, training) is kept as written.

Example::

    sha = reserve_artifact(load_artifact("models/default"), Path("runs/2.1.0"), draws=draws,
                           val=Scored(val_probs, val_labels, val_rows), test=Scored(...), choice=choice,
                           version="2.1.0", command="benchmarks/pass_split.py ... --apply runs/2.1.0")
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from models.artifact import (
    CALIBRATION_FILE,
    CONFIG_FILE,
    MANIFEST_FILE,
    MODEL_CARD_FILE,
    WEIGHTS_FILE,
    Artifact,
    ArtifactError,
    ServingDraws,
    replace_calibration,
    replace_config,
    replace_model_card,
)
from training.data.manifest import ManifestRow
from training.evaluation.by_source import by_source_summary, evaluate_by_source, source_groups
from training.evaluation.evaluate import evaluate_predictions
from training.evaluation.operating_point import outcome_shares, screening_operating_point
from training.evaluation.pass_split import PassSplitChoice
from training.evaluation.uncertainty import mc_uncertainty
from training.model_card import (
    by_source_lines,
    operating_point_lines,
    portable,
    serving_line,
    test_lines,
    validation_lines,
)


@dataclass(frozen=True)
class Scored:
    """One split scored with the new draws: ``probs`` ``[S, N]``, ``labels`` ``[N]``, ``rows`` in that order."""

    probs: np.ndarray
    labels: np.ndarray
    rows: list[ManifestRow]


def reserve_artifact(artifact: Artifact, out: Path, *, draws: ServingDraws, val: Scored, test: Scored | None,
                     choice: PassSplitChoice | None, version: str | None, command: str, n_bootstrap: int = 1000,
                     overwrite: bool = False, budget: int | None = None) -> str:
    """Write the re-served artifact to ``out``; returns its sha256 (the manifest's). ``budget``: the pass
    budget it records (default: the one ``choice`` chose within, else the artifact's own)."""
    out = Path(out)
    if out.resolve() == artifact.directory.resolve():
        raise ArtifactError(f"{out}: re-serve into a new directory, not over the artifact it reads")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ArtifactError(f"{out} exists and is not empty (pass overwrite=True to replace it)")
        shutil.rmtree(out)
    extra = set(artifact.files) - {WEIGHTS_FILE, CONFIG_FILE, CALIBRATION_FILE, MODEL_CARD_FILE, MANIFEST_FILE}
    if extra:  # e.g. an int8 range table, measured at the old draws
        raise ArtifactError(f"{', '.join(sorted(extra))}: measured at the artifact's old draws; re-serve without it")
    budget = budget or (choice.budget if choice is not None else artifact.config.pass_budget)
    if draws.passes > budget:
        raise ArtifactError(f"{draws.split_text()} is {draws.passes} passes, over the artifact's budget of {budget}")
    old = artifact.calibration
    max_missed = float(old.validation.get("operating_point", {}).get("max_missed_share", 0.03))
    unc = mc_uncertainty(val.probs)
    op = screening_operating_point(unc.probability, unc.mutual_information, val.labels, max_missed_share=max_missed)
    dec, mi_t = op.decision_threshold, op.referral_threshold_mi

    def report(split: Scored) -> Any:
        return evaluate_predictions(split.probs, split.labels, n_bootstrap=n_bootstrap, seed=0,
                                    target_referral_rate=old.target_referral_rate, decision_threshold=dec,
                                    referral_threshold_mi=mi_t)

    def per_source(split: Scored) -> dict[str, Any] | None:
        if not source_groups(split.rows):
            return None
        reports = evaluate_by_source(split.probs, split.labels, split.rows, n_bootstrap=n_bootstrap,
                                     target_referral_rate=old.target_referral_rate, decision_threshold=dec,
                                     referral_threshold_mi=mi_t)
        return by_source_summary(reports, split.probs, split.labels, split.rows, decision_threshold=dec,
                                 referral_threshold_mi=mi_t)

    val_summary = report(val).calibration_summary()
    test_summary = report(test).calibration_summary() if test is not None else None
    test_shares = None
    if test is not None:
        tu = mc_uncertainty(test.probs)
        test_shares = outcome_shares(tu.probability, tu.mutual_information, test.labels, decision_threshold=dec,
                                     referral_threshold_mi=mi_t)
    sources = {"val": per_source(val), "test": per_source(test) if test is not None else None}
    validation: dict[str, Any] = {**val_summary["validation"],
                                  "test": test_summary["validation"] if test_summary else None,
                                  "operating_point": op.as_dict(), "operating_point_test": test_shares,
                                  "pass_split": choice.as_dict() if choice is not None else None,
                                  "reserved_from": f"{artifact.config.name} {artifact.config.version} "
                                                   f"({artifact.config.serving_draws().split_text()})"}
    calibration = dataclasses.replace(
        old, referral_threshold_mi=op.referral_threshold_mi, decision_threshold=op.decision_threshold,
        achieved_referral_rate=val_summary["achieved_referral_rate"], validation=validation, precision_drift={})
    config = dataclasses.replace(artifact.config, serving=draws, pass_budget=budget,
                                 version=version or artifact.config.version,
                                 created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    card = _card(artifact, config.version, draws, budget, choice, command, val_summary, test_summary,
                 op.as_dict(), test_shares, sources, len(test.rows) if test is not None else None)
    shutil.copytree(artifact.directory, out, dirs_exist_ok=True)
    replace_config(out, config)
    replace_calibration(out, calibration)
    return replace_model_card(out, card)


def _card(artifact: Artifact, version: str, draws: ServingDraws, budget: int, choice: PassSplitChoice | None,
          command: str, val_summary: dict[str, Any], test_summary: dict[str, Any] | None, op: dict[str, Any],
          test_shares: dict[str, Any] | None, sources: dict[str, Any], n_test: int | None) -> str:
    """The old card with every section the new draws change rewritten (see the module docstring)."""
    title, *sections = artifact.model_card.split("\n## ")
    title = re.sub(r"^(# Model card: .*) \S+$", rf"\1 {version}", title.strip(), count=1, flags=re.M)
    rewritten = {"Validation", "Held-out test split", "Screening operating point", "Per source",
                 "Reduced precision"}
    kept: list[str] = []
    for section in sections:
        head = section.split("\n", 1)[0]
        if any(head.startswith(h) for h in rewritten):
            continue
        lines = section.rstrip("\n").split("\n")
        if head == "Model":
            lines = [x for x in lines if not x.startswith(("- Serving:", "- Served option:", "- Pass split:"))]
            lines += [serving_line(draws, budget), *([f"- {choice.sentence()}"] if choice is not None else [])]
        elif head == "Training data" and n_test is not None:
            lines = [re.sub(r", test \d+ \(", f", test {n_test} (", x) if x.startswith("- Images:") else x
                     for x in lines]
        elif head == "Training":
            lines.append(f"- Re-served with {draws.split_text()} (the same weights; thresholds refitted on the "
                         "validation eyes scored through the service's preprocessing from the original files"
                         + (", the test patients scored the same way" if test_summary else "")
                         + f"): `{portable(command)}`")
        kept.append("\n".join(lines))
    new = [*validation_lines(val_summary, True)]
    if test_summary is not None:
        new += ["", *test_lines(test_summary)]
    new += ["", *operating_point_lines(op, test_shares)]
    if sources.get("val"):
        new += ["", *by_source_lines(sources)]
    at = next((i for i, s in enumerate(kept) if s.startswith(("Training log", "Limitations"))), len(kept))
    body = [*kept[:at], "\n".join(new).removeprefix("## "), *kept[at:]]
    return title + "\n\n" + "\n\n".join(f"## {s.strip(chr(10))}" for s in body) + "\n"
