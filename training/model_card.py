"""The model card (``MODEL_CARD.md``) written into every artifact."""

from __future__ import annotations

import math
import platform
import re
from typing import Any

import torch

from models.artifact.schema import PASS_BUDGET, ServingDraws
from models.platform.cpu import detect_cpu
from training.config import TrainConfig
from training.data.augment import AugmentConfig, FramingConfig, JitterConfig
from training.diagnostics import OPTIMISER_LIMIT
from training.evaluation.operating_point import MAX_MI
from training.evaluation.serving_choice import ServingChoice
from training.warm_start import InitSource

SYNTHETIC_USE = (
    "Research and engineering demonstration only. Trained on synthetic, procedurally generated fundus "
    "images; NOT validated on real patients and NOT for clinical use or diagnosis."
)


REAL_USE = (
    "Research use only: screening-triage research on retinal photographs. Trained on the real photographs "
    "named under Training data; NOT validated clinically, NOT a medical device and NOT for clinical use or "
    "diagnosis."
)


def _pct(v: Any) -> str:
    return "n/a" if v is None or v != v else f"{100 * float(v):.1f} %"


def _num(v: Any) -> str:
    """A metric to 3 decimals, or "n/a" when undefined (e.g. AUC once referral leaves one class)."""
    return "n/a" if v is None or v != v else f"{float(v):.3f}"


def serving_line(draws: ServingDraws, budget: int) -> str:
    """The card's "Serving:" line: how the forward passes are spent, against the budget."""
    over = "" if budget <= PASS_BUDGET else f", an explicit budget over the design's {PASS_BUDGET}"
    return (f"- Serving: **{draws.passes} forward passes per image ({draws.split_text()}; pass budget {budget}"
            f"{over})**: {draws.mc_samples} posterior draws, seed {draws.draw_seed}"
            + (f", each with {draws.head_draws} draws of the final layer ({draws.mc_samples * draws.head_draws} "
               "posterior samples per view at no extra pass; docs/results-serving-estimator.md, 'Head draws')"
               if draws.head_draws > 1 else "")
            + ("; **test-time flip**: every image is also scored mirrored left-right and the probability and the "
               "mutual information are taken over both orientations' draws." if draws.test_time_flip
               else "; one view (the image as taken)."))


def ece_text(summary: dict[str, Any]) -> str:
    """ECE with its bootstrap SE and the ECE a calibrated model would show on these images, when recorded."""
    text = _num(summary.get("ece"))
    se, floor = summary.get("ece_se"), summary.get("ece_calibrated_floor")
    if se is not None and se == se:
        text += f" ± {float(se):.3f}"
    if floor is not None and floor == floor:
        text += f" (a perfectly calibrated model would show {float(floor):.3f} on these images by sampling alone)"
    return text


def machine_description() -> str:
    device = (torch.cuda.get_device_name(0) if torch.cuda.is_available()
              else f"CPU {detect_cpu().summary()}, {torch.get_num_threads()} threads")
    return f"{platform.machine()} {platform.system()}, {device}, torch {torch.__version__}"


def input_text(config: TrainConfig) -> str:
    """How every training image reached the network: the service's own crop, then the augmentation that ran."""
    crop = (f"`{config.preprocessing}` at {config.input_size} px, the crop to the fitted field of view that the "
            "service and the batch job run (models.image.preprocessing)")
    if not config.augment:
        return crop + "; no augmentation."
    warp, jitter, framing = AugmentConfig(), JitterConfig(), FramingConfig()
    low, high = warp.scale_range
    parts = [f"rotation up to ±{warp.max_rotation_deg:g}°, flips, scale {low:g}-{high:g}"]
    if config.color_jitter:
        parts.append(f"contrast ×{jitter.contrast[0]:g}-{jitter.contrast[1]:g}, channel gain ±{jitter.channel_gain:g}, "
                     f"resolution loss in {100 * jitter.blur_prob:g} % of images")
    if config.frame_cuts:
        parts.append(f"framing cuts (a camera frame in {100 * framing.camera_prob:g} %, a tight square crop on "
                     f"four sides in {100 * framing.tight_prob:g} %, a notch at the rim in "
                     f"{100 * framing.notch_prob:g} %)")
    return crop + "; augmentation: " + "; ".join(parts) + "."


def render_model_card(*, config: TrainConfig, command: str, dataset: dict[str, Any], history: list[dict[str, Any]],
                      val_summary: dict[str, Any], test_summary: dict[str, Any] | None, train_seconds: float,
                      synthetic: bool, n_parameters: int, posterior_sigma: float | None = None,
                      best_epoch: int | None = None, storage: str | None = None,
                      init: InitSource | None = None, operating: dict[str, Any] | None = None,
                      operating_test: dict[str, Any] | None = None,
                      by_source: dict[str, dict[str, Any] | None] | None = None,
                      draws: ServingDraws | None = None, serving_choice: ServingChoice | None = None,
                      reserved_by: str | None = None) -> str:
    """The card's markdown. ``draws``: the serving form the artifact carries (default: the config's);
    ``serving_choice``: the validation measurement that chose it (``views="auto"``)."""
    draws = draws or config.serving_draws()
    sigma0 = init.sigma_mean if init is not None and init.sigma_mean is not None else softplus(config.rho_init)
    lines = [
        f"# Model card: {config.name} {config.version}",
        "",
        "## Intended use",
        SYNTHETIC_USE if synthetic else REAL_USE,
        "",
        "The model returns a probability of referable diabetic retinopathy (EyePACS grade >= 2) and the mutual "
        "information between prediction and weights (epistemic uncertainty) from fixed posterior draws. "
        "Images whose uncertainty exceeds the calibrated threshold, or that fail the image-quality gate, are "
        "deferred to a human grader.",
        "",
        "## Model",
        f"- Architecture: VGG-16* (width {config.width}, input {config.input_size} px), "
        f"{config.model}, {n_parameters:,} parameters (means and rho).",
        f"- Posterior: {config.model.split('_')[0]}; prior: {config.prior}; "
        + (f"initialised from {init.describe()}." if init is not None else f"rho init {config.rho_init}."),
        serving_line(draws, config.pass_budget),
        *([f"- {serving_choice.sentence()}"] if serving_choice is not None else []),
        "",
        "## Training data",
        f"- Provenance: {'SYNTHETIC (procedural fundus generator, training.synthetic)' if synthetic else 'real'}.",
        f"- Source: {dataset.get('description', config.data)}",
        *([f"- Regenerate: `{dataset['command']}`"] if dataset.get("command") else []),
        f"- Images: train {dataset.get('n_train')}, validation {dataset.get('n_val')}, test {dataset.get('n_test')} "
        f"(patient-level split {list(config.split)}{' within each source' if by_source else ''}, "
        f"split seed {config.effective_split_seed}, "
        f"weight seed {config.seed}; ungradable images "
        f"{'excluded' if config.gradable_only else 'included'}).",
        "",
        "## Training",
        f"- Command: `{portable(command)}`",
        *([f"- Re-served from the run's best weights (thresholds, serving option and this card): "
           f"`{portable(reserved_by)}`"] if reserved_by else []),
        *(init_lines(init) if init is not None else []),
        f"- Objective: {config.nll_epochs} NLL-only epoch(s) on the means, then {objective_text(config)}"
        f"; batch {config.batch_size}, "
        f"{config.train_samples} MC sample(s) per step, {config.precision} autocast, {config.epochs} epochs"
        + (f" of at most {config.max_steps_per_epoch} steps" if config.max_steps_per_epoch else "") + ".",
        f"- Input and augmentation: {input_text(config)}",
        *recipe_lines(config, history, best_epoch, init),
        f"- Machine: {machine_description()}; wall time {train_seconds / 60:.1f} min.",
        *([f"- Posterior scale after training: mean σ {posterior_sigma:.3g} (initial "
           + (f"mean σ of {init.name} {init.version}" if init is not None else "softplus(ρ_init)")
           + f" {sigma0:.3g}). A σ still near its initial value means the posterior is "
           "narrow and the mutual information small: the model is under-trained for its uncertainty."]
          if posterior_sigma is not None else []),
        *([storage] if storage else []),
        "",
        *validation_lines(val_summary, operating is not None),
    ]
    if test_summary is not None:
        lines += ["", *test_lines(test_summary)]
    if operating is not None:
        lines += ["", *operating_point_lines(operating, operating_test)]
    if by_source:
        lines += ["", *by_source_lines(by_source)]
    if history:
        lines += ["", "## Training log (last epoch)", *last_epoch_lines(history[-1])]
    lines += ["", *limitation_lines(synthetic, several_sources=bool(by_source)), ""]
    return "\n".join(lines)


def limitation_lines(synthetic: bool, *, several_sources: bool) -> list[str]:
    """The card's limitations: the data it was trained on, its binary output, what the threshold does not do."""
    return ["## Limitations",
            "- Synthetic images differ from real fundus photographs in countless ways; performance on real "
            "data is unknown." if synthetic else
            "- Trained and tested on the sources named under Training data (figures per source above): their "
            "populations, cameras and labelling; other programmes' photographs may score differently. Labels "
            "mapped from clinical keywords are noisy." if several_sources else
            "- Trained and tested on one source (see Training data): its "
            "population, cameras and labelling; other programmes' photographs may score differently. Labels "
            "mapped from clinical keywords are noisy.",
            "- Binary referable/non-referable output only; no lesion localisation; no macular-oedema grading.",
            "- The uncertainty threshold was set on the validation split of the same data distribution; it "
            "does not guarantee detection of out-of-distribution inputs (the quality gate covers some)."]


def validation_lines(val_summary: dict[str, Any], by_operating_point: bool) -> list[str]:
    """The card's validation section from ``EvaluationReport.calibration_summary()``; ``by_operating_point``:
    the MI threshold was set by the screening operating point rather than a target referral rate."""
    val = val_summary.get("validation", {})
    lines = [
        "## Validation (serving draws)",
        f"- AUC {val.get('auc', float('nan')):.3f}, accuracy {_pct(val.get('accuracy'))} at the decision "
        f"threshold p̄ >= {val_summary.get('decision_threshold', 0.5):.4g}, ECE {ece_text(val)}.",
        (f"- MI referral threshold {val_summary.get('referral_threshold_mi', float('nan')):.3g} nat, set by the "
         f"screening operating point below (defers {_pct(val_summary.get('achieved_referral_rate'))} of these "
         "images)." if by_operating_point else
         f"- MI referral threshold {val_summary.get('referral_threshold_mi', float('nan')):.3g} nat for a target "
         f"referral rate of {_pct(val_summary.get('target_referral_rate'))} "
         f"(achieved {_pct(val_summary.get('achieved_referral_rate'))})."),
        *mi_scale_lines(val.get("mi_quantiles")),
    ]
    for key, label in (("auc_at_referral", "AUC"), ("accuracy_at_referral", "accuracy")):
        at = val.get(key, {})
        if at:
            lines.append(f"- {label} after referring by MI: " + ", ".join(
                f"{_pct(float(k))} referred -> {_num(v)}" for k, v in sorted(at.items())))
    return lines


def test_lines(test_summary: dict[str, Any]) -> list[str]:
    """The card's held-out test section, at the validation thresholds."""
    tv = test_summary.get("validation", {})
    lines = ["## Held-out test split",
             f"- AUC {tv.get('auc', float('nan')):.3f}, accuracy {_pct(tv.get('accuracy'))} at the decision "
             f"threshold, ECE {ece_text(tv)}; referral rate at the validation threshold "
             f"{_pct(test_summary.get('achieved_referral_rate'))}.", *mi_scale_lines(tv.get("mi_quantiles"))]
    at = tv.get("auc_at_referral", {})
    if at:
        lines.append("- AUC after referring by MI: " + ", ".join(
            f"{_pct(float(k))} -> {_num(v)}" for k, v in sorted(at.items())))
    return lines


def operating_point_lines(op: dict[str, Any], test: dict[str, Any] | None) -> list[str]:
    """The screening operating point (training.evaluation.operating_point) and what it does on test."""
    lines = [
        "## Screening operating point",
        f"- Chosen on validation so that at most {_pct(op['max_missed_share'])} of referable eyes are answered "
        "no_referable_dr, answering as many non-referable eyes as possible: decision threshold "
        f"p̄ >= {op['decision_threshold']:.4g} refers, "
        + (f"MI > {op['referral_threshold_mi']:.3g} nat defers." if op["referral_threshold_mi"] < MAX_MI - 1e-9 else
           "and **nothing is deferred as uncertain**: deferring any share of the eyes by MI answered no more "
           "non-referable eyes on validation, so the MI threshold is ln 2 nat, the largest MI a binary answer can "
           "have. MI is still reported with every answer."),
        f"- Validation ({op['n_referable']} referable, {op['n_non_referable']} non-referable eyes): "
        f"{_pct(op['missed_share'])} of referable eyes answered no_referable_dr (one-sided 95 % upper bound "
        f"{_pct(op['missed_share_upper95'])}), {_pct(op['auto_negative_share'])} of non-referable eyes answered "
        f"no_referable_dr, {_pct(op['uncertain_share'])} deferred as uncertain, {_pct(op['referred_share'])} "
        "referred.",
    ]
    if test is not None:
        lines.append(f"- Test split at these thresholds: {_pct(test['missed_share'])} of referable eyes answered "
                     f"no_referable_dr, {_pct(test['auto_negative_share'])} of non-referable eyes answered "
                     f"no_referable_dr, {_pct(test['uncertain_share'])} deferred, {_pct(test['referred_share'])} "
                     "referred (every image scored; the service's quality gate comes on top).")
    return lines


def by_source_lines(by_source: dict[str, dict[str, Any] | None]) -> list[str]:
    """Validation and test per source (and per copy) beside the pooled figures, at the pooled thresholds
    (``training.evaluation.by_source``)."""
    lines = ["## Per source",
             "Every figure at the thresholds set on the pooled validation images; a source whose referable eyes "
             "are answered no_referable_dr more often than the pooled rule allows is visible here.", "",
             "| split | group | eyes | referable | AUC | ECE | referable answered no_referable_dr | "
             "non-referable answered no_referable_dr | deferred as uncertain |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for split, label in (("val", "validation"), ("test", "test")):
        for group, row in (by_source.get(split) or {}).items():
            out = row.get("outcomes", {})
            lines.append(f"| {label} | {group} | {row.get('n_images')} | {row.get('n_referable')} | "
                         f"{_num(row.get('auc'))} | {_num(row.get('ece'))} | {_pct(out.get('missed_share'))} | "
                         f"{_pct(out.get('auto_negative_share'))} | {_pct(out.get('uncertain_share'))} |")
    return lines


def objective_text(config: TrainConfig) -> str:
    """What the run maximised after its NLL-only epochs: the full ELBO, or a tempered one, said plainly."""
    if config.kl_weight == 1:
        return "the full ELBO (mean NLL + KL / N_train, no KL down-weighting)"
    return (f"a TEMPERED ELBO (mean NLL + {config.kl_weight:g} · KL / N_train: the KL is down-weighted "
            f"{1 / config.kl_weight:g}-fold, a colder posterior than the ELBO's; every validation ELBO reported "
            "is the full one, at weight 1)")


def softplus(rho: float) -> float:
    return math.log1p(math.exp(rho))


def portable(command: str) -> str:
    """``command`` with every absolute path cut to ``…/<last part>``: a card travels with its artifact, and the
    folders of the machine it was trained on mean nothing elsewhere (and may name people or sites)."""
    return re.sub(r"(?<![\w.])/(?:[^\s/]+/)*([^\s/]+)", r"…/\1", command)


def init_lines(init: InitSource) -> list[str]:
    """Where a warm-started run began: the artifact, the command that trained it, what was kept."""
    return [f"- Initialised from: {init.describe()}, read from `{portable(str(init.directory))}`: its μ and ρ "
            f"(mean σ {init.sigma_mean:.3g}) and its input normalisation; fresh optimiser state. "
            "The epochs, Δρ and step budget below count from that initialisation.",
            f"- That model's training: `{portable(init.training_command or 'not recorded in its card')}`."]


def recipe_lines(config: TrainConfig, history: list[dict[str, Any]], best_epoch: int | None,
                 init: InitSource | None = None) -> list[str]:
    """The optimisation recipe and whether the optimiser's step budget, not the ELBO, set σ."""
    start = (f"ρ from {init.name} {init.version} (mean σ0 = {init.sigma_mean:.3g})" if init is not None else
             f"ρ init {config.rho_init} (σ0 = {softplus(config.rho_init):.3g})")
    best_text = ("0: no epoch of this run improved on the starting point, which is handed on unchanged"
                 if best_epoch == 0 else str(best_epoch) if best_epoch is not None else "n/a")
    lines = [
        f"- Optimiser: {config.optimizer} (amsgrad {config.amsgrad}), lr {config.lr} for the means, "
        f"{config.effective_rho_lr} for ρ (separate parameter group), weight decay {config.weight_decay} "
        f"(means only), schedule {config.lr_schedule}"
        + (f" (×{config.lr_gamma} every {config.lr_step_epochs} epochs)" if config.lr_schedule == "step" else "")
        + f"; {start}.",
        f"- Best epoch: {best_text} of {sum(1 for r in history if r.get('epoch', 1) >= 1)}, selected by the "
        f"lowest {'validation NLL' if config.select_by == 'val_nll' else 'validation NLL + KL/N (ELBO)'}"
        + (" (epoch 0 = the starting point, validated before the first step)." if init is not None else "."),
    ]
    row = next((r for r in history if r.get("epoch") == best_epoch), history[-1] if history else None)
    ratio = row.get("rho_budget_ratio") if row else None
    if row is not None and ratio is not None:
        flag = (f" **σ limited by the optimiser** (ratio > {OPTIMISER_LIMIT}): ρ moved by nearly all Adam allowed, "
                "so the step budget, not the ELBO, set σ; train longer or raise the ρ learning rate."
                if ratio > OPTIMISER_LIMIT else " σ was not limited by the optimiser's step budget.")
        lines.append(f"- Δρ/(lr·steps) = {ratio:.3f} at the selected epoch (mean |ρ − ρ0| "
                     f"{row['rho_shift_mean']:.4g} over a budget Σ lr_ρ = {row['rho_budget']:.4g})." + flag)
    if row is not None and "sigma/all/mean" in row:
        lines.append(f"- σ at the selected epoch: mean {row['sigma/all/mean']:.3g} (5–95 %: "
                     f"{row['sigma/all/q05']:.3g}–{row['sigma/all/q95']:.3g}); KL/N {row['kl_per_example']:.4g} nat; "
                     f"validation NLL {row['val_nll']:.4f}. Per-layer σ, NLL, KL/N and the NLL-gradient SD per epoch: "
                     "history.csv and training_curves.png in the run directory.")
    return lines


def mi_scale_lines(quantiles: dict[str, float] | None) -> list[str]:
    """The MI scale of an evaluation (quantiles in nats), or nothing for reports that predate it."""
    if not quantiles or "0.5" not in quantiles:
        return []
    q = quantiles
    return [f"- MI scale: median {q['0.5']:.3g} nat (quartiles {q.get('0.25', float('nan')):.3g}–"
            f"{q.get('0.75', float('nan')):.3g}, 5–95 %: {q.get('0.05', float('nan')):.3g}–"
            f"{q.get('0.95', float('nan')):.3g}); values are comparable only within this artifact."]


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def last_epoch_lines(row: dict[str, Any]) -> list[str]:
    """The last epoch's log as a readable table: scalar fields, then σ per layer (mean, 5–95 %) in one table.

    The per-layer keys ``sigma/<layer>/<stat>`` of the history become one row per layer instead of a
    single line of every statistic of every layer.
    """
    per_layer = ("sigma/", "rho_shift/", "rho_ratio/")
    scalars = [(k, v) for k, v in row.items() if not k.startswith(per_layer) and v is not None]
    layers: dict[str, dict[str, Any]] = {}
    for key, value in row.items():
        if key.startswith("sigma/") and key.count("/") == 2:
            _, layer, stat = key.split("/")
            layers.setdefault(layer, {})[stat] = value
        elif key.startswith("rho_ratio/"):
            layers.setdefault(key.split("/", 1)[1], {})["ratio"] = value
    if "rho_budget_ratio" in row and "all" in layers:
        layers["all"]["ratio"] = row["rho_budget_ratio"]
    lines = ["", "| field | value |", "| --- | --- |", *(f"| {k} | {_fmt(v)} |" for k, v in scalars)]
    if layers:
        lines += ["", f"| layer | σ mean | σ 5 % | σ 50 % | σ 95 % | Δρ/(lr·steps) (σ set by the optimiser above "
                  f"{OPTIMISER_LIMIT}) |", "| --- | --- | --- | --- | --- | --- |"]
        for layer, stats in layers.items():
            name = "all weights" if layer == "all" else layer
            cells = " | ".join(_fmt(stats.get(q, "-")) for q in ("mean", "q05", "q50", "q95", "ratio"))
            lines.append(f"| {name} | {cells} |")
    return lines
