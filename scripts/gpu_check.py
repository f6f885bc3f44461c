"""The GPU check: one command that gathers the evidence a GPU machine can give, into one report.

    make gpu-check                       # .venv/bin/python; PY=python for a machine's own CUDA torch
    .venv/bin/python scripts/gpu_check.py --out runs/gpu-check --budget-min 45

Sections, in order of value (each step has a time limit; a failing step is reported, the rest still run):

1. environment: nvidia-smi, torch / CUDA / cuDNN versions, the GPU and its native bf16, the installed
   ONNX Runtime (package, build CUDA line, the CUDA libraries its CUDA provider links) and whether a CUDA
   session actually activates. What is found is reported, not assumed: a machine may have a CUDA torch beside
   a CPU-only or other-CUDA onnxruntime, and then the ONNX CUDA rows are skipped with the reason;
2. ``pytest -m gpu``: CUDA vs CPU parity, exact resume on CUDA, the service answering on CUDA;
3. the parity table on the embedded model (``benchmarks/precision_drift.py --device cuda``);
4. ``benchmarks/bench_core.py --device cuda`` at 256 and 512 px, batch 1, 8, 32;
5. two short training steps per precision (``radscreen-train fit --device cuda`` on synthetic images);
6. the service under load (``benchmarks/load_service.py --device cuda``, the embedded model).

Without a CUDA device the report holds the environment and the skipped gpu tests, and says that nothing
else ran; the command still succeeds (exit 0). The report is Markdown: ``<out>/gpu-check-<UTC time>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_step(title: str, cmd: list[str], timeout: float) -> str:
    """Run ``cmd`` in the repository root; a Markdown section with the command, its time and its output tail."""
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
        status, output = f"exit {done.returncode}", done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status = f"stopped after its {timeout:.0f} s limit"
        output = "".join(x.decode() if isinstance(x, bytes) else (x or "") for x in (exc.stdout, exc.stderr))
    except OSError as exc:
        status, output = "could not start", str(exc)
    tail = "\n".join(output.strip().splitlines()[-80:])
    return (f"## {title}\n\n`{shlex.join(cmd)}` — {status}, {time.monotonic() - started:.0f} s\n\n"
            f"```\n{tail}\n```\n")


def environment() -> tuple[str, bool]:
    """The environment section, and whether torch sees a CUDA device."""
    import torch

    from models.cuda import cuda_native_bf16
    from support.cuda_line import installed_onnxruntime_cuda_line

    lines = [f"- date (UTC): {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}",
             f"- machine: {platform.node()}, {platform.processor() or platform.machine()}, "
             f"Python {platform.python_version()}",
             f"- torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none (CPU build)'}, "
             f"cuDNN {torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else 'none'}"]
    cuda = torch.cuda.is_available()
    if cuda:
        cap = torch.cuda.get_device_capability()
        lines.append(f"- GPU: {torch.cuda.get_device_name()} (compute capability {cap[0]}.{cap[1]}, "
                     f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.1f} GiB), native bf16: "
                     f"{'yes' if cuda_native_bf16() else 'no'}")
    else:
        lines.append("- GPU: none visible to torch")
    try:
        ort = installed_onnxruntime_cuda_line()
        lines.append(f"- ONNX Runtime: {ort.package} {ort.version}, built for CUDA {ort.build_cuda or 'none'}, "
                     f"CUDA provider links {', '.join(ort.needed) or 'nothing (no CUDA provider)'}")
        lines.append(f"- ONNX Runtime CUDA session: {ort_cuda_session()}")
    except ImportError as exc:
        lines.append(f"- ONNX Runtime: not importable ({exc})")
    try:
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        smi = f"nvidia-smi not available: {exc}"
    return "## Environment\n\n" + "\n".join(lines) + f"\n\n```\n{smi.strip()}\n```\n", cuda


def ort_cuda_session() -> str:
    """Whether a CUDA session of ONNX Runtime activates its CUDA provider here (a tiny drawn network)."""
    from models.draws import materialise_draws
    from models.onnx_backend import OnnxDrawnSession, ProviderFallbackError
    from models.vgg import VGGConfig, build_vgg16_star

    net = materialise_draws(build_vgg16_star(VGGConfig(width=2, input_size=32)), k=2, seed=0)
    try:
        return f"active providers {OnnxDrawnSession(net, device='cuda').active_providers}"
    except ProviderFallbackError as exc:
        return f"CUDA provider did not activate: {exc}"


def training_steps(python: str, timeout: float) -> str:
    """Two training steps per precision on 64 px synthetic images, timed by the wall clock of each run."""
    from training.synthetic.dataset import generate_dataset

    sections = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "synthetic"
        generate_dataset(data, n_images=64, seed=7, size=256, ungradable_fraction=0.0)
        for precision in ("fp32", "bf16"):
            cmd = [python, "-m", "training.cli", "fit", "--data", str(data), "--out", f"{tmp}/run-{precision}",
                   "--device", "cuda", "--precision", precision, "--epochs", "1", "--max-steps-per-epoch", "2",
                   "--batch-size", "16", "--input-size", "256", "--eval-samples", "2", "--no-progress"]
            sections.append(run_step(f"Training, two steps, {precision} (width 46, 256 px, batch 16)", cmd, timeout))
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu-check", help="folder for the report")
    ap.add_argument("--budget-min", type=float, default=45.0, help="minutes the whole check may take")
    args = ap.parse_args(argv)
    python = sys.executable
    share = args.budget_min * 60 / 10  # seconds per share; the steps below take 1-3 shares each
    env, cuda = environment()
    sections = [env, run_step("gpu tests (`pytest -m gpu`)",
                              [python, "-m", "pytest", "-m", "gpu", "-rA", "-s", "-p", "no:cacheprovider",
                               "--durations=0", "tests"], 2 * share)]
    if not cuda:
        sections.append("## Not run\n\nNo CUDA device is visible to torch: the parity table, the CUDA benchmarks, "
                        "the training steps and the load test were not run.\n")
    else:
        sections.append(run_step("Parity on the embedded model: CUDA modes vs torch fp32 on the CPU",
                                 [python, "benchmarks/precision_drift.py", "--device", "cuda", "--images", "32",
                                  "--image-size", "512", "--batch", "8"], 1.5 * share))
        for size in (256, 512):
            sections.append(run_step(
                f"bench_core on CUDA, {size} px", [python, "benchmarks/bench_core.py", "--device", "cuda",
                                                   "--size", str(size), "--batch", "1,8,32", "--repeats", "10",
                                                   "--warmup", "3", "--modes", "drawn-grouped,drawn-loop,onnx",
                                                   "--precisions", "fp32,bf16,fp16"], 1.5 * share))
        sections.append(training_steps(python, share))
        sections.append(run_step("The service under load on CUDA (embedded model)",
                                 [python, "benchmarks/load_service.py", "--model", "full", "--device", "cuda",
                                  "--concurrency", "1", "8", "32", "--rate", "50", "--duration", "10",
                                  "--max-batch-size", "32", "--image-size", "512"], 1.5 * share))
    args.out.mkdir(parents=True, exist_ok=True)
    report = args.out / f"gpu-check-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}.md"
    report.write_text("# GPU check\n\n" + "\n".join(sections), encoding="utf-8")
    print(f"report: {report}" + ("" if cuda else " (no CUDA device: environment and skipped gpu tests only)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
