"""The pass-split rule (training.evaluation.pass_split): eligibility, the reference, patient resampling and
cross-fitting, on synthetic draws whose properties are known."""

from __future__ import annotations

import numpy as np
import pytest

from training.evaluation.cross_fit import bootstrap_weights, cross_fitted, patient_groups
from training.evaluation.pass_split import PassOption, choose_pass_split, split_table

N_PATIENTS = 150


def _eyes(seed: int = 0) -> tuple[np.ndarray, list[str], list[str]]:
    """Two eyes per patient, about a fifth referable; two sources."""
    rng = np.random.default_rng(seed)
    y = (rng.random(2 * N_PATIENTS) < 0.2).astype(np.int64)
    patients = [f"p{i // 2}" for i in range(y.size)]
    sources = ["a" if i < N_PATIENTS else "b" for i in range(y.size)]
    return y, patients, sources


def _draws(y: np.ndarray, signal: float, draws: int, seed: int) -> np.ndarray:
    """``[draws, N]`` probabilities: a logit of ``signal``·(2y − 1) plus per-eye and per-draw noise."""
    rng = np.random.default_rng(seed)
    eye = signal * (2 * y - 1) + rng.normal(0, 1, y.size) - 1.0
    return 1 / (1 + np.exp(-(eye + rng.normal(0, 0.3, (draws, y.size)))))


def test_the_rule_keeps_to_the_budget_and_names_the_reference():
    y, patients, sources = _eyes()
    strong = _draws(y, 1.5, 16, 2)
    options = [PassOption(16, 1, 1, _draws(y, 0.2, 16, 1)),  # weak
               PassOption(8, 2, 1, strong),
               PassOption(16, 2, 1, np.concatenate([strong, strong]), served=True)]  # as good, at 32 passes
    choice = choose_pass_split(options, y, patients=patients, sources=sources, budget=16, max_missed_share=0.05,
                               repeats=20, n_bootstrap=200)
    assert choice.chosen == "8 draws × 2 views"
    assert choice.reference == "16 draws × 2 views"
    assert not choice.row("16 draws × 2 views").within_budget
    assert choice.row("16 draws × 2 views").vs_reference is None
    weak = choice.row("16 draws × 1 view")
    assert weak.vs_reference is not None and weak.vs_reference["auc"].high < 0 and weak.worse_than_reference
    assert choice.eligible == ("8 draws × 2 views",) and not choice.none_within_reference
    assert set(choice.row("8 draws × 2 views").auc_by_source) == {"a", "b"}
    table = split_table(choice)
    assert "**8 draws × 2 views** (chosen)" in table and "(over budget)" in table
    record = choice.as_dict()
    assert record["chosen"] == choice.chosen and record["rows"][0]["worse_than_reference"] is True
    assert "8 draws × 2 views" in choice.sentence() and "16 draws × 2 views" in choice.sentence()


def test_when_every_split_in_the_budget_is_worse_the_record_says_so():
    y, patients, sources = _eyes()
    options = [PassOption(16, 1, 1, _draws(y, 0.2, 16, 1)), PassOption(8, 2, 1, _draws(y, 0.3, 16, 2)),
               PassOption(16, 2, 1, _draws(y, 3.0, 32, 3), served=True)]
    choice = choose_pass_split(options, y, patients=patients, sources=sources, budget=16, max_missed_share=0.05,
                               repeats=10, n_bootstrap=200)
    assert choice.none_within_reference
    assert choice.chosen in ("16 draws × 1 view", "8 draws × 2 views")
    assert "worse than the reference" in choice.sentence()


def test_an_option_equal_to_the_reference_differs_by_exactly_nothing():
    y, patients, sources = _eyes(1)
    probs = _draws(y, 1.0, 16, 4)
    choice = choose_pass_split([PassOption(16, 1, 1, probs), PassOption(8, 2, 1, probs.copy(), served=True)], y,
                               patients=patients, sources=sources, budget=16, max_missed_share=0.05, repeats=10,
                               n_bootstrap=100)
    d = choice.row("16 draws × 1 view").vs_reference
    assert d is not None
    for key in ("auc", "missed_share", "auto_negative_share"):
        assert (d[key].value, d[key].low, d[key].high) == (0.0, 0.0, 0.0)
    assert choice.chosen == "16 draws × 1 view"  # equal merit: the first listed at equal passes


def test_the_bootstrap_resamples_patients_not_eyes():
    y, patients, _ = _eyes(2)
    group = patient_groups(patients)
    w = bootstrap_weights(group, 300, np.random.default_rng(0))
    assert w.shape == (300, y.size)
    assert np.array_equal(w[:, 0::2], w[:, 1::2])  # a patient's two eyes are drawn together
    assert np.allclose(w.sum(axis=1), y.size)  # as many patients as there are, with replacement
    assert abs(w.mean() - 1.0) < 0.01


def test_cross_fitting_counts_every_eye_at_thresholds_it_did_not_choose():
    """With scores that carry no signal, a threshold fitted on one half answers the other half's referable
    and non-referable eyes alike, so the cross-fitted miss share matches the automatic-answer share — far
    above the bound the in-sample fit reports (which is met on the eyes that set it)."""
    y, patients, sources = _eyes(3)
    rng = np.random.default_rng(5)
    probs = np.repeat(rng.random((1, y.size)), 4, axis=0) + rng.normal(0, 1e-3, (4, y.size))
    probs = np.clip(probs, 1e-6, 1 - 1e-6)
    choice = choose_pass_split([PassOption(4, 1, 1, probs)], y, patients=patients, sources=sources, budget=4,
                               max_missed_share=0.1, repeats=200, n_bootstrap=50)
    row = choice.row("4 draws × 1 view")
    assert row.in_sample["missed_share"] <= 0.1
    assert row.cross_fitted["missed_share"] > 0.1
    assert abs(row.cross_fitted["missed_share"] - row.cross_fitted["auto_negative_share"]) < 0.08


def test_cross_fitting_with_a_perfect_score_misses_nothing():
    y, patients, _ = _eyes(4)
    p = np.where(y == 1, 0.9, 0.1)[None, :].repeat(3, axis=0)
    group = patient_groups(patients)
    halves = [np.random.default_rng(i).random(group.max() + 1) < 0.5 for i in range(10)]
    missed, auto = cross_fitted(p.mean(0), np.zeros(y.size), y, group, halves, 0.0)
    assert missed.sum() == 0
    assert np.allclose(auto[y == 0], 1.0)


@pytest.mark.parametrize(("options", "message"), [
    ([PassOption(32, 1, 1, np.full((32, 4), 0.5))], "no option within the budget"),
    ([PassOption(8, 2, 1, np.full((16, 4), 0.5)), PassOption(8, 2, 1, np.full((16, 4), 0.5))], "repeat"),
    ([PassOption(16, 1, 1, np.full((16, 3), 0.5))], "draws for 3 eyes"),
])
def test_what_the_rule_cannot_compare_is_refused(options, message):
    with pytest.raises(ValueError, match=message):
        choose_pass_split(options, [0, 1, 0, 1], patients=["a", "a", "b", "b"], sources=["s"] * 4, budget=16,
                          max_missed_share=0.05, repeats=2, n_bootstrap=10)
