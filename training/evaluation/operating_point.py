"""The screening operating point: both thresholds chosen on validation eyes for sensitivity first.

A screening answer can go wrong in two ways of very different cost. A referable eye answered
``no_referable_dr`` is a missed patient; a non-referable eye sent to a grader (uncertain) or to an
ophthalmologist (referable) costs a human read. So the two thresholds the service applies
(``models.artifact.Calibration``: refer as uncertain iff MI > ``referral_threshold_mi``; refer as
referable iff p̄ >= ``decision_threshold``) are chosen together, on the validation eyes, by the rule:

1. **at most ``max_missed_share`` of the referable eyes may be answered ``no_referable_dr``** (certain and
   p̄ below the decision threshold; an uncertain or referred eye is not missed);
2. among the pairs that keep that, **answer as many non-referable eyes ``no_referable_dr`` as possible**
   (the programme's workload saving);
3. ties: the pair that defers fewer eyes as uncertain.

For each candidate MI threshold (the validation MI quantiles that defer 0, 1, ..., ``max_uncertain_share``
of the eyes) the decision threshold is the largest one that misses at most ``floor(max_missed_share x
n_referable)`` referable eyes: the (k+1)-th smallest p̄ among the certain referable eyes. The chosen
``max_missed_share`` is a validation share; the test share has sampling error on top (the report gives a
Clopper-Pearson interval), so a product target of 5 % is met more reliably with a stricter validation
target (the default, 3 %).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import beta

from models.outcome.decision import is_referable, is_uncertain

MAX_MI = math.log(2)  # nats: the largest MI a binary prediction can have (MI > this never happens)


@dataclass(frozen=True)
class OperatingPoint:
    """The two thresholds and what they do on the images they were chosen on."""

    decision_threshold: float  # refer as referable iff p̄ >= this (certain images)
    referral_threshold_mi: float  # refer as uncertain iff MI > this
    max_missed_share: float  # the rule's bound on referable eyes answered no_referable_dr
    missed_share: float  # achieved: referable eyes answered no_referable_dr / referable eyes
    missed_share_upper95: float  # one-sided 95 % Clopper-Pearson upper bound of missed_share
    auto_negative_share: float  # non-referable eyes answered no_referable_dr / non-referable eyes
    uncertain_share: float  # all eyes deferred as uncertain
    referred_share: float  # all eyes answered refer_referable_dr
    n_referable: int
    n_non_referable: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def clopper_pearson_upper(k: int, n: int, level: float = 0.95) -> float:
    """One-sided upper confidence bound of a binomial share ``k / n``."""
    if n <= 0:
        return float("nan")
    return 1.0 if k >= n else float(beta.ppf(level, k + 1, n - k))


def outcome_shares(probability: ArrayLike, mutual_information: ArrayLike, labels: ArrayLike, *,
                   decision_threshold: float, referral_threshold_mi: float) -> dict[str, float]:
    """Missed, auto-negative, uncertain and referred shares of these images at the given thresholds."""
    p, mi, y = (np.asarray(a, dtype=np.float64).ravel() for a in (probability, mutual_information, labels))
    uncertain = is_uncertain(mi, referral_threshold_mi)
    referable = is_referable(p, decision_threshold)
    negative = ~uncertain & ~referable  # answered no_referable_dr
    pos, neg = y == 1, y == 0
    return {
        "missed": int((negative & pos).sum()),
        "missed_share": float((negative & pos).sum() / max(int(pos.sum()), 1)),
        "auto_negative_share": float((negative & neg).sum() / max(int(neg.sum()), 1)),
        "uncertain_share": float(uncertain.mean()),
        "referred_share": float((~uncertain & referable).mean()),
    }


def screening_operating_point(probability: ArrayLike, mutual_information: ArrayLike, labels: ArrayLike, *,
                              max_missed_share: float = 0.03, max_uncertain_share: float = 0.5,
                              steps: int = 100) -> OperatingPoint:
    """Choose (decision threshold, MI threshold) on validation images by the module's rule.

    ``probability`` is p̄ ``[N]``, ``mutual_information`` ``[N]`` nats, ``labels`` ``[N]`` 0/1.
    """
    p, mi = (np.asarray(a, dtype=np.float64).ravel() for a in (probability, mutual_information))
    y = np.asarray(labels).ravel().astype(np.int64)
    if not (p.shape == mi.shape == y.shape) or p.size == 0:
        raise ValueError(f"probability, MI and labels must be [N] alike; got {p.shape}, {mi.shape}, {y.shape}")
    if not 0.0 <= max_missed_share < 1.0 or not 0.0 <= max_uncertain_share <= 1.0:
        raise ValueError(f"shares must lie in [0, 1): max_missed_share {max_missed_share}, "
                         f"max_uncertain_share {max_uncertain_share}")
    n_pos, n_neg = int((y == 1).sum()), int((y == 0).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("the operating point needs referable and non-referable validation images")
    allowed = math.floor(max_missed_share * n_pos + 1e-9)
    # candidate MI thresholds: defer the top u share by MI, u = 0, 1/steps, ..., max_uncertain_share
    shares = np.linspace(0.0, max_uncertain_share, round(steps * max_uncertain_share) + 1)
    candidates = sorted({MAX_MI} | {float(np.quantile(mi, 1.0 - u, method="lower")) for u in shares[1:]},
                        reverse=True)
    best: tuple[float, float, float, float] | None = None  # (auto_negative, -uncertain, t, m)
    for m in candidates:
        certain = ~is_uncertain(mi, m)
        pos_p = np.sort(p[certain & (y == 1)])
        # the largest t with at most `allowed` certain referable eyes below it
        t = 1.0 + 1e-12 if pos_p.size <= allowed else float(pos_p[allowed])
        t = min(t, 1.0)
        s = outcome_shares(p, mi, y, decision_threshold=t, referral_threshold_mi=m)
        key = (s["auto_negative_share"], -s["uncertain_share"], t, m)
        if best is None or key[:2] > best[:2]:
            best = key
    assert best is not None
    _, _, t, m = best
    s = outcome_shares(p, mi, y, decision_threshold=t, referral_threshold_mi=m)
    return OperatingPoint(
        decision_threshold=t, referral_threshold_mi=m, max_missed_share=max_missed_share,
        missed_share=s["missed_share"], missed_share_upper95=clopper_pearson_upper(int(s["missed"]), n_pos),
        auto_negative_share=s["auto_negative_share"], uncertain_share=s["uncertain_share"],
        referred_share=s["referred_share"], n_referable=n_pos, n_non_referable=n_neg)
