"""The GPU lease: one command that gathers what a short GPU lease can give, into a report written step by step.

    scripts/gpu_lease.sh $OUT 540 --shards .lease/shards      # on the node: its own python3, PYTHONPATH=the tree
    scripts/gpu_lease.sh $OUT 300 --serving .lease/serving --serving-only     # the serving step alone
    python3 scripts/gpu_check.py --out runs/gpu-check --budget-s 540 --tiny   # the CPU dry run (the test suite's)

It needs torch, numpy, scikit-learn, safetensors, Pillow and pytest, and no web stack, no venv, no install and
no embedded weights (a lease sends the tree without them). Steps, each with a share of ``--budget-s`` (sized
for one 10-minute command of a 15-minute lease), each reported as soon as it ends in ``<out>/lease.jsonl``
and ``<out>/lease.md``, so a run cut off at its limit still returns what it measured:

1. environment: torch, CUDA, the GPU, its driver and its bf16, ONNX Runtime and whether its CUDA provider
   activates (a CPU build is a reported skip);
2. sizes: what a lease receives (the tree without the embedded weights, plus the shards and the serving
   pack) against 64 MiB;
2b. with ``--serving PACK`` (``scripts/serving_pack.py``), before any training: the serving step
   (``support.lease_serving``: the embedded model's parity, the model alone, the service's closed loop and the
   precision drift on real photographs) within ``--serving-budget-s`` (240: 4 minutes of device time), on
   ``--device`` (``auto``: CUDA where torch sees it, else the CPU, the dry run); ``--serving-only`` ends there;
3. a training run (``radscreen-train fit``) on the shards (``--shards``, packed by ``radscreen-train pack``)
   or on synthetic images made there, under a time budget, at batch 256 with the lr by the square-root rule
   (``support.lease.lease_recipe``: where the host's work per step is small against the GPU's); its images/s and
   the FLOP rate that makes;
4. the artifact it wrote, in parts of at most 16 MiB with their sha256 (``radscreen-train reassemble`` here);
5. ``pytest -m gpu tests/gpu``: CUDA vs CPU parity on that artifact, exact resume on CUDA, each precision;
6. the parity and precision-drift table on that artifact (``benchmarks/precision_drift.py``);
7. the model alone (``benchmarks/bench_core.py``) at 256 and 512 px;
8. the service under load, where the web stack is installed (a reported skip on a bare node).

Without a CUDA device the CUDA-only steps are reported as skipped, with the reason; the command succeeds.
``<out>`` holds at most 8 files: the two reports, the parts and their manifest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from support.lease import (  # noqa: E402
    LEASE_BATCH,
    LeaseReport,
    folder_bytes,
    lease_recipe,
    returned_files,
    sent_bytes,
    step_flops,
    training_throughput,
)
from support.lease_serving import serving_step  # noqa: E402

TINY = ["--width", "2", "--input-size", "32", "--epochs", "2", "--batch-size", "8", "--eval-samples", "2",
        "--head-draws", "2", "--grad-sd-samples", "0", "--seed", "0"]
SHARES = {"train": 0.55, "tests": 0.12, "drift": 0.07, "bench": 0.06, "load": 0.06}


def environment(report: LeaseReport) -> bool:
    """The environment step; whether torch sees a CUDA device."""
    import torch

    from models.platform.cuda import cuda_native_bf16

    figures: dict[str, object] = {
        "machine": f"{platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(), "torch": torch.__version__,
        "torch_cuda": torch.version.cuda or "none (CPU build)"}
    cuda = torch.cuda.is_available()
    if cuda:
        props = torch.cuda.get_device_properties(0)
        figures["gpu"] = (f"{props.name}, compute capability {props.major}.{props.minor}, "
                          f"{props.total_memory / 2**30:.1f} GiB, native bf16 {'yes' if cuda_native_bf16() else 'no'}")
    else:
        figures["gpu"] = "none visible to torch"
    figures["onnxruntime_cuda"] = ort_cuda_session()
    try:
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60, check=False).stdout
        figures["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                            "--format=csv,noheader"], capture_output=True, text=True, timeout=60,
                                           check=False).stdout.strip() or "nvidia-smi answered nothing"
    except (OSError, subprocess.SubprocessError) as exc:
        smi = figures["driver"] = f"nvidia-smi not available: {exc}"
    report.add("environment", "ok", text=smi, **figures)
    return cuda


def ort_cuda_session() -> str:
    """Whether ONNX Runtime's CUDA provider activates here (a tiny drawn network); a build without it is a
    skip with the reason, never a crash."""
    try:
        from models.nn.draws import materialise_draws
        from models.nn.vgg import VGGConfig, build_vgg16_star
        from models.serving.onnx_backend import OnnxDrawnSession, ProviderFallbackError
        from support.cuda_line import installed_onnxruntime_cuda_line

        line = installed_onnxruntime_cuda_line()
    except ImportError as exc:
        return f"skipped: ONNX Runtime not importable ({exc})"
    found = f"{line.package} {line.version}, built for CUDA {line.build_cuda or 'none'}"
    net = materialise_draws(build_vgg16_star(VGGConfig(width=2, input_size=32)), mc_samples=2, seed=0)
    try:
        return f"{found}: active providers {OnnxDrawnSession(net, device='cuda').active_providers}"
    except ValueError as exc:  # a CPU build: the CUDA provider is not even offered
        return f"{found}: skipped, no CUDA provider in this build ({exc})"
    except ProviderFallbackError as exc:
        return f"{found}: skipped, the CUDA provider did not activate ({exc})"


def train(report: LeaseReport, args: argparse.Namespace, work: Path, env: dict[str, str]) -> Path | None:
    """The training step (and, when there is no --shards, the synthetic data it trains on); the artifact."""
    python = sys.executable
    if args.shards:
        data = ["--data", str(args.shards), "--layout", "shards"]
        size = json.loads((Path(args.shards) / "index.json").read_text())["size"]
    else:
        size = 32 if args.tiny else 256
        synth = work / "synth"
        code, _ = report.run("synthetic data", [python, "-m", "training.cli", "synth", "--out", str(synth), "--n",
                                                 "48" if args.tiny else "512", "--size", str(max(size, 64)),
                                                 "--ungradable-fraction", "0", "--workers", str(os.cpu_count() or 1)],
                             share=0.05, cwd=ROOT, env=env)
        if code != 0:
            return None
        data = ["--data", str(synth), "--layout", "synthetic"]
    recipe = TINY if args.tiny else lease_recipe(size=size, epochs=args.epochs, batch=args.batch_size,
                                                 val_every=args.val_every)
    limit = SHARES["train"] * args.budget_s
    run_dir, artifact = work / "run", work / "artifact"
    cmd = [python, "-m", "training.cli", "fit", *data, "--out", str(run_dir), "--artifact", str(artifact),
           "--precision", "auto", "--checkpoint-minutes", "5", "--no-progress", "--name", "radscreen-lease",
           "--time-budget-min", f"{max(limit - 90, 30) / 60:.2f}", *recipe, *args.fit_args]
    code, _ = report.run("training", cmd, share=SHARES["train"], cwd=ROOT, env=env)
    if (run_dir / "history.json").is_file():
        config = json.loads((run_dir / "config.json").read_text())
        try:
            flops: float | None = step_flops(model=config["model"], width=config["width"],
                                             size=config["input_size"], train_samples=config["train_samples"],
                                             device="cuda" if args.cuda else "cpu")
        except (RuntimeError, ValueError) as exc:
            flops = None
            report.add("training FLOPs", "failed", reason=str(exc))
        report.add("training throughput", "ok", precision=config["precision"], device="cuda" if args.cuda else "cpu",
                   note="images/s over whole epochs, validation included", **training_throughput(run_dir, flops))
    return artifact if code == 0 and (artifact / "manifest.json").is_file() else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu-check", help="folder for the report and parts")
    ap.add_argument("--budget-s", type=float, default=540.0,
                    help="seconds the whole run may take (a lease command may run 600)")
    ap.add_argument("--shards", type=Path, default=None, help="packed training shards (radscreen-train pack)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model and data set: the CPU dry run")
    ap.add_argument("--epochs", type=int, default=100, help="epochs asked for (the time budget may stop sooner)")
    ap.add_argument("--batch-size", type=int, default=LEASE_BATCH,
                    help="images per step; the lr follows by the square-root rule (support.lease.scaled_lr)")
    ap.add_argument("--val-every", type=int, default=5, help="epochs between validations")
    ap.add_argument("--work", type=Path, default=None, help="folder for the run (default: a temporary one)")
    ap.add_argument("--serving", type=Path, default=None,
                    help="the serving pack (scripts/serving_pack.py): run the serving step first")
    ap.add_argument("--serving-only", action="store_true", help="end after the serving step")
    ap.add_argument("--serving-budget-s", type=float, default=240.0, help="seconds the serving step may take")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="where the serving step runs (auto: CUDA where torch sees it, else the CPU)")
    ap.add_argument("fit_args", nargs="*", help="more `radscreen-train fit` options, after --")
    args = ap.parse_args(argv)
    if args.serving_only and args.serving is None:
        ap.error("--serving-only needs --serving PACK")
    report = LeaseReport(args.out, args.budget_s)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           "PYTHONUNBUFFERED": "1"}
    args.cuda = environment(report)
    sizes = sent_bytes(ROOT, args.shards)
    if args.serving is not None:
        sizes["serving_bytes"] = folder_bytes(args.serving)
        sizes["sent_bytes"] += sizes["serving_bytes"]
    report.add("sizes", "ok" if sizes["sent_bytes"] <= sizes["limit_bytes"] else "failed",
               **{k: f"{v} ({v / 2**20:.1f} MiB)" for k, v in sizes.items()})
    work = args.work or Path(tempfile.mkdtemp(prefix="lease-"))
    if args.serving is not None:
        device = args.device if args.device != "auto" else "cuda" if args.cuda else "cpu"
        serving_step(report, pack=args.serving, device=device, budget_s=min(args.serving_budget_s, args.budget_s),
                     work=work, tiny=args.tiny, env=env)
        if args.serving_only:
            report.add("returned files", "ok" if returned_files(args.out)["within_limits"] else "failed",
                       **returned_files(args.out))
            print(f"report: {report.md}")
            return 0
    artifact = train(report, args, work, env)
    if artifact is not None:
        from training.parts import split_artifact

        manifest = json.loads(split_artifact(artifact, args.out).read_text())
        report.add("artifact parts", "ok", parts=len(manifest["parts"]), whole_bytes=manifest["whole"]["bytes"],
                   largest_part_bytes=max(p["bytes"] for p in manifest["parts"]),
                   artifact_sha256=manifest["artifact_sha256"],
                   reassemble="radscreen-train reassemble --parts <fetched folder> --out models/<name>")
    else:
        report.add("artifact parts", "skipped", reason="the training step wrote no artifact")
    tests_env = {**env, **({"RADSCREEN_PARITY_ARTIFACT": str(artifact)} if artifact else {})}
    report.run("gpu tests", [sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu", "-rA", "-p",
                             "no:cacheprovider", "-q"], share=SHARES["tests"], cwd=ROOT, env=tests_env)
    cuda_steps(report, args, artifact, env)
    report.add("returned files", "ok" if returned_files(args.out)["within_limits"] else "failed",
               **returned_files(args.out))
    print(f"report: {report.md}")
    return 0


def cuda_steps(report: LeaseReport, args: argparse.Namespace, artifact: Path | None, env: dict[str, str]) -> None:
    """Parity and drift on the trained artifact, the model alone at 256 and 512 px, the service under load."""
    python = sys.executable
    if not args.cuda:
        for step in ("precision drift", "model alone, 256 px", "model alone, 512 px", "service under load"):
            report.add(step, "skipped", reason="no CUDA device visible to torch")
        return
    if artifact is not None:
        report.run("precision drift", [python, "benchmarks/precision_drift.py", "--device", "cuda", "--model-dir",
                                       str(artifact), "--images", "32", "--batch", "8"],
                   share=SHARES["drift"], cwd=ROOT, env=env)
    else:
        report.add("precision drift", "skipped", reason="no trained artifact to compare")
    for size in (256, 512):
        report.run(f"model alone, {size} px", [python, "benchmarks/bench_core.py", "--device", "cuda", "--size",
                                               str(size), "--batch", "1,8,32", "--repeats", "5", "--warmup", "2",
                                               "--modes", "drawn-grouped,onnx", "--precisions", "fp32,bf16"],
                   share=SHARES["bench"], cwd=ROOT, env=env)
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        report.add("service under load", "skipped", reason=f"the web stack is not installed here ({exc})")
        return
    model = ["--model-dir", str(artifact)] if artifact else ["--model", "tiny"]
    report.run("service under load", [python, "benchmarks/load_service.py", *model, "--device", "cuda",
                                      "--concurrency", "8", "32", "--rate", "100", "--duration", "10",
                                      "--max-batch-size", "32"], share=SHARES["load"], cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
