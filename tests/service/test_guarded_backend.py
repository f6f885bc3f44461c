"""The guard band (service/inference/backends.py GuardedBackend): answers near a threshold come from fp32.

Real parts: the int8 ONNX Runtime backend as the fast path, the fp32 one as the exact path, on a tiny net.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.artifact import load_artifact
from models.artifact.schema import GuardBand
from models.nn.draws import materialise_draws
from models.nn.uncertainty import binary_uncertainty_from_logits
from models.serving.int8 import calibrate_ranges
from service.inference.backends import GuardedBackend, OnnxBackend
from support.artifacts import build_tiny_artifact

Pair = tuple[OnnxBackend, OnnxBackend, np.ndarray]  # int8, fp32, images [B, C, H, W]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    tmp = tmp_path_factory.mktemp("guard")
    art = load_artifact(build_tiny_artifact(tmp / "a", width=8))
    net = materialise_draws(art.build_model(), mc_samples=4, seed=art.config.serving.draw_seed)
    rng = np.random.default_rng(0)
    ranges = calibrate_ranges(net, [rng.normal(size=(2, 3, 64, 64)).astype(np.float32) for _ in range(4)],
                              Path(tmp) / "ranges.json")
    fast = OnnxBackend(net, device="cpu", precision="int8", int8_ranges=ranges)
    exact = OnnxBackend(net, device="cpu", precision="fp32", strategy="loop")
    return fast, exact, rng.normal(size=(8, 3, 64, 64)).astype(np.float32)


def answers(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    unc = binary_uncertainty_from_logits(torch.from_numpy(logits))
    return unc.probability.numpy(), unc.mutual_information.numpy()


def test_images_inside_the_band_get_fp32_and_the_rest_keep_the_fast_answer(pair: Pair) -> None:
    fast, exact, x = pair
    lf, le = fast.run(x), exact.run(x)
    assert not np.allclose(lf, le)  # int8 really differs, so the splice below is visible
    p, mi = answers(lf)
    decision = float(np.median(p))
    band_p = float(np.sort(np.abs(p - decision))[3])  # the 4 images nearest the decision threshold
    guarded = GuardedBackend(fast, exact, GuardBand(band_p, 0.0, 0.5), decision_threshold=decision,
                             referral_threshold_mi=float(mi.max()) + 1.0)  # no image near the MI threshold
    out = guarded.run(x)
    near = np.abs(p - decision) <= band_p
    assert near.sum() == 4
    np.testing.assert_array_equal(out[:, near], le[:, near])
    np.testing.assert_array_equal(out[:, ~near], lf[:, ~near])
    assert (guarded.scored, guarded.rescored) == (8, 4)
    assert (guarded.name, guarded.precision, guarded.strategy) == ("onnxruntime", "int8", "loop")


def test_the_mi_band_and_the_extremes(pair: Pair) -> None:
    fast, exact, x = pair
    lf, le = fast.run(x), exact.run(x)
    _, mi = answers(lf)
    threshold = float(np.median(mi))
    band_mi = float(np.sort(np.abs(mi - threshold))[1])  # the 2 images nearest the MI threshold
    by_mi = GuardedBackend(fast, exact, GuardBand(0.0, band_mi, 0.25), decision_threshold=2.0,
                           referral_threshold_mi=threshold).run(x)
    near = np.abs(mi - threshold) <= band_mi
    np.testing.assert_array_equal(by_mi[:, near], le[:, near])
    np.testing.assert_array_equal(by_mi[:, ~near], lf[:, ~near])
    everything = GuardedBackend(fast, exact, GuardBand(1.0, 1.0, 1.0), decision_threshold=0.5,
                                referral_threshold_mi=0.1)
    np.testing.assert_array_equal(everything.run(x), le)
    nothing = GuardedBackend(fast, exact, GuardBand(0.0, 0.0, 0.0), decision_threshold=2.0,
                             referral_threshold_mi=1.0)
    np.testing.assert_array_equal(nothing.run(x), lf)
    assert nothing.rescored == 0


def test_the_rescored_images_are_counted_for_prometheus_from_the_end_of_the_warm_up(pair: Pair) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from service.metrics import ServiceMetrics

    fast, exact, x = pair

    def rescored(metrics: ServiceMetrics) -> float:
        families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
        [sample] = [s for s in families["radscreen_precision_rescored"].samples if s.name.endswith("_total")]
        return sample.value

    guarded = GuardedBackend(fast, exact, GuardBand(1.0, 1.0, 1.0), decision_threshold=0.5, referral_threshold_mi=0.1)
    guarded.run(x[:2])  # the warm-up: not counted
    metrics = ServiceMetrics()
    metrics.watch_guard(guarded)
    assert rescored(metrics) == 0
    guarded.run(x[:3])
    assert rescored(metrics) == 3  # every image lies inside a band this wide
    metrics.watch_guard(fast)  # a precision served without a guard band: the series stays, at 0
    assert rescored(metrics) == 0
