"""Which serving option the product serves: chosen on the validation eyes, from each option's own draws.

A serving option is one way of forming the predictions the service averages per image, for instance the K
fixed posterior draws on the image as taken ("one view"), or on the image and its mirror image with the two
orientations' draws pooled ("test-time flip", ``ServingDraws.test_time_flip``). Whatever the option, the
mutual information of its predictions is the uncertainty the product reports and defers on, so the rule
asks of each option whether *its* MI earns its keep:

1. for each option, the kept-eye AUC after referring 10, 20 and 30 % of the eyes by its MI, minus the same
   after random referral, with paired bootstrap 95 % intervals (``training.evaluation.paired``);
2. an option **earns its keep** when the lower bound is above 0 at each of those fractions;
3. among the options that earn it, the one with the highest kept-eye AUC averaged over the three fractions;
   when none does, the same criterion over every option, and the choice records that MI referral beat
   random under none of them (the card then says so);
4. ties (within ``TIE``): the cheaper option (fewer forward passes per image), then the first listed.

Beside the rule, each option's screening operating point (``training.evaluation.operating_point``) says how
many non-referable eyes it lets the product answer automatically at the same bound on missed referable eyes,
with MI deferral and with none.

Example::

    probs = ...  # [2S, N] validation draws scored with test_time_flip: the first S are the image as taken
    choice = choose_serving_option({ONE_VIEW: (probs[:S], 1), TEST_TIME_FLIP: (probs, 2)}, labels)
    choice.chosen  # "test-time flip" or "one view"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from training.evaluation.operating_point import screening_operating_point
from training.evaluation.paired import paired_bootstrap, strategy_arm
from training.evaluation.referral import curve_at, referral_order
from training.evaluation.uncertainty import mc_uncertainty

ONE_VIEW = "one view"
TEST_TIME_FLIP = "test-time flip"
FRACTIONS = (0.1, 0.2, 0.3)
TIE = 1e-9


@dataclass(frozen=True)
class OptionRow:
    """One option on the validation eyes."""

    name: str
    cost: float  # forward passes per image, relative (one view = 1)
    auc: float  # every eye kept
    kept_auc: tuple[float, ...]  # MI referral, at FRACTIONS
    mi_minus_random: tuple[float, ...]
    ci_low: tuple[float, ...]
    ci_high: tuple[float, ...]
    earns_keep: bool
    auto_negative_share: float  # at the operating point, deferring by this option's MI
    auto_negative_share_no_deferral: float  # the same bound on missed eyes, deferring none

    @property
    def mean_kept_auc(self) -> float:
        return float(np.mean(self.kept_auc))


@dataclass(frozen=True)
class ServingChoice:
    """The option chosen, whether its MI referral beat random, and every option's row."""

    chosen: str
    earns_keep: bool
    rows: tuple[OptionRow, ...]
    fractions: tuple[float, ...]
    max_missed_share: float
    n_images: int

    def row(self, name: str) -> OptionRow:
        return next(r for r in self.rows if r.name == name)

    def as_dict(self) -> dict[str, Any]:
        """Strict JSON: a figure left undefined (an AUC once one class remains) is ``null``."""
        return {"chosen": self.chosen, "earns_keep": self.earns_keep, "fractions": list(self.fractions),
                "max_missed_share": self.max_missed_share, "n_images": self.n_images,
                "rows": [_defined(asdict(r)) for r in self.rows]}

    def sentence(self) -> str:
        """One line for the model card: what is served and why."""
        r = self.row(self.chosen)
        shares = ", ".join(f"{f:.0%}" for f in self.fractions)
        diffs = "; ".join(f"{_signed(d)} ({_signed(lo)}, {_signed(hi)})"
                          for d, lo, hi in zip(r.mi_minus_random, r.ci_low, r.ci_high, strict=True))
        others = ", ".join(f"{o.name} {_plain(o.mean_kept_auc)}" for o in self.rows if o.name != self.chosen)
        verdict = ("its MI referral beats random referral at every share" if self.earns_keep else
                   "MI referral beat random referral under none of the options, so MI is reported but deferring "
                   "by it is not a measured benefit")
        return (f"Served option: **{self.chosen}**, chosen on the {self.n_images} validation eyes: {verdict} "
                f"(kept-eye AUC, MI − random at {shares} referred: {diffs}); mean kept-eye AUC "
                f"{_plain(r.mean_kept_auc)} against {others or 'no other option'}.")


def _signed(v: float) -> str:
    return f"{v:+.3f}" if np.isfinite(v) else "n/a"


def _plain(v: float) -> str:
    return f"{v:.3f}" if np.isfinite(v) else "n/a"


def _defined(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (recursively through dicts, lists and tuples)."""
    if isinstance(value, dict):
        return {k: _defined(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_defined(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def choose_serving_option(
    options: Mapping[str, tuple[ArrayLike, float]],
    labels: ArrayLike,
    *,
    fractions: tuple[float, ...] = FRACTIONS,
    n_bootstrap: int = 200,
    seed: int = 0,
    decision_threshold: float = 0.5,
    max_missed_share: float = 0.03,
) -> ServingChoice:
    """Apply the module's rule to ``options``: name -> (draws ``[S, N]`` on the same N eyes, cost)."""
    if not options:
        raise ValueError("no serving option to choose from")
    y = np.asarray(labels).astype(np.int64)
    rows: list[OptionRow] = []
    for name, (probs, cost) in options.items():
        unc = mc_uncertainty(probs)
        if unc.probability.shape != y.shape:
            raise ValueError(f"option {name!r}: draws for {unc.probability.shape[0]} eyes, labels for {y.size}")
        diff = paired_bootstrap(strategy_arm(unc, "mutual_information"), strategy_arm(unc, "random"), y,
                                fractions=(0.0, *fractions), n_bootstrap=n_bootstrap, seed=seed,
                                decision_threshold=decision_threshold)["auc"]
        order = referral_order(unc.mutual_information, y.size, np.random.default_rng(seed))
        kept = curve_at(unc.probability, y, order, (0.0, *fractions), decision_threshold=decision_threshold)[1]
        low = diff.ci_low[1:]
        op = screening_operating_point(unc.probability, unc.mutual_information, y, max_missed_share=max_missed_share)
        op0 = screening_operating_point(unc.probability, np.zeros_like(unc.mutual_information), y,
                                        max_missed_share=max_missed_share)
        rows.append(OptionRow(
            name=name, cost=float(cost), auc=kept[0], kept_auc=tuple(kept[1:]),
            mi_minus_random=tuple(diff.difference[1:]), ci_low=tuple(low), ci_high=tuple(diff.ci_high[1:]),
            earns_keep=bool(all(np.isfinite(v) and v > 0 for v in low)),
            auto_negative_share=op.auto_negative_share, auto_negative_share_no_deferral=op0.auto_negative_share))
    pool = [r for r in rows if r.earns_keep] or rows

    def merit(r: OptionRow) -> float:  # undefined (one class left among the kept eyes) ranks last
        return r.mean_kept_auc if np.isfinite(r.mean_kept_auc) else -np.inf

    best = max(merit(r) for r in pool)
    tied = [r for r in pool if merit(r) >= best - TIE]
    chosen = min(tied, key=lambda r: r.cost)  # min keeps the first listed among equal costs
    return ServingChoice(chosen=chosen.name, earns_keep=chosen.earns_keep, rows=tuple(rows),
                         fractions=tuple(fractions), max_missed_share=max_missed_share, n_images=int(y.size))

