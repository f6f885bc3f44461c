"""The image-quality gate on generated examples (held-out seed; thresholds were set on seeds 0-1).

Tests may import ``training.synthetic`` (the service itself never does).
"""

from __future__ import annotations

import numpy as np
import pytest

from models.image.quality import assess_quality
from support.nonfundus import NON_FUNDUS

synthetic = pytest.importorskip("training.synthetic.render")
camera = pytest.importorskip("training.synthetic.camera")

HELD_OUT_SEED = 2026


def _gate(img: np.ndarray) -> tuple[bool, list[str], float]:
    q = assess_quality(img)  # the raw frame, as prepare_image passes it
    assert 0.0 <= q.score <= 1.0
    assert q.gradable == (q.score >= 0.5) == (not q.issues)  # the documented invariant
    return q.gradable, q.issues, q.score


def test_gate_accuracy_on_generated_sets() -> None:
    rng = np.random.default_rng(HELD_OUT_SEED)
    gradable = [_gate(synthetic.render_fundus(rng, i % 5, size=256, gradable=True)[0]) for i in range(40)]
    ungradable = {
        kind: [
            _gate(synthetic.render_fundus(rng, i % 5, size=256, gradable=False, ungradable_kind=kind)[0])
            for i in range(8)
        ]
        for kind in camera.UNGRADABLE_KINDS
    }
    non_fundus = {name: [_gate(make(rng, 256)) for _ in range(4)] for name, make in NON_FUNDUS.items()}

    acc_gradable = np.mean([g for g, _, _ in gradable])
    acc_ungradable = np.mean([not g for res in ungradable.values() for g, _, _ in res])
    acc_non_fundus = np.mean([not g for res in non_fundus.values() for g, _, _ in res])
    # measured at commit time: 1.00 / 1.00 / 1.00 (docs/service.md); allow a little slack
    assert acc_gradable >= 0.95, acc_gradable
    assert acc_ungradable >= 0.90, {k: [i for _, i, _ in v] for k, v in ungradable.items()}
    assert acc_non_fundus == 1.0, {k: [i for _, i, _ in v] for k, v in non_fundus.items()}


def test_issues_name_the_defect() -> None:
    rng = np.random.default_rng(HELD_OUT_SEED + 1)
    expected = {"blur": "blurred", "dark": "too_dark", "overexposed": "overexposed", "off_centre": "no_field_of_view"}
    for kind, issue in expected.items():
        hits = [
            issue in _gate(synthetic.render_fundus(rng, 1, size=256, gradable=False, ungradable_kind=kind)[0])[1]
            for _ in range(5)
        ]
        assert sum(hits) >= 4, (kind, hits)
    grey = NON_FUNDUS["grey_card"](rng, 256)  # right shape, wrong colour
    assert _gate(grey)[1] == ["not_fundus"] or "not_fundus" in _gate(grey)[1]
    assert "no_field_of_view" in _gate(NON_FUNDUS["scene"](rng, 256))[1]


def test_gate_is_resolution_independent() -> None:
    """The same photograph rendered at 256 and 512 px gets the same verdict."""
    for i in range(6):
        small = synthetic.render_fundus(np.random.default_rng(i), i % 5, size=256, gradable=i % 2 == 0)[0]
        large = synthetic.render_fundus(np.random.default_rng(i), i % 5, size=512, gradable=i % 2 == 0)[0]
        assert _gate(small)[0] == _gate(large)[0] == (i % 2 == 0)
