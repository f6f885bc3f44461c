"""End to end: evaluate_predictions, the JSON report, calibration_summary and the PNG plots."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from training.evaluation import EvaluationReport, evaluate_predictions, read_report, write_report
from training.evaluation.calibration import ece_bootstrap_se, ece_calibrated_floor


def _toy(n: int, seed: int, s: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """A model whose hard images have both wrong-leaning means and a wide MC spread (errors at high MI)."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int64)
    d = rng.random(n)
    z = (2 * y - 1) * (3.5 * (1 - d) - 0.3) + rng.normal(0, 0.8, n)
    logits = z[None] + (0.15 + 2.0 * d**2)[None] * rng.normal(size=(s, n))  # [S, N]
    return 1 / (1 + np.exp(-logits)), y


@pytest.fixture(scope="module")
def toy_report() -> EvaluationReport:
    mc, y = _toy(600, seed=0)
    return evaluate_predictions(mc, y, n_bootstrap=40, seed=0)


def test_report_numbers_are_consistent(toy_report: EvaluationReport) -> None:
    r = toy_report
    mi_curve = r.curves["mutual_information"]
    assert set(r.curves) == {"mutual_information", "predictive_entropy", "random"}
    assert r.n_images == 600 and r.n_predictions == 8 and 0 < r.n_positive < 600
    assert mi_curve.fractions == pytest.approx([k / 100 for k in range(0, 55, 5)])
    assert mi_curve.auc[0] == pytest.approx(r.auc)
    assert mi_curve.accuracy[0] == pytest.approx(r.accuracy)
    at = dict(zip(mi_curve.fractions, mi_curve.auc, strict=True))
    assert r.auc_at_referral[0.2] == pytest.approx(at[0.2])
    # With distinct MI values the fitted threshold refers exactly the 20 % the curve refers at 0.2.
    assert r.referral_threshold.achieved_rate == pytest.approx(0.2)
    assert r.auc_at_threshold == pytest.approx(at[0.2])
    # Errors concentrate at high MI in this toy model, so referral by MI helps and random does not.
    assert r.mean_mi_incorrect > 2 * r.mean_mi_correct
    assert r.auc_at_referral[0.3] > r.curves["random"].auc[6] + 0.02
    assert r.accuracy_at_referral[0.1] < r.accuracy_at_referral[0.2] < r.accuracy_at_referral[0.3]
    assert sum(r.mi_histogram.count_correct) + sum(r.mi_histogram.count_incorrect) == 600
    assert sum(r.mi_histogram.count_incorrect) == round((1 - r.accuracy) * 600)
    assert sum(r.reliability.count) == 600 and r.ece == pytest.approx(r.reliability.ece)
    assert all(u == 40 for u in mi_curve.n_bootstrap_used)
    assert all(se > 0 for se in mi_curve.auc_se[:5])


def test_json_round_trip(toy_report: EvaluationReport, tmp_path: Path) -> None:
    d = toy_report.to_dict()
    text = json.dumps(d, allow_nan=False)  # plain JSON
    again = EvaluationReport.from_dict(json.loads(text))
    assert again == toy_report
    assert again.to_dict() == d
    paths = write_report(toy_report, tmp_path / "eval")
    assert read_report(paths["report"]) == toy_report


def test_undefined_metrics_become_null_and_come_back_as_nan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Positives are the most uncertain images: referring half leaves only negatives, so AUC is undefined.
    rng = np.random.default_rng(3)
    y = np.array([1] * 10 + [0] * 30)
    spread = np.where(y == 1, 0.4, 0.02)
    centre = np.where(y == 1, 0.6, 0.2)
    mc = np.clip(centre[None] + spread[None] * rng.standard_normal((8, 40)), 0.0, 1.0)
    with caplog.at_level(logging.WARNING, logger="training.evaluation.evaluate"):
        r = evaluate_predictions(mc, y, fractions=(0.0, 0.5), n_bootstrap=20, seed=1)
    assert math.isnan(r.curves["mutual_information"].auc[1])
    assert r.curves["mutual_information"].n_bootstrap_used[1] < 20
    assert "single class" in caplog.text
    d = r.to_dict()
    assert d["curves"]["mutual_information"]["auc"][1] is None
    back = EvaluationReport.from_dict(json.loads(json.dumps(d, allow_nan=False)))
    assert math.isnan(back.curves["mutual_information"].auc[1])
    assert back.to_dict() == d
    paths = write_report(r, tmp_path)  # plotting tolerates undefined points
    assert json.loads(paths["report"].read_text())["curves"]["mutual_information"]["auc"][1] is None


def test_calibration_summary_is_the_artifact_subset(toy_report: EvaluationReport) -> None:
    s = toy_report.calibration_summary()
    assert set(s) == {"referral_threshold_mi", "target_referral_rate", "achieved_referral_rate",
                      "decision_threshold", "validation"}
    assert s["referral_threshold_mi"] == toy_report.referral_threshold.threshold
    assert s["target_referral_rate"] == 0.2 and s["decision_threshold"] == 0.5
    v = s["validation"]
    assert {"auc", "accuracy", "ece", "auc_at_referral", "accuracy_at_referral"} <= set(v)
    assert set(v["auc_at_referral"]) == {"0.1", "0.2", "0.3"}
    assert v["auc_at_referral"]["0.2"] == toy_report.auc_at_referral[0.2]
    json.dumps(s, allow_nan=False)


def test_the_mi_scale_is_the_quantiles_of_the_per_image_mi() -> None:
    """The artifact states its MI scale: quantiles of MI = H[p̄] − mean_s H[p_s], recomputed here by hand."""
    mc, y = _toy(300, seed=5)
    r = evaluate_predictions(mc, y, n_bootstrap=0, seed=0)

    def h(p: np.ndarray) -> np.ndarray:
        return -(p * np.log(p) + (1 - p) * np.log(1 - p))

    mi = h(mc.mean(axis=0)) - h(mc).mean(axis=0)  # [N]
    assert list(r.mi_quantiles) == ["0.05", "0.25", "0.5", "0.75", "0.95"]
    for key, value in r.mi_quantiles.items():
        assert value == pytest.approx(np.quantile(mi, float(key)), rel=1e-9, abs=1e-15)
    assert r.mi_quantiles["0.05"] < r.mi_quantiles["0.5"] < r.mi_quantiles["0.95"]
    assert r.calibration_summary()["validation"]["mi_quantiles"] == r.mi_quantiles
    old = r.to_dict()
    del old["mi_quantiles"]  # a report written before the field: read back without a scale, not refused
    back = EvaluationReport.from_dict(old)
    assert back.mi_quantiles == {} and "mi_quantiles" not in back.calibration_summary()["validation"]


def test_the_ece_comes_with_its_error_bar_and_sampling_floor() -> None:
    """The report's ECE SE and calibrated floor are those of the calibration module on p̄, carried into the
    artifact's summary; a report written before these fields reads them as undefined."""
    mc, y = _toy(500, seed=9)
    r = evaluate_predictions(mc, y, n_bootstrap=50, seed=3)
    p = mc.mean(axis=0)
    assert r.ece_se == ece_bootstrap_se(p, y, n_bootstrap=50, seed=3) > 0
    assert r.ece_calibrated_floor == ece_calibrated_floor(p, seed=3) > 0
    v = r.calibration_summary()["validation"]
    assert (v["ece_se"], v["ece_calibrated_floor"]) == (r.ece_se, r.ece_calibrated_floor)
    assert EvaluationReport.from_dict(r.to_dict()).ece_se == r.ece_se
    assert np.isnan(evaluate_predictions(mc, y, n_bootstrap=0).ece_se)  # no resamples, no SE
    old = {k: v for k, v in r.to_dict().items() if k not in ("ece_se", "ece_calibrated_floor")}
    back = EvaluationReport.from_dict(old)
    assert np.isnan(back.ece_se) and np.isnan(back.ece_calibrated_floor)
    assert back.calibration_summary()["validation"]["ece_se"] is None


def test_a_validation_threshold_applied_to_test_data_reports_its_rate() -> None:
    mc_val, y_val = _toy(800, seed=5)
    mc_test, y_test = _toy(800, seed=6)
    val = evaluate_predictions(mc_val, y_val, n_bootstrap=0, seed=0)
    test = evaluate_predictions(mc_test, y_test, n_bootstrap=0, seed=0,
                                referral_threshold_mi=val.referral_threshold.threshold)
    assert val.threshold_fitted and not test.threshold_fitted
    assert test.referral_threshold.threshold == val.referral_threshold.threshold
    assert test.referral_threshold.achieved_rate == pytest.approx(0.2, abs=0.05)
    assert test.referral_threshold.n_referred == round(test.referral_threshold.achieved_rate * 800)


def test_plots_are_valid_pngs(toy_report: EvaluationReport, tmp_path: Path) -> None:
    paths = write_report(toy_report, tmp_path)
    assert set(paths) == {"report", "referral_curves", "reliability", "mi_histogram"}
    for name in ("referral_curves", "reliability", "mi_histogram"):
        with Image.open(paths[name]) as im:
            assert im.format == "PNG"
            im.load()  # decodes the full image
            pixels = np.asarray(im.convert("L"), dtype=np.float64)
        assert pixels.shape[0] > 300 and pixels.shape[1] > 500
        assert pixels.std() > 10  # drawn content, not a blank canvas


def test_schema_and_input_errors(toy_report: EvaluationReport) -> None:
    d = toy_report.to_dict()
    with pytest.raises(ValueError, match="schema_version"):
        EvaluationReport.from_dict({**d, "schema_version": 99})
    with pytest.raises(ValueError, match="'ece'"):
        EvaluationReport.from_dict({k: v for k, v in d.items() if k != "ece"})
    mc, y = _toy(50, seed=1)
    with pytest.raises(ValueError, match="single class"):
        evaluate_predictions(mc, np.zeros(50), n_bootstrap=0)
    with pytest.raises(ValueError, match=r"\[N\] = \[50\]"):
        evaluate_predictions(mc, y[:40], n_bootstrap=0)
    with pytest.raises(ValueError, match="decision_threshold"):
        evaluate_predictions(mc, y, n_bootstrap=0, decision_threshold=1.5)


def test_a_report_written_before_n_predictions_reads_its_old_key(toy_report: EvaluationReport) -> None:
    """``n_predictions`` (draws x head draws x views per image) was written ``n_mc_samples`` before."""
    old = toy_report.to_dict()
    old["n_mc_samples"] = old.pop("n_predictions")
    assert EvaluationReport.from_dict(old) == EvaluationReport.from_dict(toy_report.to_dict())
    assert EvaluationReport.from_dict(old).n_predictions == toy_report.n_predictions == 8
