"""Load test of the HTTP service vs the model alone, in one run.

Starts the service on 127.0.0.1 (``python -m service serve`` in a subprocess, so the load generator
does not share the server's GIL; ``--in-process`` runs uvicorn in a thread instead), measures the
model alone (``Scorer.score_batch`` at batch 1 and at max_batch_size, images/s), then drives
``POST /v1/predict`` with an async httpx client:

- closed loop at each concurrency C: C workers each send a request as soon as the previous answer
  arrives, for ``--duration`` seconds; prints throughput and p50/p95/p99 latency;
- open loop at a fixed arrival rate (``--rate``, Poisson arrivals) for ``--duration`` seconds.

``--device cuda`` runs the model and the service on the GPU and adds memory figures: the model alone's
peak (torch's allocator) and the server process's GPU memory as ``nvidia-smi`` reports it after the load.

Examples::

    .venv/bin/python benchmarks/load_service.py --model tiny                  # built on the fly
    .venv/bin/python benchmarks/load_service.py --model full --duration 20    # embedded default artifact
    .venv/bin/python benchmarks/load_service.py --model-dir models/my-run --concurrency 1 4 16
    .venv/bin/python benchmarks/load_service.py --model full --device cuda --max-batch-size 32
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import ScorerSpec
from service.settings import Settings
from support.artifacts import build_tiny_artifact
from support.images import encode, fundus_like
from support.live_server import live_server, wait_until_ready

SERVER_PIDS: dict[str, int] = {}  # base URL -> pid of the server subprocess (for its GPU memory)


def percentiles(latencies: list[float]) -> str:
    p50, p95, p99 = np.percentile(np.asarray(latencies) * 1e3, [50, 95, 99])
    return f"p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  p99 {p99:7.1f} ms"


def model_alone(model_dir: Path, images: list[bytes], batch: int, repeats: int, device: str) -> tuple[float, str]:
    """Images/s of ``Scorer.score_batch`` at ``batch``, and a line naming what ran (and its GPU memory)."""
    import torch

    scorer = load_scorer(ScorerSpec(model_dir=model_dir, device=device))
    prepared = [prepare_image(d, scorer.pipeline) for d in images[:batch]]
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    scorer.score_batch(prepared)  # warm
    start = time.perf_counter()
    for _ in range(repeats):
        scorer.score_batch(prepared)
    ips = batch * repeats / (time.perf_counter() - start)
    ran = f"{scorer.backend.name} {scorer.backend.precision} on {scorer.backend.device}"
    if device == "cuda":
        ran += f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB (torch allocator)"
    return ips, ran


def gpu_memory_of(pid: int) -> str:
    """The GPU memory ``nvidia-smi`` attributes to process ``pid`` (what the server holds, ORT included)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown (nvidia-smi: {exc})"
    used = [line.split(",")[1].strip() for line in out.splitlines() if line.split(",")[0].strip() == str(pid)]
    return used[0] if used else "not listed by nvidia-smi (in a container, PIDs may differ)"


async def closed_loop(base: str, images: list[bytes], concurrency: int, duration: float) -> None:
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + duration

    async def worker(client: httpx.AsyncClient, wid: int) -> None:
        nonlocal errors
        i = wid
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            r = await client.post("/v1/predict", content=images[i % len(images)], headers={"Content-Type": "image/png"})
            if r.status_code == 200:
                latencies.append(time.perf_counter() - t0)
            else:
                errors += 1
            i += concurrency

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        await asyncio.gather(*(worker(client, w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    print(
        f"closed  C={concurrency:3d}  {len(latencies) / elapsed:7.1f} img/s  {percentiles(latencies)}  errors {errors}"
    )


async def open_loop(base: str, images: list[bytes], rate: float, duration: float) -> None:
    rng = np.random.default_rng(0)
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def one(client: httpx.AsyncClient, data: bytes) -> None:
        t0 = time.perf_counter()
        r = await client.post("/v1/predict", content=data, headers={"Content-Type": "image/png"})
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        if r.status_code == 200:
            latencies.append(time.perf_counter() - t0)

    tasks = []
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=512)) as client:
        i = 0
        while time.perf_counter() - started < duration:
            tasks.append(asyncio.create_task(one(client, images[i % len(images)])))
            i += 1
            await asyncio.sleep(rng.exponential(1.0 / rate))
        await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    print(
        f"open    {rate:5.1f} req/s offered  {len(latencies) / elapsed:7.1f} img/s served  "
        f"{percentiles(latencies) if latencies else ''}  statuses {statuses}"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["tiny", "full"], default="tiny")
    ap.add_argument("--model-dir", type=Path, default=None, help="artifact dir (overrides --model)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--rate", type=float, nargs="+", default=[20.0])
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--max-batch-size", type=int, default=8)
    ap.add_argument("--max-wait-ms", type=float, default=5.0)
    ap.add_argument("--image-size", type=int, default=256, help="side of the uploaded PNGs")
    ap.add_argument("--in-process", action="store_true", help="uvicorn in a thread of this process")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the model and service run")
    args = ap.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error(f"--device cuda: torch {torch.__version__} sees no CUDA device (a CPU build, or no GPU/driver)")

    with tempfile.TemporaryDirectory() as tmp:
        if args.model_dir is not None:
            model_dir = args.model_dir
        elif args.model == "full":
            from models.artifact import DEFAULT_ARTIFACT_DIR

            model_dir = Path(DEFAULT_ARTIFACT_DIR)
        else:
            model_dir = build_tiny_artifact(Path(tmp) / "tiny")
        images = [encode(fundus_like(i, size=args.image_size)) for i in range(64)]
        gpu = f", GPU {torch.cuda.get_device_name()}" if args.device == "cuda" else ""
        print(
            f"machine: {platform.processor() or platform.machine()}{gpu}, torch threads {torch.get_num_threads()}, "
            f"model {model_dir}, load average {os.getloadavg()[0]:.1f} (other processes share the CPU)"
        )
        for batch in sorted({1, args.max_batch_size}):
            ips, ran = model_alone(model_dir, images, batch, repeats=max(3, 40 // batch), device=args.device)
            print(f"model alone  batch {batch:3d}  {ips:7.1f} img/s  ({ran})")
        settings = Settings(
            model_dir=model_dir,
            device=args.device,
            max_batch_size=args.max_batch_size,
            max_wait_ms=args.max_wait_ms,
            queue_size=256,
        )
        with live_server(settings) if args.in_process else subprocess_server(settings) as base:
            for c in args.concurrency:
                asyncio.run(closed_loop(base, images, c, args.duration))
            for rate in args.rate:
                asyncio.run(open_loop(base, images, rate, args.duration))
            if args.device == "cuda":
                pid = os.getpid() if args.in_process else SERVER_PIDS[base]
                print(f"server GPU memory after the load: {gpu_memory_of(pid)}")


@contextmanager
def subprocess_server(settings: Settings) -> Iterator[str]:
    """``python -m service serve`` on a free port, the settings passed as RADSCREEN_* env vars."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "RADSCREEN_DEVICE": settings.device,
        "RADSCREEN_LOG_LEVEL": "warning",
        "RADSCREEN_MAX_BATCH_SIZE": str(settings.max_batch_size),
        "RADSCREEN_MAX_WAIT_MS": str(settings.max_wait_ms),
        "RADSCREEN_QUEUE_SIZE": str(settings.queue_size),
    }
    cmd = [sys.executable, "-m", "service", "serve", "--port", str(port), "--model-dir", str(settings.model_dir)]
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    SERVER_PIDS[base] = proc.pid
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                wait_until_ready(base, timeout=120)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
