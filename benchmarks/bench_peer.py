"""Our served CPU path against the peer a user would pick: IntelLabs bayesian-torch, in ONE process.

The peer is the same VGG-16* (width 46: 13 convolutions of 2,2,3,3,3 per block, widths 46..368, first
convolution stride 2, max-pool after blocks 1-4, LeakyReLU(0.2), concatenated global mean + max pool ->
736 -> one logit) built from bayesian-torch's reparameterisation layers (``Conv2dReparameterization``,
``LinearReparameterization``: mean-field Gaussian, a fresh weight sample on every forward). One image
= 16 Monte Carlo forwards of it (``return_kl=False``: no KL work at inference, the fairest peer).

Ours: the embedded default artifact (the served model, 256 px) through ``service.inference.backends.make_backend``
exactly as the service builds it, in each candidate execution path (``--paths``).  Every path scores the
same real fundus photograph (IDRiD, /work/shared/data, preprocessed by the served pipeline), batch 1,
fp32, with the thread count fixed for torch and ONNX Runtime alike (``--threads``), timed round-robin:
one call of each path per repeat, so load from other processes on a shared machine hits all alike.
Reported: p50/mean seconds per image and the ratio peer p50 / path p50 (how many times faster than the
peer), plus each path's largest |Δ logit| against the served reference path (``torch-loop``).

bayesian-torch is an optional benchmark dependency (``pip install --no-deps bayesian-torch``: its
requirements would pull another torch). Example (figures in docs/benchmarks.md, "Against the peer")::

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
from models.cpu import detect_cpu
from models.draws import materialise_draws
from service.inference.backends import make_backend
from service.inference.scoring import ImagePipeline, prepare_image
from support.shared_data import IDRID

DATA = IDRID  # $RADSCREEN_SHARED_DATA/idrid-lesion-54
# name -> (backend, strategy) of the served path, as make_backend takes them
PATHS: dict[str, tuple[str, str]] = {
    "torch-loop": ("torch", "loop"),
    "torch-grouped": ("torch", "grouped"),
    "onnx-loop": ("onnxruntime", "loop"),
    "onnx-grouped": ("onnxruntime", "grouped"),
}
Runner = Callable[[np.ndarray], np.ndarray]  # images [1, C, H, W] -> logits [K, 1, O]


class PeerVGG(nn.Module):
    """VGG-16* from bayesian-torch layers: one stochastic forward [B, C, H, W] -> logits [B, O]."""

    def __init__(self, width: int = 46, blocks: tuple[int, ...] = (2, 2, 3, 3, 3), slope: float = 0.2) -> None:
        from bayesian_torch.layers import Conv2dReparameterization, LinearReparameterization

        super().__init__()
        layers: list[nn.Module] = []
        in_ch, first = 3, True
        for b, (n, mult) in enumerate(zip(blocks, (1, 2, 4, 8, 8), strict=True)):
            for _ in range(n):
                layers.append(Conv2dReparameterization(in_ch, width * mult, 3, stride=2 if first else 1,
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


def peer_runner(k: int, seed: int) -> Runner:
    """The peer's 16 MC passes: K stochastic forwards, stacked like ours to [K, B, O]."""
    torch.manual_seed(seed)
    peer = PeerVGG().eval()

    @torch.inference_mode()
    def run(images: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(images)
        return torch.stack([peer(x) for _ in range(k)]).numpy()

    return run


def ours_runners(paths: list[str], model_dir: Path | None, threads: int) -> dict[str, Runner]:
    """Each served path built as the service builds it (``make_backend``) over the default artifact."""
    artifact = load_artifact(model_dir)
    model = artifact.build_model()
    out: dict[str, Runner] = {}
    for name in paths:
        backend, strategy = PATHS[name]
        net = materialise_draws(model, k=artifact.config.mc_samples, seed=artifact.config.draw_seed)
        draws_backend = make_backend(net, backend=backend, device="cpu", precision="fp32", strategy=strategy,
                                     intra_op_threads=threads)
        out[name] = draws_backend.run
    return out


def real_image(size_from: Path | None) -> np.ndarray:
    """One IDRiD photograph through the served preprocessing: float32 [1, 3, S, S]."""
    cfg = load_artifact(size_from).config
    pipe = ImagePipeline(size=cfg.input_size, mean=cfg.mean, std=cfg.std)
    path = DATA / "IDRiD_01.jpg"
    if not path.is_file():
        raise SystemExit(f"bench_peer: {path} is missing; it needs the shared IDRiD images (see its README)")
    return prepare_image(path.read_bytes(), pipe).pixels[None]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1, help="torch and ORT intra-op threads (fixed)")
    p.add_argument("--repeats", type=int, default=5, help="timed round-robin rounds")
    p.add_argument("--paths", default="torch-loop,onnx-loop", help=f"ours, some of: {', '.join(PATHS)}")
    p.add_argument("--model-dir", type=Path, default=None, help="artifact (default: the embedded model)")
    p.add_argument("--k", type=int, default=16, help="peer MC passes per image (ours: the artifact's K)")
    args = p.parse_args(argv)
    paths = args.paths.split(",")
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        p.error(f"unknown paths {unknown}; expected some of: {', '.join(PATHS)}")
    try:
        import bayesian_torch
    except ImportError:
        raise SystemExit("bench_peer needs bayesian-torch: pip install --no-deps bayesian-torch") from None
    torch.set_num_threads(args.threads)
    image = real_image(args.model_dir)  # [1, 3, S, S]
    cpu = detect_cpu()
    print(f"torch {torch.__version__}, bayesian-torch {getattr(bayesian_torch, '__version__', '0.5.0')}, "
          f"{platform.machine()}, {cpu.summary()}, threads {torch.get_num_threads()}, "
          f"image {image.shape[-1]} px")
    runners: dict[str, Runner] = {"peer (bayesian-torch)": peer_runner(args.k, 0)}
    runners.update(ours_runners(paths, args.model_dir, args.threads))
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
    print("\n| path | p50 s/img | mean s/img | × peer (p50) | max abs Δlogit vs torch-loop |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, t in times.items():
        p50 = statistics.median(t)
        delta = "—" if ref is None or name.startswith("peer") else f"{np.abs(outputs[name] - ref).max():.1e}"
        print(f"| {name} | {p50:.3f} | {statistics.fmean(t):.3f} | {peer / p50:.2f}× | {delta} |")


if __name__ == "__main__":
    main()
