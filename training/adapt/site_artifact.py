"""The site artifact: an ordinary artifact (weights, config, calibration, card) for one programme.

What changes from the parent:

- ``weights.safetensors``: the parent's byte for byte (``recalibrate``) or the fine-tuned posterior;
- ``config.json``: the name and version, the training data (the parent's, then the site's counts), the prior of
  a ``posterior-prior`` run; the input transform and the serving draws are the parent's;
- ``calibration.json``: both thresholds from the site's calibration eyes, ``validation.site`` (the operating
  point, the cross-fitted promise and the parent on the same eyes) beside ``validation.parent`` (the parent's
  own record); the reduced-precision records are dropped (they were measured at the parent's weights and
  thresholds: only fp32 serves until ``benchmarks/drift_real.py --record`` measures them again);
- ``MODEL_CARD.md``: the parent's intended use, a section on the adaptation and one on the site's operating
  point, then the parent's card under "Parent —" headings. Counts only: no file name, patient or path of the
  site leaves its machine in the card.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from models.artifact import (
    CALIBRATION_FILE,
    CONFIG_FILE,
    MANIFEST_FILE,
    MODEL_CARD_FILE,
    WEIGHTS_FILE,
    Artifact,
    ArtifactError,
    replace_calibration,
    replace_config,
    replace_model_card,
)
from models.nn.priors import PARENT_POSTERIOR
from training.adapt.promise import SitePromise
from training.adapt.site import SiteEye, describe
from training.adapt.tune import TuneOptions
from training.model_card import portable

_SERVED = (WEIGHTS_FILE, CONFIG_FILE, CALIBRATION_FILE, MODEL_CARD_FILE, MANIFEST_FILE)


@dataclass(frozen=True)
class SiteRecord:
    """What the site gave and what was done with it."""

    mode: str
    parent: Artifact
    n_rows: int
    skipped: dict[str, int]  # CSV rows left out, by reason
    refused: dict[str, int]  # photographs the quality gate refused, by its first issue
    gradable: list[SiteEye]
    tune_eyes: list[SiteEye]
    cal_eyes: list[SiteEye]
    has_patients: bool
    tune: TuneOptions | None
    command: str

    def as_dict(self) -> dict[str, Any]:
        p = self.parent.config
        return {"mode": self.mode, "parent": {"name": p.name, "version": p.version, "sha256": self.parent.sha256},
                "rows": self.n_rows, "rows_left_out": self.skipped, "refused_by_quality_gate": self.refused,
                "gradable": describe(self.gradable), "tuning": describe(self.tune_eyes),
                "calibration": describe(self.cal_eyes), "patients_given": self.has_patients,
                "recipe": self.tune.as_dict() if self.tune is not None else None,
                "command": portable(self.command)}


def write_site_artifact(out: Path, *, site: Artifact, record: SiteRecord, promise: SitePromise,
                        name: str | None, version: str | None) -> str:
    """Write the site artifact to ``out`` (a new or empty folder) from ``site``'s weights; returns its sha256."""
    extra = set(site.files) - set(_SERVED)
    if extra:  # e.g. an int8 range table: measured at the parent's weights
        raise ArtifactError(f"{', '.join(sorted(extra))}: measured for the parent; adapt an artifact without it")
    parent = record.parent
    config = dataclasses.replace(
        site.config, name=name or f"{parent.config.name}-site", version=version or f"{parent.config.version}+site",
        training_data=_training_data(parent.config.training_data, record),
        prior=({"kind": PARENT_POSTERIOR, "parent": f"{parent.config.name} {parent.config.version}",
                "sha256": parent.sha256} if record.mode == "posterior-prior" else site.config.prior),
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    calibration = dataclasses.replace(
        parent.calibration, decision_threshold=promise.decision_threshold,
        referral_threshold_mi=promise.referral_threshold_mi,
        achieved_referral_rate=promise.in_sample["referred_share"] + promise.in_sample["uncertain_share"],
        validation={"site": {**record.as_dict(), "operating_point": promise.as_dict()},
                    "parent": parent.calibration.validation},
        precision_drift={})
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        shutil.copytree(site.directory, staging, dirs_exist_ok=True)
        replace_config(staging, config)
        replace_calibration(staging, calibration)
        sha = replace_model_card(staging, _card(config.name, config.version, record, promise))
        if out.exists():
            out.rmdir()  # empty (checked by the caller): the finished artifact takes its place whole
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return sha


def _training_data(parent: str, record: SiteRecord) -> str:
    """``real: <the parent's data>. <the site's>``: the site's photographs are a programme's own."""
    base = parent.removeprefix("real: ") if parent.startswith("real: ") else f"a parent trained on {parent} images"
    return f"real: {base}. {_site_sentence(record)}"


def _site_sentence(record: SiteRecord) -> str:
    d = describe(record.gradable)
    how = {"recalibrate": "thresholds refitted, weights unchanged",
           "posterior-prior": "fine-tuned with the parent's posterior as the prior, thresholds refitted",
           "finetune": "means fine-tuned without a prior, thresholds refitted"}[record.mode]
    return (f"Adapted to one screening programme ({record.mode}: {how}) on {d['eyes']} of its own gradable "
            f"graded photographs ({d['referable']} referable, {d['patients']} patients)")


def _card(name: str, version: str, record: SiteRecord, promise: SitePromise) -> str:
    parent = record.parent
    _, *sections = parent.model_card.split("\n## ")
    intended = next((s for s in sections if s.startswith("Intended use")), "Intended use\n")
    lines = [f"# Model card: {name} {version}", "", f"## {intended.rstrip()}",
             "", "This artifact is adapted to one screening programme: its operating point was fitted on that "
             "programme's photographs and holds, at best, for the same population, cameras and grading. "
             "Elsewhere use the parent.", "", *_adaptation_lines(record), "", *_operating_point_lines(promise)]
    for section in sections:
        head = section.split("\n", 1)[0]
        if head.startswith(("Intended use", "Reduced precision")):
            continue
        lines += ["", f"## Parent — {section.rstrip()}"]
    return "\n".join(lines) + "\n"


def _adaptation_lines(record: SiteRecord) -> list[str]:
    p = record.parent.config
    g, t, c = describe(record.gradable), describe(record.tune_eyes), describe(record.cal_eyes)
    out = ["## Site adaptation",
           f"- Parent: {p.name} {p.version} (sha256 {record.parent.sha256}); its input transform and serving "
           "draws are kept.",
           f"- Mode: **{record.mode}**. " + {
               "recalibrate": "The parent's weights, byte for byte; both thresholds fitted on the site's eyes.",
               "posterior-prior": "Fine-tuned on the site's tuning eyes with the parent's radial posterior (its μ "
                                  "and σ, frozen) as the prior: NLL + λ·KL(q ‖ q_parent)/N; thresholds fitted on "
                                  "the calibration eyes, which the fine-tuning never saw.",
               "finetune": "The parent's means fine-tuned on the site's tuning eyes by the NLL alone (σ kept, no "
                           "prior); thresholds fitted on the calibration eyes, which the fine-tuning never saw.",
           }[record.mode],
           f"- Site data: {record.n_rows} rows; "
           + (", ".join(f"{n} left out ({k})" for k, n in record.skipped.items()) or "none left out")
           + "; quality gate: " + (", ".join(f"{n} refused ({k})" for k, n in record.refused.items()) or "none refused")
           + f"; **{g['eyes']} gradable eyes** ({g['referable']} referable, {g['patients']} patients"
           + (f"; grades {_grades(g)}" if g["grades"] else "")
           + (f"; {g['referable_by_label']} referable by the programme's label at grade < 2" if g["referable_by_label"]
              else "") + ").",
           "- Patients: " + ("both eyes of a patient stay on one side of every split (the labels' patient column)."
                             if record.has_patients else "**no patient column: each photograph counted as its own "
                             "patient**, so both eyes of one patient may sit on two sides of a split."),
           ]
    if record.tune is not None:
        r = record.tune
        prior = (f"λ = {r.prior_weight:g}" + (" (the full ELBO)" if r.prior_weight == 1 else
                                            " (a TEMPERED ELBO: the KL to the parent down-weighted)")
                 if record.mode == "posterior-prior" else "no prior")
        out.append(f"- Split by patient: {t['eyes']} tuning eyes ({t['referable']} referable), {c['eyes']} "
                   f"calibration eyes ({c['referable']} referable). Recipe: {r.epochs} epochs, batch {r.batch_size}, "
                   f"lr {r.lr:g} (means), {r.rho_lr:g} (ρ), {prior}, seed {r.seed}, the last epoch kept (no epoch "
                   "chosen on any eye).")
    out += [f"- Command: `{portable(record.command)}`",
            "- Reduced precision: not measured for this artifact; only fp32 serves until "
            "`benchmarks/drift_real.py --record` measures it."]
    return out


def _operating_point_lines(promise: SitePromise) -> list[str]:
    s, par = promise.in_sample, promise.parent
    return ["## Site operating point (served)",
            f"- Thresholds: refer as referable when p̄ >= {promise.decision_threshold:.4g}; refer to a grader as "
            f"uncertain when MI > {promise.referral_threshold_mi:.4g} nat; chosen so that at most "
            f"{promise.miss_share_bound:.0%} of the calibration eyes' referable eyes are answered no_referable_dr.",
            f"- **Promise (out of sample)**: {promise.sentence()}.",
            f"- In sample (the eyes that chose the thresholds): {s['missed_share']:.1%} missed, "
            f"{s['auto_negative_share']:.1%} of non-referable eyes automatic, {s['uncertain_share']:.1%} deferred "
            f"as uncertain, {s['referred_share']:.1%} referred.",
            f"- AUC on the calibration eyes: {promise.auc.text()}.",
            f"- The parent as it serves, on the same eyes: AUC {par['auc']:.3f}, {par['missed_share']:.1%} of "
            f"referable eyes missed, {par['auto_negative_share']:.1%} of non-referable eyes automatic."]


def _grades(d: dict[str, Any]) -> str:
    return ", ".join(f"{g}: {n}" for g, n in d["grades"].items())
