"""A real scorer whose forwards wait for a gate: makes the service's queue states deterministic in tests."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from service.inference.prepare import PreparedImage
from service.inference.scoring import ImageScore, Scorer


class GatedScorer(Scorer):
    """The real tiny scorer, whose forwards wait for ``gate`` (makes queue states deterministic)."""

    def __init__(self, inner: Scorer) -> None:
        super().__init__(
            backend=inner.backend,
            pipeline=inner.pipeline,
            model_identity=inner.model_identity,
            calibration=inner.calibration,
            model_card=inner.model_card,
        )
        self.gate, self.entered = threading.Event(), threading.Event()

    def score_batch(self, images: Sequence[PreparedImage]) -> list[ImageScore]:
        self.entered.set()
        assert self.gate.wait(60)
        return super().score_batch(images)
