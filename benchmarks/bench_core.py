"""Core inference benchmark: K = 16 Monte Carlo passes of VGG-16*, every execution path side by side.

Paths, all in one run on the same images and (for the fixed-draw paths) the same 16 draws:

* ``naive-loop``   — 16 separate stochastic forwards of the Bayesian model (S = 1 each, weights sampled
                     on every pass): what a straightforward implementation does;
* ``bayes-mc``     — the Bayesian model's own K-sample forward (``mc_logits``, sampling included);
* ``drawn-grouped``/``drawn-loop`` — the serving form (:class:`models.nn.draws.DrawnNetwork`, K fixed draws
                     materialised once) with grouped convolutions / K sequential passes;
* ``onnx``         — the same draws in ONNX Runtime (:class:`models.serving.onnx_backend.OnnxDrawnSession`),
                     grouped graph; ``onnx-loop`` — the per-draw (unrolled) graph.

Each torch path runs in fp32 and under bf16 autocast (fp16 autocast too on CUDA), with channels-last
input and weights as the service runs them (``service.inference.backends.TorchBackend``); fp32 on CUDA is
IEEE fp32, TF32 off (``models.platform.cuda``), the reference included. Reported: latency per batch (mean, p50, p95, p99
over ``--repeats``), images/s and the speed-up over ``naive-loop`` fp32 at the same batch size (both from
the medians), for the fixed-draw paths the largest deviation of the mean probability and of the mutual
information from ``drawn-loop`` fp32 (the reference), and on CUDA each path's peak GPU memory (torch's
allocator, from the path's first call; ONNX Runtime allocates outside it, so its rows read "ORT"). An ONNX
path whose CUDA provider does not load is skipped with the reason (a machine may have a CUDA torch beside a CPU-only or
other-CUDA onnxruntime). Paths are timed round-robin (see ``measure``). Weights are untrained (random μ,
ρ = rho_init), so the precision deviations are indicative only.

``--report DIR`` (a GPU lease, ``support.lease_serving``) appends one row per path, precision and batch to
``DIR/lease.jsonl`` and ``DIR/lease.md`` as soon as that batch size is measured (images/s, p50/p99 ms, peak
GPU MiB), and one per path skipped with the reason; the batch sizes run in the order given.

Examples::

    .venv/bin/python benchmarks/bench_core.py --width 16 --size 128 --batch 1,4 --repeats 5
    .venv/bin/python benchmarks/bench_core.py --width 46 --size 512 --batch 1 --repeats 2 \\
        --modes drawn-grouped,drawn-loop,onnx,naive-loop --precisions fp32
    .venv/bin/python benchmarks/bench_core.py --device cuda --width 46 --size 512 --batch 1,8 --repeats 20
    python3 benchmarks/bench_core.py --device cuda --size 256 --batch 1,8,32,128 --modes drawn-grouped,onnx \
        --precisions fp32,bf16,fp16 --report $OUT      # the lease's model-alone rows
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # support/ is not installed: run from any folder

from models.nn.draws import DrawnNetwork, materialise_draws
from models.nn.uncertainty import binary_uncertainty_from_logits
from models.nn.vgg import VGGConfig, VGGStar, build_vgg16_star, mc_logits
from models.platform.cpu import detect_cpu
from models.platform.cuda import ieee_fp32_in_force, use_ieee_fp32
from models.serving.onnx_backend import OnnxDrawnSession, ProviderFallbackError
from support.lease import append_row

MODES = ("naive-loop", "bayes-mc", "drawn-grouped", "drawn-loop", "onnx", "onnx-loop")
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
Runner = Callable[[np.ndarray], torch.Tensor]  # images [B, C, H, W] (host) -> logits [K, B, O] (host, fp32)


@dataclass
class Result:
    mode: str
    precision: str
    batch: int
    times: list[float]  # seconds per batch call
    max_dp: float | None = None  # max |Δ mean probability| vs the fp32 reference
    max_dmi: float | None = None  # max |Δ mutual information| (nats)
    peak_mib: float | None = None  # peak GPU memory of the path (torch allocator), CUDA only

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.times, q))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=46, help="VGG-16* base width (46 = the paper's model)")
    p.add_argument("--size", type=int, default=256, help="input side in pixels")
    p.add_argument("--batch", default="1,4", help="comma-separated batch sizes")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per mode and batch size")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls first (allocations, kernel choice)")
    p.add_argument("--k", type=int, default=16, help="Monte Carlo draws per image")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch / ORT intra-op threads (default: all)")
    p.add_argument("--modes", default=",".join(MODES), help=f"subset of: {', '.join(MODES)}")
    p.add_argument("--precisions", default=None, help="fp32,bf16[,fp16] (default: fp32,bf16; +fp16 on cuda)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report", type=Path, default=None,
                   help="a lease report folder: append each measured row to its lease.jsonl and lease.md")
    args = p.parse_args(argv)
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        p.error(f"unknown modes {sorted(unknown)}; expected some of: {', '.join(MODES)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(f"--device cuda: torch {torch.__version__} sees no CUDA device (a CPU build, or no GPU/driver)")
    return args


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[object]:
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=TORCH_DTYPES[precision])


def torch_runner(fn: Callable[[torch.Tensor], torch.Tensor], device: torch.device, precision: str) -> Runner:
    """Wrap a torch forward: host images in, host fp32 logits out (transfers are part of the timing)."""

    @torch.inference_mode()
    def run(images: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(images).to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        with autocast(device, precision):
            out = fn(x)
        return out.float().cpu()

    return run


def naive_loop(model: VGGStar, k: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([model(x.unsqueeze(0)) for _ in range(k)])  # K x [1, B, O] -> [K, B, O]

    return fn


def loop_twin(grouped: DrawnNetwork) -> DrawnNetwork:
    """The same draws (shared tensors) run one pass per draw: ``drawn-loop`` and the fp32 reference."""
    return DrawnNetwork(grouped.plan, grouped.convs, grouped.linears, activation=grouped.activation,
                        negative_slope=grouped.negative_slope, strategy="loop",
                        head_draws=grouped.head_draws).eval()


def build_runners(
    args: argparse.Namespace, model: VGGStar, grouped: DrawnNetwork, device: torch.device
) -> Iterator[tuple[str, str, Runner]]:
    precisions = (args.precisions or ("fp32,bf16,fp16" if device.type == "cuda" else "fp32,bf16")).split(",")
    modes = args.modes.split(",")
    loop = loop_twin(grouped)
    torch_fns: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "naive-loop": naive_loop(model, args.k),
        "bayes-mc": lambda x: mc_logits(model, x, args.k),
        "drawn-grouped": grouped,
        "drawn-loop": loop,
    }
    for mode in modes:
        if mode.startswith("onnx"):
            strategy = "loop" if mode == "onnx-loop" else "grouped"
            try:
                session = OnnxDrawnSession(grouped, device=device.type, intra_op_threads=args.threads,
                                           strategy=strategy)
            except (ProviderFallbackError, ValueError) as exc:
                print(f"  {mode:14s} skipped: {exc}", flush=True)
                if args.report is not None:
                    append_row(args.report, "model alone", "skipped", path=mode, device=device.type, reason=str(exc))
                continue

            def run_onnx(images: np.ndarray, session: OnnxDrawnSession = session) -> torch.Tensor:
                return torch.from_numpy(session.run(images))

            yield mode, "fp32", run_onnx
            continue
        for precision in precisions:
            yield mode, precision, torch_runner(torch_fns[mode], device, precision)


def measure(runners: list[tuple[str, str, Runner]], images: np.ndarray, args: argparse.Namespace,
            device: torch.device) -> tuple[list[list[float]], list[torch.Tensor], list[float | None]]:
    """Time every runner on ``images``, interleaved round-robin (one call each per repeat), so that load
    from other processes on a shared machine hits all paths alike instead of whichever ran last.

    Also returns each runner's peak GPU memory in MiB over its warm-up calls (None on CPU)."""
    outputs, peaks = [], []
    for _, _, run in runners:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(max(args.warmup, 1)):
            out = run(images)
        outputs.append(out)
        peaks.append(torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None)
    times: list[list[float]] = [[] for _ in runners]
    for _ in range(args.repeats):
        for i, (_, _, run) in enumerate(runners):
            sync(device)
            start = time.perf_counter()
            run(images)
            sync(device)
            times[i].append(time.perf_counter() - start)
    return times, outputs, peaks


def deviation(logits: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """Max |Δ mean probability| and max |Δ MI| between two [K, B, O=1] logit tensors."""
    got, ref = binary_uncertainty_from_logits(logits[..., 0]), binary_uncertainty_from_logits(reference[..., 0])
    return (float((got.probability - ref.probability).abs().max()),
            float((got.mutual_information - ref.mutual_information).abs().max()))


def print_table(results: list[Result], args: argparse.Namespace, device: torch.device, gmac: float) -> None:
    print(f"\n## VGG-16* width {args.width}, {args.size} px, K = {args.k}, device {device}, "
          f"threads {torch.get_num_threads()}  (≈{gmac:.2f} GMAC per pass, {args.k * gmac:.1f} per image)")
    print("| path | precision | batch | mean ms | p50 ms | p95 ms | p99 ms | images/s | vs naive fp32 | max Δp "
          "| max ΔMI | peak GPU MiB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    naive = {r.batch: r.percentile(50) for r in results if r.mode == "naive-loop" and r.precision == "fp32"}
    for r in results:
        ratio = f"{naive[r.batch] / r.percentile(50):.2f}×" if r.batch in naive else "—"
        dp = "—" if r.max_dp is None else f"{r.max_dp:.1e}"
        dmi = "—" if r.max_dmi is None else f"{r.max_dmi:.1e}"
        mem = "—" if device.type != "cuda" else "ORT" if r.mode.startswith("onnx") else f"{r.peak_mib:.0f}"
        print(f"| {r.mode} | {r.precision} | {r.batch} | {1e3 * r.mean:.1f} | {1e3 * r.percentile(50):.1f} | "
              f"{1e3 * r.percentile(95):.1f} | {1e3 * r.percentile(99):.1f} | {r.batch / r.percentile(50):.2f} | "
              f"{ratio} | {dp} | {dmi} | {mem} |")


def row_figures(r: Result, args: argparse.Namespace, device: torch.device) -> dict[str, object]:
    """One measured row as a lease report's figures."""
    return {"path": r.mode, "precision": r.precision, "batch": r.batch, "device": device.type,
            "size": args.size, "width": args.width, "k": args.k, "repeats": len(r.times),
            "images_per_s": round(r.batch / r.percentile(50), 2), "p50_ms": round(1e3 * r.percentile(50), 2),
            "p99_ms": round(1e3 * r.percentile(99), 2),
            "peak_gpu_mib": None if r.peak_mib is None else round(r.peak_mib),
            "max_dp": r.max_dp, "max_dmi": r.max_dmi,
            "fp32": "IEEE (TF32 off)" if device.type == "cuda" and ieee_fp32_in_force() else "as the device runs it"}


def conv_gmac(cfg: VGGConfig) -> float:
    """Multiply-accumulates of one deterministic pass (convolutions + head), in units of 1e9."""
    size = (cfg.input_size + 2 - 3) // cfg.first_stride + 1
    macs, in_ch = 0, cfg.in_channels
    for block, (n, width) in enumerate(zip(cfg.blocks, cfg.widths, strict=True)):
        for _ in range(n):
            macs += size * size * width * in_ch * 9
            in_ch = width
        if block < len(cfg.blocks) - 1:
            size //= 2
    return (macs + 2 * in_ch * cfg.num_outputs) / 1e9


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    use_ieee_fp32(device)  # fp32 rows and the reference are IEEE fp32 on CUDA, as the service runs them
    torch.manual_seed(args.seed)
    cfg = VGGConfig(width=args.width, input_size=args.size)
    model = build_vgg16_star(cfg).to(device).eval()
    grouped = materialise_draws(model, mc_samples=args.k, seed=args.seed).to(device)
    grouped = grouped.to(memory_format=torch.channels_last).eval()  # type: ignore[call-overload]  # as served
    cuda = (f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda}, cuDNN "
            f"{torch.backends.cudnn.version()}, fp32 = {'IEEE' if ieee_fp32_in_force() else 'TF32'})"
            if device.type == "cuda" else "not used")
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, cuda: {cuda}")
    print(f"CPU: {detect_cpu().summary()}  (bf16 rows are only meaningful where native bf16 is yes)")

    batches = [int(b) for b in args.batch.split(",")]
    rng = np.random.default_rng(args.seed)
    inputs = {b: rng.standard_normal((b, 3, args.size, args.size)).astype(np.float32) for b in batches}
    reference_run = torch_runner(loop_twin(grouped), device, "fp32")
    reference = {b: reference_run(inputs[b]) for b in batches}
    runners = list(build_runners(args, model, grouped, device))
    results: list[Result] = []
    for b in batches:
        times, outputs, peaks = measure(runners, inputs[b], args, device)
        for (mode, precision, _), t, out, peak in zip(runners, times, outputs, peaks, strict=True):
            res = Result(mode, precision, b, t, peak_mib=peak)
            if mode not in ("naive-loop", "bayes-mc"):  # stochastic paths use other draws
                res.max_dp, res.max_dmi = deviation(out, reference[b])
            results.append(res)
            print(f"  {mode:14s} {precision:5s} batch {b}: p50 {1e3 * res.percentile(50):9.1f} ms", flush=True)
            if args.report is not None:
                append_row(args.report, "model alone", "ok", **row_figures(res, args, device))
    print_table(results, args, device, conv_gmac(cfg))


if __name__ == "__main__":
    main()
