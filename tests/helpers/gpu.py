"""The ``gpu`` tests: marked ``gpu`` and skipped, with the reason, where torch sees no CUDA device.

Run them on a GPU machine with ``pytest -m gpu tests/gpu`` (or ``scripts/gpu_lease.sh``, which also runs the
benchmarks and a training run and writes a report); the folder collects without the web stack.
Apply to a whole module with ``pytestmark = GPU``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import torch


def no_cuda_reason() -> str:
    return (f"no CUDA device: torch {torch.__version__} (CUDA build: {torch.version.cuda or 'no'}) sees no GPU; "
            "run `pytest -m gpu` on a GPU machine")


GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=no_cuda_reason())]


T = TypeVar("T")


def ort_cuda_or_skip(load: Callable[[], T]) -> T:
    """``load()`` (something that opens ONNX Runtime on CUDA), or a skip naming why its CUDA provider is not
    there: left out of this build (a CPU onnxruntime, as on a GPU lease's node: ``ValueError``, "providers not
    available") or present but not activated (``ProviderFallbackError``). Never a silent CPU run."""
    from models.serving.onnx_backend import ProviderFallbackError

    try:
        return load()
    except ProviderFallbackError as exc:
        pytest.skip(f"onnxruntime's CUDA provider does not load here: {exc}")
    except ValueError as exc:
        if "providers not available" not in str(exc):
            raise
        pytest.skip(f"this onnxruntime has no CUDA provider: {exc}")


PARITY_ARTIFACT_ENV = "RADSCREEN_PARITY_ARTIFACT"


def parity_artifact() -> Path:
    """The artifact the CUDA parity tests score: ``$RADSCREEN_PARITY_ARTIFACT`` (the lease script points it at
    the model it has just trained), else the embedded model; a skip naming both when neither has weights (a
    lease sends the tree without the embedded weights)."""
    from models.artifact import DEFAULT_ARTIFACT_DIR

    chosen = Path(os.environ.get(PARITY_ARTIFACT_ENV) or DEFAULT_ARTIFACT_DIR)
    if not (chosen / "weights.safetensors").is_file():
        pytest.skip(f"no weights at {chosen}: the embedded weights were left out of this tree; set "
                    f"{PARITY_ARTIFACT_ENV} to a trained artifact (scripts/gpu_lease.sh does)")
    return chosen
