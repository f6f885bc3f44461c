"""Our served CPU path against the peer a user would pick: IntelLabs bayesian-torch, in ONE process.

The peer is the same VGG-16* (width 46: 13 convolutions of 2,2,3,3,3 per block, widths 46..368, first
convolution stride 2, max-pool after blocks 1-4, LeakyReLU(0.2), concatenated global mean + max pool ->
736 -> one logit) built from bayesian-torch's reparameterisation layers (``Conv2dReparameterization``,
``LinearReparameterization``: mean-field Gaussian, a fresh weight sample on every forward), at the compared
artifact's width and blocks. Like with like: the peer runs as many stochastic forwards per image as the
artifact serves passes, split the same way (``ServingDraws``: K draws on the image as taken and, with
test-time flip, K more on its mirror image; ``return_kl=False``: no KL work at inference, the fairest peer).

Ours: the embedded default artifact (the served model, 256 px) through ``service.inference.backends.make_backend``
exactly as the service builds it, each path at the artifact's served option (its K draws and views: a
path with test-time flip is wrapped in ``FlipViewsBackend`` as ``load_scorer`` wraps it), in each candidate
execution path (``--paths``: fp32 torch and ONNX Runtime,
torch bf16 where the CPU runs it natively, ONNX Runtime int8 from the artifact's range table, and ``auto``,
the path the service picks on this machine, with its fp32 re-scoring inside the guard band when the
artifact's record asks for it; on one image that image is either inside the band or not, so the expected
cost per image, fast path + share re-scored x fp32, is printed beside it).  Every path scores the
same real fundus photograph (IDRiD, /work/shared/data, preprocessed by the served pipeline), batch 1,
fp32, with the thread count fixed for torch and ONNX Runtime alike (``--threads``), timed round-robin:
one call of each path per repeat, so load from other processes on a shared machine hits all alike.
Reported: forward passes per image, p50/mean seconds per image and the ratio peer p50 / path p50 (how many
times faster than the peer), plus each path's largest |Δ logit| against the reference path (``torch-loop``
at the same draws and views). ``--image`` scores another photograph (default: IDRiD_01 from the shared data).

bayesian-torch is a benchmark dependency that ``make setup`` (the dev set) installs without its
requirements, which would pull another torch (``pip install --no-deps bayesian-torch==0.5.0``). Example
(figures in docs/results-benchmarks.md, "Against the peer")::

    .venv/bin/python benchmarks/bench_peer.py --threads 1 --repeats 5
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.artifact import load_artifact
from models.nn.draws import run_views
from models.platform.cpu import detect_cpu
from models.serving.int8 import INT8_RANGES_FILE
from service.inference.backends import FlipViewsBackend, make_backend
from service.inference.imaging import ImagePipeline
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import ScorerSpec
from support.shared_data import IDRID

DATA = IDRID  # $RADSCREEN_SHARED_DATA/idrid-lesion-54
# name -> (backend, strategy, precision) of the served path, as make_backend takes them
PATHS: dict[str, tuple[str, str, str]] = {
    "torch-loop": ("torch", "loop", "fp32"),
    "torch-grouped": ("torch", "grouped", "fp32"),
    "onnx-loop": ("onnxruntime", "loop", "fp32"),
    "onnx-grouped": ("onnxruntime", "grouped", "fp32"),
    "torch-loop-bf16": ("torch", "loop", "bf16"),  # native bf16 CPUs only
    "onnx-loop-int8": ("onnxruntime", "loop", "int8"),  # the artifact's int8 range table
}
Runner = Callable[[np.ndarray], np.ndarray]  # images [1, C, H, W] -> logits [K, 1, O]


class PeerVGG(nn.Module):
    """VGG-16* from bayesian-torch layers: one stochastic forward [B, C, H, W] -> logits [B, O]."""

    def __init__(self, width: int = 46, blocks: tuple[int, ...] = (2, 2, 3, 3, 3), slope: float = 0.2,
                 first_stride: int = 2) -> None:
        from bayesian_torch.layers import Conv2dReparameterization, LinearReparameterization

        super().__init__()
        layers: list[nn.Module] = []
        in_ch, first = 3, True
        for b, (n, mult) in enumerate(zip(blocks, (1, 2, 4, 8, 8), strict=True)):
            for _ in range(n):
                layers.append(Conv2dReparameterization(in_ch, width * mult, 3, stride=first_stride if first else 1,
                                                       padding=1, posterior_rho_init=-6.0))
                in_ch, first = width * mult, False
            if b < len(blocks) - 1:
                layers.append(nn.MaxPool2d(2))
        self.layers = nn.ModuleList(layers)
        self.head = LinearReparameterization(2 * in_ch, 1, posterior_rho_init=-6.0)
        self.slope = slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x  # [B, C, H, W]
        for m in self.layers:
            h = m(h) if isinstance(m, nn.MaxPool2d) else F.leaky_relu(m(h, return_kl=False), self.slope)
        feats = torch.cat([h.mean(dim=(-2, -1)), h.amax(dim=(-2, -1))], dim=-1)  # [B, 2C]
        return self.head(feats, return_kl=False)


def peer_runner(k: int, views: int, seed: int, model_dir: Path | None = None) -> Runner:
    """The peer's passes: K stochastic forwards per view (the image as taken, then mirrored left-right when
    ``views`` is 2), stacked like ours to [views·K, B, O], with the artifact's width and blocks."""
    arch = load_artifact(model_dir).config.architecture
    torch.manual_seed(seed)
    peer = PeerVGG(width=arch.width, blocks=tuple(arch.blocks), slope=arch.negative_slope,
                   first_stride=arch.first_stride).eval()

    @torch.inference_mode()
    def run(images: np.ndarray) -> np.ndarray:
        passes = lambda x: torch.stack([peer(x) for _ in range(k)])  # noqa: E731  [K, B, O]
        return run_views(passes, torch.from_numpy(images), flip=views == 2).numpy()  # the order ours serves

    return run


def ours_runners(paths: list[str], model_dir: Path | None, threads: int,
                 int8_ranges: Path | None = None) -> dict[str, Runner]:
    """Each served path built as the service builds it (``make_backend``) over the default artifact, plus
    ``auto``: the backend ``load_scorer`` picks on this machine (with its guard band, if any)."""
    artifact = load_artifact(model_dir)
    model = artifact.build_model()
    served = artifact.serving_draws()
    cpu = detect_cpu()
    ranges = artifact.directory / INT8_RANGES_FILE if INT8_RANGES_FILE in artifact.files else int8_ranges
    out: dict[str, Runner] = {}
    for name in paths:
        if name == "auto":
            scorer = load_scorer(ScorerSpec(model_dir=model_dir, device="cpu", threads=threads), cpu=cpu)
            print(f"auto = {scorer.backend.name} {scorer.precision}: {scorer.runtime['precision_reason']}")
            out[name] = scorer.backend.run
            continue
        backend, strategy, precision = PATHS[name]
        if precision == "bf16" and not cpu.native_bf16:
            print(f"{name}: skipped, this CPU has no native bf16 (emulated bf16 is ~70x slower)")
            continue
        if precision == "int8" and ranges is None:
            print(f"{name}: skipped, the artifact carries no {INT8_RANGES_FILE} (give one with --int8-ranges)")
            continue
        net = artifact.serving_draws().materialise(model)
        draws_backend = make_backend(net, backend=backend, device="cpu", precision=precision, strategy=strategy,
                                     intra_op_threads=threads, int8_ranges=ranges)
        out[name] = (FlipViewsBackend(draws_backend) if served.test_time_flip else draws_backend).run
    return out


def real_image(size_from: Path | None, path: Path | None = None) -> np.ndarray:
    """One photograph (default: IDRiD_01) through the served preprocessing: float32 [1, 3, S, S]."""
    pipe = ImagePipeline.of(load_artifact(size_from).image_transform())  # the artifact's own contract
    path = path or DATA / "IDRiD_01.jpg"
    if not path.is_file():
        raise SystemExit(f"bench_peer: {path} is missing; it needs the shared IDRiD images (see its README) "
                         "or --image")
    return prepare_image(path.read_bytes(), pipe).pixels[None]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1, help="torch and ORT intra-op threads (fixed)")
    p.add_argument("--repeats", type=int, default=5, help="timed round-robin rounds")
    p.add_argument("--paths", default="torch-loop,onnx-loop,torch-loop-bf16,onnx-loop-int8,auto",
                   help=f"ours, some of: {', '.join(PATHS)}, auto (what the service picks here)")
    p.add_argument("--model-dir", type=Path, default=None, help="artifact (default: the embedded model)")
    p.add_argument("--image", type=Path, default=None, help="the photograph scored (default: IDRiD_01.jpg)")
    p.add_argument("--int8-ranges", type=Path, default=None,
                   help="int8 range table for onnx-loop-int8 when the artifact ships none (its record does not "
                   "permit int8): benchmarks/drift_real.py --save-ranges writes one")
    args = p.parse_args(argv)
    paths = args.paths.split(",")
    unknown = sorted(set(paths) - set(PATHS) - {"auto"})
    if unknown:
        p.error(f"unknown paths {unknown}; expected some of: {', '.join(PATHS)}")
    try:
        import bayesian_torch
    except ImportError:
        raise SystemExit("bench_peer needs bayesian-torch: pip install --no-deps bayesian-torch") from None
    torch.set_num_threads(args.threads)
    image = real_image(args.model_dir, args.image)  # [1, 3, S, S]
    cpu = detect_cpu()
    served = load_artifact(args.model_dir).serving_draws()
    print(f"torch {torch.__version__}, bayesian-torch {getattr(bayesian_torch, '__version__', '0.5.0')}, "
          f"{platform.machine()}, {cpu.summary()}, threads {torch.get_num_threads()}, "
          f"image {image.shape[-1]} px; served option {served.split_text()} = {served.passes} passes per image")
    runners: dict[str, Runner] = {"peer (bayesian-torch)": peer_runner(served.mc_samples, served.views, 0,
                                                                       args.model_dir)}
    runners.update(ours_runners(paths, args.model_dir, args.threads, args.int8_ranges))
    outputs = {name: run(image) for name, run in runners.items()}  # warm-up, and the outputs compared
    times: dict[str, list[float]] = {name: [] for name in runners}
    for r in range(args.repeats):
        for name, run in runners.items():
            start = time.perf_counter()
            run(image)
            times[name].append(time.perf_counter() - start)
        print(f"  round {r + 1}: " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()), flush=True)
    peer = statistics.median(times["peer (bayesian-torch)"])
    ref = outputs.get("torch-loop")
    print("\n| path | passes / image | p50 s/img | mean s/img | × peer (p50) | max abs Δlogit vs torch-loop |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, t in times.items():
        p50 = statistics.median(t)
        # ours [views·K·M, B, O] (M head draws per pass, draw-major), the peer's [views·K, B, O]
        passes = outputs[name].shape[0] // (1 if name.startswith("peer") else served.head_draws)
        if passes != served.passes:
            raise SystemExit(f"{name}: {passes} passes per image, the served option has {served.passes}")
        delta = "—" if ref is None or name.startswith("peer") else f"{np.abs(outputs[name] - ref).max():.1e}"
        print(f"| {name} | {passes} | {p50:.3f} | {statistics.fmean(t):.3f} | {peer / p50:.2f}× | {delta} |")
    guard = load_artifact(args.model_dir).calibration.permits()
    fp32 = statistics.median(times["onnx-loop"]) if "onnx-loop" in times else None
    for name, prec in (("onnx-loop-int8", "int8"), ("torch-loop-bf16", "bf16")):
        band = guard[prec].guard if prec in guard else None
        if name in times and band is not None and fp32 is not None:
            expected = statistics.median(times[name]) + band.share_rescored * fp32
            print(f"{name} with its guard band ({band.share_rescored:.1%} of real photographs re-scored by "
                  f"onnx-loop): expected {expected:.3f} s/img = {peer / expected:.2f}× the peer")


if __name__ == "__main__":
    main()
