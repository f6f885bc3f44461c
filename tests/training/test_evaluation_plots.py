"""The method-comparison figure: one line per method on both referral panels, the OOD bars in order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from training.evaluation.plots import plot_method_comparison

FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.5)


def _row(auc0: float, ood: float) -> dict[str, object]:
    auc = [auc0 + 0.01 * i for i in range(len(FRACTIONS))]
    return {"auc": auc, "auc_se": [0.01] * 5, "accuracy": [0.9] * 5, "accuracy_se": [float("nan")] * 5,
            "ood_auroc": ood}


def test_the_comparison_figure_is_a_png_with_every_method(tmp_path: Path) -> None:
    rows = {"Radial BNN": _row(0.85, 0.9), "MFVI": _row(0.80, 0.4), "Deterministic": _row(0.82, 0.5)}
    out = plot_method_comparison(rows, FRACTIONS, tmp_path / "t.png", "synthetic")
    with Image.open(out) as im:
        assert im.format == "PNG"
        w, h = im.size
        pixels = np.asarray(im.convert("RGB"))
    assert w > 1.5 * h  # three panels side by side
    # each method's colour (matplotlib's C0, C1, C2) is drawn somewhere
    for colour in ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E), (0x2C, 0xA0, 0x2C)):
        assert (np.abs(pixels.astype(int) - colour).sum(axis=-1) < 10).any(), colour


def test_a_row_with_the_wrong_number_of_points_is_refused(tmp_path: Path) -> None:
    bad = _row(0.8, 0.5)
    bad["auc"] = [0.8, 0.81]
    with pytest.raises(ValueError, match="auc has 2 values for 5 fractions"):
        plot_method_comparison({"x": bad}, FRACTIONS, tmp_path / "t.png", "synthetic")
