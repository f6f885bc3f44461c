"""Inference backends for the fixed posterior draws: images in, per-draw logits out.

Both run the same ``DrawnNetwork`` (K materialised draws, ``models.nn.draws``):

- ``TorchBackend``: eager torch, channels-last input, optional bf16/fp16 autocast, CPU or CUDA (on CUDA,
  fp32 is IEEE fp32: TF32 is switched off, ``models.platform.cuda.use_ieee_fp32``);
- ``OnnxBackend``: ``models.serving.onnx_backend.OnnxDrawnSession`` (CUDA provider on GPU, with TF32 off, CPU
  otherwise), fp32, grouped or per-draw graph, or int8 on the CPU (``models.serving.int8``); the fp32 drawn weights
  are injected at load time, never baked in. A CUDA request that ONNX Runtime cannot honour fails at start
  (``ProviderFallbackError``), so the reported device is the one that runs.

The precision and strategy arrive already resolved (``models.platform.compute.resolve``: ``auto`` is decided there, from
the machine and the artifact); ``strategy="auto"`` is still accepted here and resolved the same way.

``FlipViewsBackend`` runs each image and its mirror image (the artifact's ``test_time_flip``).
``GuardedBackend`` wraps a reduced-precision backend with an fp32 one that re-scores the images whose answer
lies near a threshold (the artifact's measured guard band).

Agreement (fp32, tests/service/test_scoring.py): probability and MI equal to 1e-4 between the two.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from models.artifact.schema import GuardBand
from models.nn.draws import DrawnNetwork, run_views
from models.nn.uncertainty import binary_uncertainty_from_logits
from models.platform.compute import resolve_strategy
from models.platform.cuda import use_ieee_fp32
from models.serving.int8 import INT8_RANGES_FILE, Int8DrawnSession

logger = logging.getLogger(__name__)

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Backend(Protocol):
    """Runs the K draws on a batch: float32 [B, C, H, W] -> float32 logits [K, B, O]."""

    name: str
    device: str
    precision: str
    strategy: str

    def run(self, x: np.ndarray) -> np.ndarray: ...


class TorchBackend:
    """Eager torch execution of the drawn network."""

    name = "torch"

    def __init__(self, net: DrawnNetwork, *, device: str, precision: str, strategy: str = "auto",
                 intra_op_threads: int | None = None) -> None:
        if precision not in ("fp32", *_DTYPES):
            raise ValueError(f"precision={precision!r} must be resolved first; expected one of: fp32, bf16, fp16.")
        self.device = device
        self.precision = precision
        # Per-draw loop beats grouped convolutions on CPU (oneDNN), grouped wins on GPU: docs/results-benchmarks.md.
        net.strategy = resolve_strategy(strategy, device=device, backend=self.name)[0]
        self.strategy: str = net.strategy
        if intra_op_threads is not None:
            torch.set_num_threads(intra_op_threads)  # process-wide: torch has one intra-op pool
        use_ieee_fp32(device)  # fp32 on CUDA is IEEE fp32, not TF32 (models.platform.cuda); a no-op on CPU
        net = net.to(device)
        # channels-last applies to the 4-D (grouped-conv) weight buffers only
        self.net = net.to(memory_format=torch.channels_last).eval()  # type: ignore[call-overload]
        if device == "cpu" and precision == "fp16":
            logger.warning("fp16 autocast on CPU is slow on most CPUs; bf16 is the usual CPU choice")

    @torch.inference_mode()
    def run(self, x: np.ndarray) -> np.ndarray:
        xt = torch.from_numpy(x).to(self.device).contiguous(memory_format=torch.channels_last)  # [B, C, H, W]
        if self.precision == "fp32":
            logits = self.net(xt)
        else:
            with torch.autocast(device_type=self.device, dtype=_DTYPES[self.precision]):
                logits = self.net(xt)
        return logits.float().cpu().numpy()  # [K, B, O]


class OnnxBackend:
    """ONNX Runtime execution of the drawn network: fp32 (drawn weights supplied as external initializers at
    load), or int8 on the CPU (``models.serving.int8``: quantised at load with the artifact's range table)."""

    name = "onnxruntime"

    def __init__(self, net: DrawnNetwork, *, device: str, precision: str, strategy: str = "auto",
                 intra_op_threads: int | None = None, int8_ranges: Path | None = None) -> None:
        from models.serving.onnx_backend import OnnxDrawnSession

        self.device = device
        self.precision = precision
        self.session: OnnxDrawnSession | Int8DrawnSession
        if precision == "int8":
            if device != "cpu" or int8_ranges is None:
                raise ValueError("precision='int8' needs the CPU and the artifact's int8 range table "
                                 f"({INT8_RANGES_FILE}; benchmarks/drift_real.py --record writes it)")
            self.session = Int8DrawnSession(net, int8_ranges, intra_op_threads=intra_op_threads)
            self.strategy = self.session.strategy
            return
        if precision != "fp32":
            raise ValueError(
                f"precision={precision!r} is not supported by the onnxruntime backend; use fp32 or int8, "
                "or the torch backend for bf16/fp16."
            )
        self.strategy = resolve_strategy(strategy, device=device, backend=self.name)[0]
        # CUDA provider on cuda, else CPU; ORT_ENABLE_ALL graph optimisations
        self.session = OnnxDrawnSession(net, device=device, strategy=self.strategy,
                                        intra_op_threads=intra_op_threads)

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.session.run(np.ascontiguousarray(x, dtype=np.float32)), dtype=np.float32)


class GuardedBackend:
    """A reduced-precision backend whose answers near a decision are re-scored in fp32.

    An image whose reduced-precision p̄ lies within ``guard.probability`` of the decision threshold, or whose
    MI lies within ``guard.mutual_information`` of the MI threshold, is run again through ``exact`` (fp32)
    and gets fp32's logits. The band is the artifact's measured one (``Calibration.permits``): wider than
    any shift measured on real photographs, so outside it the reduced path cannot change the outcome.
    ``rescored`` / ``scored`` count the images, for the service's metrics.
    """

    def __init__(self, fast: Backend, exact: Backend, guard: GuardBand, *, decision_threshold: float,
                 referral_threshold_mi: float) -> None:
        self.fast, self.exact, self.guard = fast, exact, guard
        self.name, self.device, self.precision, self.strategy = fast.name, fast.device, fast.precision, fast.strategy
        self.decision_threshold, self.referral_threshold_mi = decision_threshold, referral_threshold_mi
        self.scored = self.rescored = 0

    def near_thresholds(self, logits: np.ndarray) -> np.ndarray:
        """Mask ``[B]``: the images whose answer lies inside the guard band ([K, B, O] logits in)."""
        unc = binary_uncertainty_from_logits(torch.from_numpy(logits))
        p, mi = unc.probability.numpy(), unc.mutual_information.numpy()
        return np.asarray((np.abs(p - self.decision_threshold) <= self.guard.probability)
                          | (np.abs(mi - self.referral_threshold_mi) <= self.guard.mutual_information))

    def run(self, x: np.ndarray) -> np.ndarray:
        logits = self.fast.run(x)  # [K, B, O]
        near = self.near_thresholds(logits)
        if near.any():
            logits = logits.copy()
            logits[:, near] = self.exact.run(np.ascontiguousarray(x[near]))
        self.scored += len(near)
        self.rescored += int(near.sum())
        return logits


class FlipViewsBackend:
    """Test-time flip (``ServingDraws.test_time_flip``) around a backend that runs draws: each image and its
    mirror image in one batch, the two orientations' draws one after the other (``models.nn.draws.run_views``,
    the one place the order is written). It wraps each backend that runs draws (inside ``GuardedBackend``, so
    the guard judges the pooled answer that is served).
    """

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name, self.device, self.precision = inner.name, inner.device, inner.precision
        self.strategy = inner.strategy

    def run(self, x: np.ndarray) -> np.ndarray:
        return run_views(self.inner.run, x, flip=True)


def make_backend(net: DrawnNetwork, *, backend: str, device: str, precision: str, strategy: str = "auto",
                 intra_op_threads: int | None = None, int8_ranges: Path | None = None) -> Backend:
    """Build the named backend; unknown names raise ValueError listing the valid ones.

    ``intra_op_threads``: None = the library default (all cores); torch's setting is process-wide.
    ``int8_ranges``: the artifact's int8 range table (precision int8 only).
    """
    if backend == "torch":
        return TorchBackend(net, device=device, precision=precision, strategy=strategy,
                            intra_op_threads=intra_op_threads)
    if backend == "onnxruntime":
        return OnnxBackend(net, device=device, precision=precision, strategy=strategy,
                           intra_op_threads=intra_op_threads, int8_ranges=int8_ranges)
    raise ValueError(f"Unknown backend {backend!r}; expected one of: torch, onnxruntime.")
