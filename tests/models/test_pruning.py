"""Pruning by signal-to-noise (models.nn.pruning): the ranking, the exact share kept, the packed round trip."""

from __future__ import annotations

import math

import pytest
import torch

from models.nn.posteriors import rho_from_sigma, sigma_from_rho
from models.nn.pruning import (
    PRUNED_RHO,
    pack_state_dict,
    prune_state_dict,
    pruned_mask,
    snr,
    snr_quantiles,
    unpack_state_dict,
)


def _state() -> dict[str, torch.Tensor]:
    """Two weight tensors whose ranking by SNR and by |μ| disagree: the small tensor's weights have the larger
    |μ|/σ (1 vs 0.3) but the smaller per-coordinate SNR (1·√4 = 2 vs 0.3·√100 = 3)."""
    one = rho_from_sigma(1.0)
    return {"a.weight_mu": torch.full((2, 2), 1.0), "a.weight_rho": torch.full((2, 2), float(one)),
            "a.bias_mu": torch.zeros(2), "a.bias_rho": torch.full((2,), -3.0),
            "b.weight_mu": torch.full((10, 10), 0.3), "b.weight_rho": torch.full((10, 10), float(one)),
            "b.bias_mu": torch.zeros(10), "b.bias_rho": torch.full((10,), -3.0)}


def test_snr_uses_the_radial_per_coordinate_scale() -> None:
    mu, rho = torch.full((5, 20), 0.5), torch.full((5, 20), -1.0)
    expected = 0.5 * math.sqrt(100) / float(sigma_from_rho(torch.tensor(-1.0)))
    torch.testing.assert_close(snr(mu, rho), torch.full((5, 20), expected, dtype=torch.float64))


def test_snr_prunes_the_lowest_snr_and_magnitude_the_lowest_mu() -> None:
    state = _state()
    by_snr = prune_state_dict(state, 100 / 104, method="snr")
    assert not by_snr.masks["a.weight"].any() and by_snr.masks["b.weight"].all()
    by_mu = prune_state_dict(state, 4 / 104, method="magnitude")
    assert by_mu.masks["a.weight"].all() and not by_mu.masks["b.weight"].any()


def test_lowest_snr_removed_within_a_tensor_and_kept_share_exact() -> None:
    torch.manual_seed(0)
    state = {"l.weight_mu": torch.randn(30, 7), "l.weight_rho": torch.randn(30, 7) - 3}
    result = prune_state_dict(state, 0.3)
    assert result.kept == round(0.3 * 210) == int(result.masks["l.weight"].sum())
    s = snr(state["l.weight_mu"], state["l.weight_rho"])
    mask = result.masks["l.weight"]
    assert s[mask].min() > s[~mask].max()
    assert result.threshold == pytest.approx(float(s[mask].min()))


def test_pruned_weights_have_zero_mu_and_zero_sigma_and_kept_ones_are_untouched() -> None:
    torch.manual_seed(1)
    state = {"l.weight_mu": torch.randn(8, 8), "l.weight_rho": torch.randn(8, 8) - 3,
             "l.bias_mu": torch.randn(8), "l.bias_rho": torch.randn(8)}
    result = prune_state_dict(state, 0.25)
    mask = result.masks["l.weight"]
    mu, rho = result.state["l.weight_mu"], result.state["l.weight_rho"]
    assert torch.equal(mu[~mask], torch.zeros(int((~mask).sum())))
    assert torch.equal(sigma_from_rho(rho[~mask]), torch.zeros(int((~mask).sum())))
    assert torch.equal(mu[mask], state["l.weight_mu"][mask]) and torch.equal(rho[mask], state["l.weight_rho"][mask])
    assert torch.equal(result.state["l.bias_mu"], state["l.bias_mu"])  # biases are not pruned
    assert torch.equal(pruned_mask(mu, rho), ~mask)


@pytest.mark.parametrize("keep", [1.0, 0.5, 0.1, 0.01])
def test_packed_round_trip_is_bit_exact_and_smaller(keep: float) -> None:
    torch.manual_seed(2)
    state = {"l.weight_mu": torch.randn(64, 3, 3, 3), "l.weight_rho": torch.randn(64, 3, 3, 3) - 3,
             "l.bias_mu": torch.randn(64), "l.bias_rho": torch.randn(64)}
    pruned = prune_state_dict(state, keep).state
    packed = pack_state_dict(pruned)
    back = unpack_state_dict(packed)
    assert back.keys() == pruned.keys()
    for k, v in pruned.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k].view(torch.int32), v.view(torch.int32)), k
    nbytes = sum(t.numel() * t.element_size() for t in packed.values())
    dense = sum(t.numel() * t.element_size() for t in pruned.values())
    if keep < 1.0:
        assert nbytes < dense * (keep + 0.1)
    else:
        assert packed.keys() == pruned.keys()  # nothing pruned, nothing packed


def test_unpack_refuses_a_mask_that_disagrees_with_the_values() -> None:
    torch.manual_seed(3)
    state = {"l.weight_mu": torch.randn(4, 4), "l.weight_rho": torch.randn(4, 4)}
    packed = pack_state_dict(prune_state_dict(state, 0.5).state)
    packed["l.weight_mu.kept"] = packed["l.weight_mu.kept"][:-1]
    with pytest.raises(ValueError, match=r"l\.weight: keep-mask has 8 weights"):
        unpack_state_dict(packed)


@pytest.mark.parametrize("keep", [0.0, 1.5])
def test_keep_outside_the_unit_interval_is_refused(keep: float) -> None:
    with pytest.raises(ValueError, match="keep must be a share"):
        prune_state_dict(_state(), keep)


def test_unknown_method_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="expected one of: snr, magnitude"):
        prune_state_dict(_state(), 0.5, method="random")  # type: ignore[arg-type]


def test_pruned_rho_gives_exactly_zero_sigma_in_every_dtype() -> None:
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert float(sigma_from_rho(torch.tensor(PRUNED_RHO, dtype=dtype))) == 0.0


def test_snr_quantiles_per_tensor() -> None:
    q = snr_quantiles(_state())
    assert q["a.weight"]["D"] == 4 and q["a.weight"]["q50"] == pytest.approx(2.0)
    assert q["b.weight"]["q50"] == pytest.approx(3.0)
    assert q["b.weight"]["median_abs_mu_over_sigma"] == pytest.approx(0.3)
