"""Turn a finished run into the model artifact: serving draws, validation calibration, test report, card."""

from __future__ import annotations

import json
import logging
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from models.artifact import ArtifactConfig, Calibration, ServingDraws, save_artifact
from models.nn.vgg import count_parameters
from models.platform import compute
from training.config import TrainConfig
from training.data.manifest import ManifestRow
from training.data.prepare import PreparedData, prepare_data
from training.data.shards import read_index
from training.data.sources import EYEPACS, ODIR
from training.evaluation import EvaluationReport, evaluate_predictions, write_report
from training.evaluation.by_source import report_by_source
from training.evaluation.ensemble import DRAWS_FILENAME, save_draws
from training.evaluation.operating_point import OperatingPoint, outcome_shares, screening_operating_point
from training.evaluation.serving_choice import ONE_VIEW, TEST_TIME_FLIP, ServingChoice, choose_serving_option
from training.evaluation.uncertainty import mc_uncertainty
from training.history import read_history
from training.loop import BEST_WEIGHTS, build_model
from training.model_card import REAL_USE, SYNTHETIC_USE, render_model_card
from training.predict import is_bayesian, mc_probabilities
from training.storage import DTYPES, rounding_to_sd, storage_line
from training.warm_start import load_init_record

log = logging.getLogger(__name__)


@dataclass
class FinalResult:
    artifact_dir: Path | None  # None for baselines (MC dropout, deterministic): they have no serving form
    sha256: str | None
    validation: EvaluationReport
    test: EvaluationReport | None


ODIR_DESCRIPTION = (
    "ODIR-5K (Ocular Disease Intelligent Recognition 2019, Peking University: colour fundus photographs from "
    "several hospitals in China and several camera makes, circle-cropped to 512 px; research use). Per-eye DR "
    "grades mapped from the clinics' diagnostic keywords (noisy, ~5-10 %)"
)


EYEPACS_DESCRIPTION = (
    "EyePACS (the Kaggle Diabetic Retinopathy Detection 2015 training part, California screening programme; "
    "non-commercial research use). The programme's own per-eye grades 0-4"
)
SOURCE_DESCRIPTIONS = {ODIR: ODIR_DESCRIPTION, EYEPACS: EYEPACS_DESCRIPTION}


def sources_description(config: TrainConfig, rows: Sequence[ManifestRow]) -> str:
    """The data of a multi-source manifest: each source, its eyes, how its copies were used, and the sampling
    weights (or that every image was drawn once an epoch)."""
    parts = []
    for name in sorted({row.source or "unnamed" for row in rows}):
        mine = [row for row in rows if (row.source or "unnamed") == name]
        copies = sorted({row.copy for row in mine if row.copy})
        text = f"{SOURCE_DESCRIPTIONS.get(name, name)}: {len(mine)} eyes"
        if copies:
            text += " (copies: " + ", ".join(_copy_use(copy, config) for copy in copies) + ")"
        parts.append(text)
    weights = (", ".join(f"{k} {v:g}" for k, v in sorted(config.source_weights.items()))
               if config.source_weights else None)
    return ("; ".join(parts) + ". Referable = grade >= 2 (moderate NPDR or worse) for every source; patients split "
            "within each source. Sampling weights by source: "
            + (f"{weights} (each source's share of the training draws)" if weights else
               "none (every training image drawn once an epoch)"))


def _copy_use(copy: str, config: TrainConfig) -> str:
    if copy in config.exclude_copies:
        return f"{copy} left out"
    if copy in config.train_only_copies:
        return f"{copy} in training only"
    return f"{copy} in every split"


def _dataset_description(config: TrainConfig, rows: Sequence[ManifestRow] = ()) -> tuple[str, bool, str | None]:
    """(description, synthetic?, the command that regenerates the data set or None).

    Names the data set, never a path on the training machine (the card travels with the artifact). Packed
    shards are described by what they were packed from (their index records it). A run on part of the training
    patients (``train_fraction`` < 1, a learning curve's arm) says so.
    """
    description, synthetic, command = _whole_dataset_description(config, rows)
    if config.train_fraction < 1:
        description += (f"; trained on {config.train_fraction:.0%} of the training patients (a nested subset "
                        "within each source; validation and test unchanged)")
    return description, synthetic, command


def _whole_dataset_description(config: TrainConfig, rows: Sequence[ManifestRow]) -> tuple[str, bool, str | None]:
    if config.layout == "shards":
        if any(row.source for row in rows):  # packed from a multi-source manifest: name the sources, as unpacked
            return f"{sources_description(config, rows)} (packed shards)", False, None
        settings = read_index(Path(config.data))["settings"]
        description, synthetic, command = _describe(settings.get("layout", "manifest"), settings.get("dataset"),
                                                    bool(settings.get("include_other_disease", True)),
                                                    str(settings.get("name", Path(config.data).name)))
        return f"{description} (packed shards)", synthetic, command
    info = Path(config.data) / "dataset.json"
    meta = json.loads(info.read_text()) if config.layout == "synthetic" and info.is_file() else None
    if any(row.source for row in rows):
        return sources_description(config, rows), False, None
    return _describe(config.layout, meta, config.include_other_disease, Path(config.data).name)


def _describe(layout: str, meta: dict[str, Any] | None, include_other_disease: bool,
              name: str) -> tuple[str, bool, str | None]:
    if layout == "synthetic" and meta is not None:
        command = (f"radscreen-train synth --out data/synth-train --n {meta.get('n_images')} --seed {meta.get('seed')} "
                   f"--size {meta.get('size')} --ungradable-fraction {meta.get('ungradable_fraction')}")
        return (f"synthetic fundus generator {meta.get('generator', '?')}, seed {meta.get('seed')}, "
                f"{meta.get('n_images')} images at {meta.get('size')} px", True, command)
    if layout == "odir":
        other = ("eyes with other eye diseases and no DR included as non-referable" if include_other_disease
                 else "eyes with other eye diseases left out")
        return f"{ODIR_DESCRIPTION}; {other}", False, None
    return f"{layout} manifest {name}", layout == "synthetic", None


def image_ids(rows: Sequence[ManifestRow]) -> list[str]:
    """One id per image for saved draws: the file name (unique within a data set's image folder), prefixed with
    the row's source and copy where the manifest names them (``odir/13_left.jpg``,
    ``eyepacs/natural-1024/13_left.jpg``): two programmes number their photographs alike."""
    return ["/".join(part for part in (row.source, row.copy, row.path.name) if part) for row in rows]


def mean_posterior_sigma(model: torch.nn.Module) -> float | None:
    """Mean σ = softplus(ρ) over every Bayesian weight and bias (None for non-Bayesian models)."""
    rhos = [p.detach().flatten() for n, p in model.named_parameters() if n.endswith("_rho")]
    return float(torch.nn.functional.softplus(torch.cat(rhos)).mean()) if rhos else None


COMMAND_FILE = "command.txt"  # the fit command that trained a run (its first call), written by ``fit``


def training_command(run_dir: Path) -> str | None:
    """The ``fit`` command a run was trained with (``command.txt``), or None for a run made before it was kept."""
    path = run_dir / COMMAND_FILE
    return path.read_text(encoding="utf-8").strip() or None if path.is_file() else None


def finalise_run(config: TrainConfig, *, data: PreparedData | None = None, command: str | None = None,
                 train_seconds: float = 0.0, reserved_by: str | None = None) -> FinalResult:
    """Score the run's best weights, fit the thresholds and write the artifact and its card. ``command``: the
    training command (the card's "Command:", which a warm start from this artifact reads as its parent's
    training); ``reserved_by``: the ``finalise`` command that re-served a finished run, named beside it."""
    run_dir = Path(config.out)
    data = data or prepare_data(config)
    model, rounding = _served_model(config, run_dir)
    bayesian = is_bayesian(model)  # baselines (MC dropout, deterministic) have no posterior to draw
    draws = config.serving_draws() if bayesian else replace(config.serving_draws(), head_draws=1)

    def score(split: str, served: ServingDraws) -> tuple[Any, Any]:
        dataset = data.val if split == "val" else data.test
        probs, labels = mc_probabilities(model, dataset, mean=data.mean, std=data.std, draws=served)
        # the per-draw probabilities, so ensembles and method − method comparisons need no re-scoring
        save_draws(run_dir / f"eval_{split}" / DRAWS_FILENAME, probs, labels, image_ids(dataset.rows))
        return probs, labels

    def evaluate(split: str, probs: Any, labels: Any, threshold: float | None, decision: float) -> EvaluationReport:
        report = evaluate_predictions(probs, labels, n_bootstrap=config.n_bootstrap, seed=config.seed,
                                      decision_threshold=decision, target_referral_rate=config.target_referral_rate,
                                      referral_threshold_mi=threshold)
        write_report(report, run_dir / f"eval_{split}")
        return report

    def per_source(split: str, probs: Any, labels: Any, report: EvaluationReport) -> dict[str, Any] | None:
        """The split's figures per source (and per copy) beside the pooled ones, at the pooled thresholds."""
        return report_by_source(probs, labels, (data.val if split == "val" else data.test).rows,
                                run_dir / f"eval_{split}" / "by_source.json", n_bootstrap=config.n_bootstrap,
                                seed=config.seed, target_referral_rate=config.target_referral_rate,
                                decision_threshold=report.decision_threshold,
                                referral_threshold_mi=float(report.referral_threshold.threshold))

    choice: ServingChoice | None = None
    if config.views == "auto" and bayesian:  # each option scored with the draws it would serve
        draws, choice, (val_probs, val_labels) = _choose_views(config, lambda served: score("val", served), run_dir)
        save_draws(run_dir / "eval_val" / DRAWS_FILENAME, val_probs, val_labels, image_ids(data.val.rows))
    else:
        val_probs, val_labels = score("val", draws)
    operating = _operating_point(config, val_probs, val_labels)
    decision = config.decision_threshold if operating is None else operating.decision_threshold
    val = evaluate("val", val_probs, val_labels, None if operating is None else operating.referral_threshold_mi,
                   decision)
    val_summary = val.calibration_summary()
    sources: dict[str, Any] = {"val": per_source("val", val_probs, val_labels, val)}
    test = None
    test_shares: dict[str, float] | None = None
    if len(data.test) > 1:
        test_probs, test_labels = score("test", draws)
        test = evaluate("test", test_probs, test_labels, val_summary["referral_threshold_mi"], decision)
        sources["test"] = per_source("test", test_probs, test_labels, test)
        test_shares = _shares_at(operating, test_probs, test_labels)
    if not is_bayesian(model):
        log.warning("%s is a baseline without fixed posterior draws: reports written, no serving artifact",
                    config.model)
        return FinalResult(None, None, val, test)
    description, synthetic, data_command = _dataset_description(
        config, [*data.train.rows, *data.val.rows, *data.test.rows])
    calibration = _calibration(val_summary, test, choice, operating, test_shares, decision, description)
    history = read_history(run_dir)
    if history:  # per-epoch times add up across resumed calls; this call's own time would not
        train_seconds = sum(float(row.get("seconds", 0.0)) for row in history)
    card = render_model_card(
        config=config, command=command or " ".join(shlex.quote(a) for a in ["radscreen-train", *sys.argv[1:]]),
        dataset={"description": description, "command": data_command, "n_train": len(data.train),
                 "n_val": len(data.val), "n_test": len(data.test)},
        history=history, val_summary=val_summary, test_summary=test.calibration_summary() if test else None,
        train_seconds=train_seconds, synthetic=synthetic, n_parameters=count_parameters(model),
        posterior_sigma=mean_posterior_sigma(model), best_epoch=_best_epoch(history, config),
        storage=storage_line(rounding, config.weights_dtype), init=load_init_record(run_dir),
        operating=operating.as_dict() if operating is not None else None, operating_test=test_shares,
        by_source=sources if sources["val"] is not None else None, draws=draws,
        serving_choice=choice, reserved_by=reserved_by)
    art_config = _artifact_config(config, model, data, draws, description, synthetic)
    artifact_dir = Path(config.artifact or run_dir / "artifact")
    sha = save_artifact(artifact_dir, model=model.cpu(), config=art_config, calibration=calibration, model_card=card,
                        weights_dtype=DTYPES[config.weights_dtype], overwrite=True)
    log.info("artifact %s (sha256 %s)", artifact_dir, sha)
    return FinalResult(artifact_dir, sha, val, test)


def _shares_at(operating: OperatingPoint | None, probs: Any, labels: Any) -> dict[str, float] | None:
    """The outcome shares of the scored eyes at the validation eyes' operating point (None without one)."""
    if operating is None:
        return None
    unc = mc_uncertainty(probs)
    return outcome_shares(unc.probability, unc.mutual_information, labels,
                          decision_threshold=operating.decision_threshold,
                          referral_threshold_mi=operating.referral_threshold_mi)


def _artifact_config(config: TrainConfig, model: Any, data: PreparedData, draws: ServingDraws, description: str,
                     synthetic: bool) -> ArtifactConfig:
    """The served network's config: architecture, input statistics, posterior and prior, the serving draws."""
    return ArtifactConfig(
        name=config.name, version=config.version, architecture=model.config,
        input=replace(config.image_transform(), mean=data.mean, std=data.std), serving=draws,
        posterior=model.config.layer, prior=dict(config.prior), pass_budget=config.pass_budget,
        training_data="synthetic" if synthetic else f"real: {description}",
        intended_use=SYNTHETIC_USE if synthetic else REAL_USE)


def _served_model(config: TrainConfig, run_dir: Path) -> tuple[Any, Any]:
    """The run's best weights on the training device (the serving draws are scored there), cast through the
    storage dtype first so that the thresholds are fitted on the weights that will be served; and the rounding
    record of that cast."""
    model = build_model(config)
    model.load_state_dict(load_file(str(run_dir / BEST_WEIGHTS)))
    model.to(compute.resolve_device(config.device)).eval()
    rounding = rounding_to_sd(model, config.weights_dtype)
    if config.weights_dtype != "fp32":
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(DTYPES[config.weights_dtype]).float())
    return model, rounding


def _operating_point(config: TrainConfig, val_probs: Any, val_labels: Any) -> OperatingPoint | None:
    """The screening rule's thresholds on the validation eyes, sensitivity first (``--max-missed-share``;
    ``evaluation.operating_point``), or None without a bound."""
    if config.max_missed_share is None:
        return None
    unc = mc_uncertainty(val_probs)
    return screening_operating_point(unc.probability, unc.mutual_information, val_labels,
                                     max_missed_share=config.max_missed_share)


def _calibration(val_summary: dict[str, Any], test: EvaluationReport | None, choice: ServingChoice | None,
                 operating: OperatingPoint | None, test_shares: dict[str, float] | None, decision: float,
                 description: str) -> Calibration:
    """The artifact's calibration: the thresholds and what the validation (and test) eyes showed at them."""
    validation: dict[str, Any] = {**val_summary["validation"],
                                  "test": test.calibration_summary()["validation"] if test else None}
    if choice is not None:
        validation["serving_option"] = choice.as_dict()
    if operating is not None:
        validation["operating_point"] = operating.as_dict()
        validation["operating_point_test"] = test_shares
    return Calibration(
        referral_threshold_mi=float(val_summary["referral_threshold_mi"]),
        target_referral_rate=float(val_summary["target_referral_rate"]),
        achieved_referral_rate=val_summary["achieved_referral_rate"],
        decision_threshold=decision,
        validation=validation,
        dataset=description,
    )


def _choose_views(config: TrainConfig, score: Callable[[ServingDraws], tuple[Any, Any]],
                  run_dir: Path) -> tuple[ServingDraws, ServingChoice, tuple[Any, Any]]:
    """``views="auto"``: K draws x 1 view against K/2 draws x 2 views, the same forward passes, each
    scored with the draws it would serve; the validation eyes choose (``choose_serving_option``)."""
    one, flip = config.serving_draws(), config.flip_option()
    options = {draws: score(draws) for draws in (one, flip)}
    labels = options[one][1]
    choice = choose_serving_option(
        {ONE_VIEW: (options[one][0], float(one.passes)), TEST_TIME_FLIP: (options[flip][0], float(flip.passes))},
        labels, n_bootstrap=config.n_bootstrap, seed=config.seed, max_missed_share=config.max_missed_share or 0.03)
    log.info("serving option: %s", choice.sentence())
    (run_dir / "eval_val").mkdir(parents=True, exist_ok=True)
    (run_dir / "eval_val" / "serving_choice.json").write_text(json.dumps(choice.as_dict(), indent=2) + "\n")
    chosen = flip if choice.chosen == TEST_TIME_FLIP else one
    return chosen, choice, options[chosen]


def _best_epoch(history: list[dict[str, Any]], config: TrainConfig) -> int | None:
    """The epoch whose weights are in ``best.safetensors``: the lowest ``config.select_by``."""
    scored = [r for r in history if r.get(config.select_by) == r.get(config.select_by)]  # drop NaN
    return int(min(scored, key=lambda r: float(r[config.select_by]))["epoch"]) if scored else None


def summary_lines(result: FinalResult) -> list[str]:
    def fmt(r: EvaluationReport) -> dict[str, Any]:
        s = r.calibration_summary()
        v = s["validation"]
        return {"auc": v["auc"], "accuracy": v["accuracy"], "ece": v["ece"], "auc_at_referral": v["auc_at_referral"],
                "referral_rate": s["achieved_referral_rate"]}
    lines = [f"artifact: {result.artifact_dir} (sha256 {result.sha256})" if result.artifact_dir else
             "artifact: none (baseline models are evaluated, not served)",
             f"validation: {json.dumps(fmt(result.validation))}"]
    if result.test is not None:
        lines.append(f"test: {json.dumps(fmt(result.test))}")
    return lines
