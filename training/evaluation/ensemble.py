"""Saved per-draw predictions, ensembles of them, and method − method differences on shared images.

Every training run saves the ``[S, N]`` probabilities its evaluation saw (``eval_val/draws.npz``,
``eval_test/draws.npz``: probabilities, labels and one id per image), so an ensemble or a comparison never
re-runs a model. An ensemble of M members is evaluated as ONE model whose Monte Carlo samples are all the
members' draws: stack the ``[S, N]`` arrays into ``[M*S, N]`` (p̄ averages over members and draws; MI then
includes the members' disagreement, as in a deep ensemble) and run ``evaluate_predictions`` on that. The
members must have scored the same images: ids are compared, and a different set or order is refused
(or re-ordered, when only the order differs).

Example::

    members = [load_draws(f"runs/t1-det-s{s}/eval_test/draws.npz") for s in (0, 1, 2)]
    report = evaluate_ensemble(members, n_bootstrap=200)       # the same as evaluate_predictions([3S, N])
    diffs = method_differences({"radial": load_draws(...), "deterministic": load_draws(...)},
                               baseline="deterministic", scores={"deterministic": "predictive_entropy"})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from training.evaluation.evaluate import evaluate_predictions
from training.evaluation.paired import Metric, PairedDifference, paired_bootstrap, strategy_arm
from training.evaluation.report import EvaluationReport
from training.evaluation.uncertainty import FloatArray, mc_uncertainty, validate_mc_probs

DRAWS_FILENAME = "draws.npz"


@dataclass(frozen=True)
class SavedDraws:
    """One model's Monte Carlo predictions on one image set: ``probs`` ``[S, N]``, ``labels`` ``[N]``, ``ids`` (N)."""

    probs: FloatArray
    labels: NDArray[np.int64]
    ids: tuple[str, ...]

    def __post_init__(self) -> None:
        probs = validate_mc_probs(self.probs)
        if self.labels.shape != (probs.shape[1],) or len(self.ids) != probs.shape[1]:
            raise ValueError(f"draws [S, N] = {list(probs.shape)} need N labels and N ids; got "
                             f"{self.labels.shape[0] if self.labels.ndim else 0} labels and {len(self.ids)} ids")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("image ids must be unique within one set of draws")


def save_draws(path: str | Path, probs: FloatArray, labels: NDArray[np.int64], ids: Sequence[str]) -> Path:
    """Write ``probs`` ``[S, N]`` (float64), ``labels`` ``[N]`` and ``ids`` to ``path`` (an ``.npz``)."""
    draws = SavedDraws(np.asarray(probs, np.float64), np.asarray(labels, np.int64), tuple(str(i) for i in ids))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:  # an open file: np.savez would otherwise append ".npz" to other names
        np.savez_compressed(f, probs=draws.probs, labels=draws.labels, ids=np.asarray(draws.ids, dtype=np.str_))
    return out


def load_draws(path: str | Path) -> SavedDraws:
    """Read what ``save_draws`` wrote."""
    with np.load(Path(path), allow_pickle=False) as z:
        return SavedDraws(z["probs"].astype(np.float64), z["labels"].astype(np.int64),
                          tuple(str(i) for i in z["ids"].tolist()))


def stack_members(members: Sequence[SavedDraws]) -> SavedDraws:
    """The ensemble's draws: members' ``[S_m, N]`` stacked into ``[sum S_m, N]`` in the first member's image order.

    Refuses members that scored different images (by id) or disagree on a label; members that scored the
    same images in another order are re-ordered to the first member's.
    """
    if not members:
        raise ValueError("an ensemble needs at least one member")
    first = members[0]
    position = {image_id: j for j, image_id in enumerate(first.ids)}
    blocks: list[FloatArray] = []
    for m, member in enumerate(members):
        if set(member.ids) != set(first.ids):
            missing = sorted(set(first.ids) ^ set(member.ids))
            raise ValueError(f"ensemble member {m} scored different images than member 0 "
                             f"({len(missing)} ids differ, e.g. {missing[:3]}); members must share the test images")
        order = np.argsort([position[i] for i in member.ids], kind="stable")  # member column -> first's order
        if not np.array_equal(member.labels[order], first.labels):
            raise ValueError(f"ensemble member {m} has different labels for the same image ids")
        blocks.append(member.probs[:, order])  # [S_m, N]
    # C order, as a freshly computed [S, N] array: reductions over S must round exactly as for the plain stack
    return SavedDraws(np.ascontiguousarray(np.concatenate(blocks, axis=0)), first.labels, first.ids)


def evaluate_ensemble(members: Sequence[SavedDraws], **kwargs: Any) -> EvaluationReport:
    """``evaluate_predictions`` of the stacked members' draws (keyword arguments are passed on)."""
    stacked = stack_members(members)
    return evaluate_predictions(stacked.probs, stacked.labels, **kwargs)


def method_differences(
    methods: Mapping[str, SavedDraws],
    *,
    baseline: str,
    scores: Mapping[str, str] | None = None,
    fractions: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.5),
    n_bootstrap: int = 1000,
    seed: int = 0,
    decision_threshold: float = 0.5,
) -> dict[str, dict[Metric, PairedDifference]]:
    """Method − ``baseline`` (AUC and accuracy on the retained images) by paired bootstrap on the shared images.

    Each method refers by its own ranking (``scores[name]``, default mutual information; e.g.
    ``predictive_entropy`` for a deterministic model). Returns ``{method: {"auc": ..., "accuracy": ...}}``
    for every method but the baseline; the images are aligned by id (different image sets are refused).
    """
    if baseline not in methods:
        raise ValueError(f"baseline {baseline!r} is not one of the methods {sorted(methods)}")
    names = list(methods)
    aligned = stack_members([methods[n] for n in names])  # checks ids/labels; columns in the first's order
    sizes = [methods[n].probs.shape[0] for n in names]
    starts = np.cumsum([0, *sizes])
    arms = {}
    for k, name in enumerate(names):
        unc = mc_uncertainty(aligned.probs[starts[k]:starts[k + 1]])  # this method's [S, N], aligned
        arms[name] = strategy_arm(unc, (scores or {}).get(name, "mutual_information"), name)
    return {name: paired_bootstrap(arms[name], arms[baseline], aligned.labels, fractions=fractions,
                                   n_bootstrap=n_bootstrap, seed=seed, decision_threshold=decision_threshold)
            for name in names if name != baseline}
