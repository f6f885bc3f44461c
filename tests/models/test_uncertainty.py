from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.nn.uncertainty import LN2, binary_uncertainty, binary_uncertainty_from_logits

probs_lists = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=32)


@settings(max_examples=200, deadline=None)
@given(probs_lists)
def test_bounds_zero_le_mi_le_predictive_entropy_le_ln2(ps: list[float]) -> None:
    u = binary_uncertainty(torch.tensor(ps, dtype=torch.float64)[:, None])
    mi, h, eh = u.mutual_information.item(), u.predictive_entropy.item(), u.expected_entropy.item()
    assert 0.0 <= mi <= h + 1e-12
    assert h <= LN2 + 1e-12
    assert 0.0 <= eh <= h + 1e-12
    assert math.isclose(mi, max(h - eh, 0.0), abs_tol=1e-12)


@given(st.floats(0.0, 1.0), st.integers(1, 20))
def test_mi_is_zero_when_all_samples_agree(p: float, s: int) -> None:
    u = binary_uncertainty(torch.full((s, 1), p, dtype=torch.float64))
    # Zero up to round-off: the float64 mean of S equal values may be off by ~S ulp, and H amplifies that
    # by its slope |H'(p)| = |log((1-p)/p)| (≈ 37 next to p = 1).
    slope = abs(math.log((1 - p) / p)) if 0.0 < p < 1.0 else 0.0
    tolerance = max(1e-15, slope * s * 2.3e-16)
    assert u.mutual_information.item() <= tolerance
    assert math.isclose(u.predictive_entropy.item(), u.expected_entropy.item(), abs_tol=tolerance)


def test_known_values() -> None:
    # Two confident samples that disagree: all uncertainty is epistemic, MI = ln 2.
    u = binary_uncertainty(torch.tensor([[0.0, 0.5], [1.0, 0.5]]))
    assert torch.allclose(u.probability, torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert math.isclose(u.mutual_information[0].item(), LN2, rel_tol=1e-12)
    assert u.expected_entropy[0].item() == 0.0
    # Both samples say 0.5: all uncertainty is aleatoric, MI = 0.
    assert u.mutual_information[1].item() == 0.0
    assert math.isclose(u.expected_entropy[1].item(), LN2, rel_tol=1e-12)


def test_from_logits_matches_probabilities() -> None:
    logits = torch.randn(16, 5, 1)
    a = binary_uncertainty_from_logits(logits)
    b = binary_uncertainty(torch.sigmoid(logits[..., 0].double()))
    assert torch.allclose(a.mutual_information, b.mutual_information)
