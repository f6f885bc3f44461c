"""How an artifact spends its pass budget: network draws × views at equal forward passes, chosen on validation.

The service's work per photograph is K network draws × the views (1: the image as taken; 2: also mirrored,
test-time flip); head draws cost no pass. At a fixed budget (16 passes) the splits are ``16 × 1`` and
``8 × 2``. :func:`choose_pass_split` compares them on the validation eyes, each with the draws it would
serve, and against a **reference** (the artifact's served option, which may cost more), by

- AUC (patient bootstrap 95 % interval) and calibration (ECE);
- the value of its MI as a deferral signal: kept-eye AUC after MI referral minus random referral
  (``training.evaluation.serving_choice``, paired bootstrap);
- the screening operating point (``training.evaluation.operating_point``) fitted on every validation eye
  (in sample) and **cross-fitted**: fitted on a random half of the patients and counted on the other half,
  both ways, ``repeats`` times, so that each eye's miss and automatic answer come from thresholds it did not
  choose;
- paired differences against the reference, resampling patients (95 % percentile intervals): AUC, and the
  cross-fitted miss and automatic-answer shares.

The rule: among the options within the budget, drop those worse than the reference beyond their paired
intervals (AUC lower, or cross-fitted miss share higher); among the rest (or all within the budget when none
is left, which the record says), ``choose_serving_option``'s rule (whose MI earns its keep, then the highest
mean kept-eye AUC, ties to fewer passes, then the first listed).

Example::

    options = [PassOption(16, 1, 64, probs_16x1), PassOption(8, 2, 64, probs_8x2),
               PassOption(16, 2, 64, probs_16x2, served=True)]
    choice = choose_pass_split(options, labels, patients=patient_ids, sources=sources, budget=16,
                               max_missed_share=0.02)
    choice.chosen        # "8 draws × 2 views"
    print(split_table(choice))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.metrics import roc_auc_score

from training.evaluation.calibration import expected_calibration_error
from training.evaluation.cross_fit import (
    Interval,
    bootstrap_weights,
    cross_fitted,
    interval,
    patient_groups,
    share_difference,
    weighted_aucs,
)
from training.evaluation.operating_point import screening_operating_point
from training.evaluation.serving_choice import ServingChoice, choose_serving_option
from training.evaluation.serving_choice import _defined as defined
from training.evaluation.uncertainty import mc_uncertainty


@dataclass(frozen=True)
class PassOption:
    """One way of spending the passes: ``probs`` ``[views·draws·head_draws, N]`` on the validation eyes."""

    draws: int
    views: int
    head_draws: int
    probs: NDArray[np.float64] = field(repr=False)
    served: bool = False  # the artifact's current option: the reference

    @property
    def passes(self) -> int:
        return self.draws * self.views

    @property
    def name(self) -> str:
        return f"{self.draws} draws × {self.views} view{'s' if self.views > 1 else ''}"


@dataclass(frozen=True)
class PassRow:
    """One option on the validation eyes."""

    name: str
    draws: int
    views: int
    head_draws: int
    passes: int
    within_budget: bool
    served: bool
    auc: Interval
    auc_by_source: dict[str, float]
    ece: float
    mi_minus_random: tuple[float, ...]  # at serving_choice.FRACTIONS
    mi_ci_low: tuple[float, ...]
    mi_ci_high: tuple[float, ...]
    in_sample: dict[str, float]  # the operating point on every validation eye: missed/auto_negative/uncertain
    cross_fitted: dict[str, float]  # the same shares, each eye counted at thresholds fitted without it
    vs_reference: dict[str, Interval] | None  # auc, missed_share, auto_negative_share: this − the reference

    @property
    def worse_than_reference(self) -> bool:
        """Lower AUC or a higher cross-fitted miss share than the reference beyond the paired interval."""
        if self.vs_reference is None:
            return False
        return self.vs_reference["auc"].high < 0 or self.vs_reference["missed_share"].low > 0


@dataclass(frozen=True)
class PassSplitChoice:
    chosen: str
    budget: int
    reference: str | None
    rows: tuple[PassRow, ...]
    serving: ServingChoice  # the rule's record among the eligible options
    eligible: tuple[str, ...]
    none_within_reference: bool  # every option within the budget was worse than the reference
    max_missed_share: float
    repeats: int
    n_bootstrap: int
    n_images: int
    n_patients: int

    def row(self, name: str) -> PassRow:
        return next(r for r in self.rows if r.name == name)

    def as_dict(self) -> dict[str, Any]:
        return defined({
            "chosen": self.chosen, "budget": self.budget, "reference": self.reference,
            "eligible": list(self.eligible), "none_within_reference": self.none_within_reference,
            "max_missed_share": self.max_missed_share, "repeats": self.repeats, "n_bootstrap": self.n_bootstrap,
            "n_images": self.n_images, "n_patients": self.n_patients, "rule": self.serving.as_dict(),
            "rows": [{**asdict(r), "worse_than_reference": r.worse_than_reference} for r in self.rows]})

    def sentence(self) -> str:
        """One line for the model card: the split served and why."""
        r = self.row(self.chosen)
        ref = self.row(self.reference) if self.reference and self.reference != self.chosen else None
        text = (f"Pass split: **{self.chosen}** ({r.passes} passes, budget {self.budget}), chosen on the "
                f"{self.n_images} validation eyes ({self.n_patients} patients) among "
                + ", ".join(x.name for x in self.rows if x.within_budget)
                + f": AUC {r.auc.text()}, ECE {r.ece:.3f}, cross-fitted miss share "
                f"{_pct(r.cross_fitted['missed_share'])} at a bound of {_pct(self.max_missed_share)}")
        if ref is not None and r.vs_reference is not None:
            d = r.vs_reference
            text += (f"; against {ref.name} ({ref.passes} passes): AUC {d['auc'].text(signed=True)}, miss share "
                     f"{d['missed_share'].text(signed=True, pct=True)}")
        if self.none_within_reference:
            text += "; **every split within the budget was worse than the reference beyond its paired interval**"
        return text + "."


def choose_pass_split(options: Sequence[PassOption], labels: ArrayLike, *, patients: Sequence[str],
                      sources: Sequence[str], budget: int, max_missed_share: float, repeats: int = 200,
                      n_bootstrap: int = 1000, seed: int = 0) -> PassSplitChoice:
    """The module's rule over ``options`` (each on the same N eyes; at most one ``served``)."""
    y = np.asarray(labels).astype(np.int64).ravel()
    if len(patients) != y.size or len(sources) != y.size:
        raise ValueError(f"labels for {y.size} eyes, patients for {len(patients)}, sources for {len(sources)}")
    names = [o.name for o in options]
    if len(set(names)) != len(names):
        raise ValueError(f"options repeat a split: {names}")
    if sum(o.served for o in options) > 1:
        raise ValueError("more than one option is marked served")
    within = [o for o in options if o.passes <= budget]
    if not within:
        raise ValueError(f"no option within the budget of {budget} passes: {names}")
    group = patient_groups(patients)
    reference = next((o for o in options if o.served), None)
    rng = np.random.default_rng(seed)
    weights = bootstrap_weights(group, n_bootstrap, rng)
    halves = [rng.random(int(group.max()) + 1) < 0.5 for _ in range(repeats)]
    unc = {o.name: mc_uncertainty(o.probs) for o in options}
    for o in options:
        if unc[o.name].probability.shape != y.shape:
            raise ValueError(f"option {o.name!r}: draws for {unc[o.name].probability.shape[0]} eyes, labels for "
                             f"{y.size}")
    outcomes = {o.name: cross_fitted(unc[o.name].probability, unc[o.name].mutual_information, y, group, halves,
                                      max_missed_share) for o in options}
    aucs = {o.name: weighted_aucs(unc[o.name].probability, y, weights) for o in options}
    rule_rows = {r.name: r for o in options
                 for r in choose_serving_option({o.name: (o.probs, float(o.passes))}, y, n_bootstrap=200, seed=seed,
                                                max_missed_share=max_missed_share).rows}
    src = np.asarray(sources)
    rows = []
    for o in options:
        u = unc[o.name]
        op = screening_operating_point(u.probability, u.mutual_information, y, max_missed_share=max_missed_share)
        missed, auto = outcomes[o.name]
        vs = None
        if reference is not None and o is not reference:
            rm, ra = outcomes[reference.name]
            vs = {"auc": interval(roc_auc_score(y, u.probability) - roc_auc_score(y, unc[reference.name].probability),
                                   aucs[o.name] - aucs[reference.name]),
                  "missed_share": share_difference(missed - rm, y == 1, weights),
                  "auto_negative_share": share_difference(auto - ra, y == 0, weights)}
        rr = rule_rows[o.name]
        rows.append(PassRow(
            name=o.name, draws=o.draws, views=o.views, head_draws=o.head_draws, passes=o.passes,
            within_budget=o.passes <= budget, served=o.served,
            auc=interval(float(roc_auc_score(y, u.probability)), aucs[o.name]),
            auc_by_source={s: _auc(y[src == s], u.probability[src == s]) for s in sorted(set(sources))},
            ece=float(expected_calibration_error(u.probability, y)),
            mi_minus_random=rr.mi_minus_random, mi_ci_low=rr.ci_low, mi_ci_high=rr.ci_high,
            in_sample={"missed_share": op.missed_share, "auto_negative_share": op.auto_negative_share,
                       "uncertain_share": op.uncertain_share, "decision_threshold": op.decision_threshold,
                       "referral_threshold_mi": op.referral_threshold_mi},
            cross_fitted={"missed_share": float(missed[y == 1].mean()),
                          "auto_negative_share": float(auto[y == 0].mean())},
            vs_reference=vs))
    eligible = [r for r in rows if r.within_budget and not r.worse_than_reference]
    none_within = not eligible
    pool = eligible or [r for r in rows if r.within_budget]
    by_name = {o.name: o for o in options}
    serving = choose_serving_option({r.name: (by_name[r.name].probs, float(r.passes)) for r in pool}, y,
                                    n_bootstrap=200, seed=seed, max_missed_share=max_missed_share)
    return PassSplitChoice(chosen=serving.chosen, budget=budget, reference=reference.name if reference else None,
                           rows=tuple(rows), serving=serving, eligible=tuple(r.name for r in pool),
                           none_within_reference=none_within, max_missed_share=max_missed_share, repeats=repeats,
                           n_bootstrap=n_bootstrap, n_images=int(y.size), n_patients=int(group.max()) + 1)


def split_table(choice: PassSplitChoice) -> str:
    """The results page's table: one row per option, the chosen one in bold."""
    ref = choice.reference
    head = ("| split | passes | AUC (95 % CI) | AUC by source | ECE | MI − random kept-eye AUC, 20 % referred | "
            "miss share in sample / cross-fitted | automatic answers (non-referable) in sample / cross-fitted | "
            f"Δ AUC vs {ref or 'reference'} | Δ cross-fitted miss share |")
    lines = [head, "| --- | ---: | --- | --- | ---: | --- | --- | --- | --- | --- |"]
    mid = 1  # serving_choice.FRACTIONS = (0.1, 0.2, 0.3): the 20 % entry
    for r in choice.rows:
        name = f"**{r.name}** (chosen)" if r.name == choice.chosen else r.name
        name += " (served before)" if r.served else ""
        name += "" if r.within_budget else " (over budget)"
        d = r.vs_reference
        lines.append(
            f"| {name} | {r.passes} | {r.auc.text()} | "
            + ", ".join(f"{s} {v:.3f}" for s, v in r.auc_by_source.items())
            + f" | {r.ece:.3f} | {r.mi_minus_random[mid]:+.3f} ({r.mi_ci_low[mid]:+.3f}, {r.mi_ci_high[mid]:+.3f}) | "
            f"{_pct(r.in_sample['missed_share'])} / {_pct(r.cross_fitted['missed_share'])} | "
            f"{_pct(r.in_sample['auto_negative_share'])} / {_pct(r.cross_fitted['auto_negative_share'])} | "
            + (f"{d['auc'].text(signed=True)} | {d['missed_share'].text(signed=True, pct=True)} |" if d else "— | — |"))
    return "\n".join(lines)


def _auc(y: NDArray[np.int64], p: NDArray[np.float64]) -> float:
    return float(roc_auc_score(y, p)) if len(np.unique(y)) == 2 else float("nan")


def _pct(v: float) -> str:
    return f"{100 * v:.1f} %" if np.isfinite(v) else "n/a"


__all__ = ["PassOption", "PassRow", "PassSplitChoice", "choose_pass_split", "split_table"]
