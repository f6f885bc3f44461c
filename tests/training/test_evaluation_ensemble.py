"""Saved draws, ensembles of them (stacked [M*S, N]), method − method differences and the OOD AUROC."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from training.evaluation import evaluate_predictions, mc_uncertainty, paired_bootstrap, strategy_arm
from training.evaluation.ensemble import (
    SavedDraws,
    evaluate_ensemble,
    load_draws,
    method_differences,
    save_draws,
    stack_members,
)
from training.evaluation.ood import ood_auroc

N = 40


def _member(seed: int, s: int = 4) -> SavedDraws:
    rng = np.random.default_rng(seed)
    labels = (np.arange(N) % 3 == 0).astype(np.int64)  # [N], both classes
    logits = 1.5 * (2 * labels - 1) + rng.normal(0, 1.5, size=(s, N))  # [S, N]
    return SavedDraws(1 / (1 + np.exp(-logits)), labels, tuple(f"img-{i:03d}.jpeg" for i in range(N)))


def test_ensemble_is_exactly_evaluate_predictions_of_the_stacked_draws() -> None:
    members = [_member(1), _member(2, s=3), _member(3)]
    stacked = np.concatenate([m.probs for m in members], axis=0)  # [11, N]
    expected = evaluate_predictions(stacked, members[0].labels, n_bootstrap=20, seed=5)
    got = evaluate_ensemble(members, n_bootstrap=20, seed=5)
    assert got.n_predictions == 11
    assert got.to_dict() == expected.to_dict()


def test_members_in_another_image_order_are_aligned_by_id() -> None:
    a, b = _member(1), _member(2)
    perm = np.random.default_rng(0).permutation(N)
    shuffled = SavedDraws(b.probs[:, perm], b.labels[perm], tuple(b.ids[i] for i in perm))
    np.testing.assert_array_equal(stack_members([a, shuffled]).probs, stack_members([a, b]).probs)


def test_mismatched_images_or_labels_are_refused() -> None:
    a, b = _member(1), _member(2)
    other_ids = SavedDraws(b.probs, b.labels, (*b.ids[:-1], "someone-else.jpeg"))
    with pytest.raises(ValueError, match="different images"):
        stack_members([a, other_ids])
    with pytest.raises(ValueError, match="different images"):
        evaluate_ensemble([a, SavedDraws(b.probs[:, :-1], b.labels[:-1], b.ids[:-1])], n_bootstrap=2)
    flipped = b.labels.copy()
    flipped[0] = 1 - flipped[0]
    with pytest.raises(ValueError, match="different labels"):
        stack_members([a, SavedDraws(b.probs, flipped, b.ids)])
    with pytest.raises(ValueError, match="unique"):
        SavedDraws(a.probs[:, :2], a.labels[:2], ("x", "x"))
    with pytest.raises(ValueError, match="N labels and N ids"):
        SavedDraws(a.probs, a.labels, a.ids[:-1])


def test_draws_round_trip_exactly(tmp_path: Path) -> None:
    a = _member(4)
    path = save_draws(tmp_path / "eval_test" / "draws.npz", a.probs, a.labels, a.ids)
    back = load_draws(path)
    np.testing.assert_array_equal(back.probs, a.probs)
    np.testing.assert_array_equal(back.labels, a.labels)
    assert back.ids == a.ids


def test_method_differences_are_the_paired_bootstrap_of_each_method_against_the_baseline() -> None:
    a, b = _member(1), _member(2)
    perm = np.random.default_rng(1).permutation(N)
    b_shuffled = SavedDraws(b.probs[:, perm], b.labels[perm], tuple(b.ids[i] for i in perm))
    out = method_differences({"A": a, "A again": a, "B": b_shuffled}, baseline="B",
                             scores={"B": "predictive_entropy"}, fractions=(0.0, 0.2), n_bootstrap=30, seed=2)
    assert set(out) == {"A", "A again"}
    assert out["A"]["auc"].difference == out["A again"]["auc"].difference
    direct = paired_bootstrap(strategy_arm(mc_uncertainty(a.probs), "mutual_information", "A"),
                              strategy_arm(mc_uncertainty(b.probs), "predictive_entropy", "B"), a.labels,
                              fractions=(0.0, 0.2), n_bootstrap=30, seed=2)
    assert out["A"]["auc"] == direct["auc"] and out["A"]["accuracy"] == direct["accuracy"]
    same = method_differences({"A": a, "A again": a}, baseline="A", fractions=(0.0, 0.3), n_bootstrap=10)
    assert same["A again"]["auc"].difference == (0.0, 0.0)
    assert same["A again"]["auc"].ci_low == (0.0, 0.0) and same["A again"]["auc"].ci_high == (0.0, 0.0)
    with pytest.raises(ValueError, match="baseline"):
        method_differences({"A": a}, baseline="Z")


def test_ood_auroc_known_values() -> None:
    # each foreign score beats 2, 3, 4 and 4 of the 4 test scores: 13 / 16
    assert ood_auroc([0.0, 1.0, 2.0, 3.0], [1.5, 2.5, 3.5, 4.5]) == pytest.approx(13 / 16)
    assert ood_auroc([0.1, 0.2], [0.3, 0.9, 0.4]) == 1.0
    assert ood_auroc([0.3, 0.9], [0.1, 0.2]) == 0.0  # more confident on the foreign images
    assert ood_auroc([1.0, 1.0], [1.0]) == 0.5  # ties count one half
    with pytest.raises(ValueError, match="at least one"):
        ood_auroc([], [0.1])
    with pytest.raises(ValueError, match="finite"):
        ood_auroc([np.nan], [0.1])
