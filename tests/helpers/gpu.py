"""The ``gpu`` tests: marked ``gpu`` and skipped, with the reason, where torch sees no CUDA device.

Run them on a GPU machine with ``pytest -m gpu`` (or ``make gpu-check``, which also runs the benchmarks and
writes a report). Apply to a whole module with ``pytestmark = GPU``.
"""

from __future__ import annotations

import pytest
import torch


def no_cuda_reason() -> str:
    return (f"no CUDA device: torch {torch.__version__} (CUDA build: {torch.version.cuda or 'no'}) sees no GPU; "
            "run `pytest -m gpu` on a GPU machine")


GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=no_cuda_reason())]
