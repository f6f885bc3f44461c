"""Sampling by source: each epoch's images drawn so that each source supplies its stated share of the steps.

Without weights an epoch is a permutation of the training images, so each source's share of the gradient
steps is its share of the images. With ``source_weights`` (``TrainConfig.source_weights``, e.g.
``{"odir": 0.5, "eyepacs": 0.5}``) an epoch still holds as many draws as there are training images, and
source s supplies a share w_s of them:

- the quotas are n·w_s rounded by systematic sampling (one uniform offset u: source s gets
  floor(C_s + u) − floor(C_{s−1} + u) draws, with C_s = n·Σ_{r ≤ s} w_r), so they add up to n and their
  expectation is exactly n·w_s;
- within a source the draws are whole permutations of its images, then the first images of one more
  permutation: an under-weighted source shows each of its images at most once an epoch, an over-weighted one
  repeats each image the same number of times, ±1;
- the draws of all sources are then shuffled together.

Everything comes from the one generator the loop seeds from (seed, epoch), so an epoch's order is a pure
function of the run's seed and the epoch and an interrupted run resumes exactly.

Example::

    order = weighted_order(["odir", "eyepacs", "odir"], {"odir": 0.5, "eyepacs": 0.5},
                           torch.Generator().manual_seed(0))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch


def normalised_weights(weights: Mapping[str, float], present: Sequence[str | None]) -> dict[str, float]:
    """``weights`` divided by their sum, after checking they name exactly the sources in ``present``."""
    names = sorted({s or "" for s in present})
    if "" in names:
        raise ValueError("source weights need every training image to name its source (a manifest 'source' column)")
    missing, extra = sorted(set(names) - set(weights)), sorted(set(weights) - set(names))
    if missing or extra:
        raise ValueError(f"source weights must name exactly the training sources {names}: "
                         + "; ".join(p for p in (f"missing {missing}" if missing else "",
                                                 f"not in the training data {extra}" if extra else "") if p))
    bad = {k: v for k, v in weights.items() if not (v > 0 and math.isfinite(v))}
    if bad:
        raise ValueError(f"source weights must be positive, got {bad}")
    total = float(sum(weights.values()))
    return {name: float(weights[name]) / total for name in names}


def source_quotas(n: int, weights: Mapping[str, float], generator: torch.Generator) -> dict[str, int]:
    """Draws per source for an epoch of ``n`` draws (systematic rounding; sums to ``n``; E = n·w)."""
    offset = float(torch.rand((), generator=generator, dtype=torch.float64))
    quotas, previous, cumulative = {}, 0, 0.0
    for name in sorted(weights):
        cumulative += n * weights[name]
        bound = min(n, math.floor(cumulative + offset))
        quotas[name], previous = bound - previous, bound
    last = sorted(weights)[-1]
    quotas[last] += n - previous  # float rounding of the running sum: the last source takes the remainder
    return quotas


def weighted_order(sources: Sequence[str | None], weights: Mapping[str, float],
                   generator: torch.Generator) -> torch.Tensor:
    """One epoch's image indices ``[len(sources)]`` with each source's share set by ``weights`` (module docstring)."""
    w = normalised_weights(weights, sources)
    members: dict[str, list[int]] = {name: [] for name in w}
    for i, source in enumerate(sources):
        members[source or ""].append(i)
    picks: list[torch.Tensor] = []
    for name, quota in source_quotas(len(sources), w, generator).items():
        index = torch.tensor(members[name], dtype=torch.int64)
        rounds = [index[torch.randperm(len(index), generator=generator)] for _ in range(-(-quota // len(index)))]
        picks.append(torch.cat(rounds)[:quota] if rounds else index[:0])
    drawn = torch.cat(picks)
    return drawn[torch.randperm(len(drawn), generator=generator)]
