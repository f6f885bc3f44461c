"""training.evaluation.operating_rules (benchmarks/operating_rules.py scores the eyes): the validation rules for the
decision threshold, applied to test eyes. The rules are nested (a stricter one never misses more or answers more
automatically), the upper-bound rule's share is the largest one whose Clopper-Pearson bound meets the 5 % target,
and per-source counts add up to the pooled ones."""

from __future__ import annotations

import numpy as np

from training.evaluation.operating_point import clopper_pearson_upper
from training.evaluation.operating_rules import Eyes, rule_rows, table, upper_bound_share, wilson


def _eyes(rng: np.random.Generator, n: int) -> Eyes:
    label = (rng.random(n) < 0.2).astype(np.int64)
    logit = rng.normal(np.where(label == 1, 1.0, -1.5), 1.2)  # overlapping: some referable eyes score low
    return Eyes(probability=1 / (1 + np.exp(-logit)), mutual_information=rng.exponential(1e-3, n), label=label,
                source=np.where(rng.random(n) < 0.8, "odir", "eyepacs"))


def test_the_upper_bound_share_is_the_largest_that_meets_the_target() -> None:
    share = upper_bound_share(200)
    k = round(share * 200)
    assert clopper_pearson_upper(k, 200) <= 0.05 < clopper_pearson_upper(k + 1, 200)
    assert 0 < share < 0.03  # stricter than the 3 % point rule at this size
    assert upper_bound_share(20) == 0.0  # 20 referable eyes cannot bound a miss share under 5 % (0 of 20: 13.9 %)


def test_stricter_rules_miss_no_more_and_answer_no_more_on_the_test_eyes() -> None:
    rng = np.random.default_rng(3)
    val, test = _eyes(rng, 1500), _eyes(rng, 1500)
    rows = rule_rows(val, test, point_shares=(0.05, 0.03, 0.01))
    assert [r["rule"] for r in rows] == ["point ≤ 5%", "point ≤ 3%", "point ≤ 1%", "upper95 ≤ 5%"]
    points = rows[:3]
    thresholds = [r["decision_threshold"] for r in points]
    assert thresholds == sorted(thresholds, reverse=True) and len(set(thresholds)) == 3
    missed = [r["test"]["pooled"]["missed_share"] for r in points]
    auto = [r["test"]["pooled"]["auto_negative_share"] for r in points]
    assert missed == sorted(missed, reverse=True) and auto == sorted(auto, reverse=True)
    for r in rows:
        assert r["val_missed_share"] <= r["max_missed_share"] + 1e-12
        pooled, parts = r["test"]["pooled"], [r["test"][s] for s in ("eyepacs", "odir")]
        assert pooled["missed"] == sum(p["missed"] for p in parts)
        assert pooled["n_referable"] == sum(p["n_referable"] for p in parts)
        lo, hi = pooled["missed_ci95"]
        assert lo <= pooled["missed_share"] <= hi
    assert rows[3]["val_missed_upper95"] <= 0.05
    text = table(rows)
    assert "upper95 ≤ 5%" in text and "test odir" in text and text.count("\n") == len(rows) + 1


def test_wilson_interval_matches_a_known_value() -> None:
    lo, hi = wilson(21, 165)  # 12.7 %: 8.5-18.7 %
    assert round(lo, 3) == 0.085 and round(hi, 3) == 0.187
