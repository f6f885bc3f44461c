"""Load test of the HTTP service vs the model alone, in one run.

Starts the service on 127.0.0.1 (``python -m service serve`` in a subprocess, so the load generator
does not share the server's GIL; ``--in-process`` runs uvicorn in a thread instead), measures the
model alone (``Scorer.score_batch`` at batch 1 and at max_batch_size, images/s), then drives
``POST /v1/predict`` with an async httpx client:

- closed loop at each concurrency C: C workers each send a request as soon as the previous answer
  arrives, for ``--duration`` seconds; prints throughput and p50/p95/p99 latency;
- open loop at a fixed arrival rate (``--rate``, Poisson arrivals) for ``--duration`` seconds.

Examples::

    .venv/bin/python benchmarks/load_service.py --model tiny                  # built on the fly
    .venv/bin/python benchmarks/load_service.py --model full --duration 20    # embedded default artifact
    .venv/bin/python benchmarks/load_service.py --model-dir models/my-run --concurrency 1 4 16
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

from service.inference.scoring import Scorer, prepare_image
from service.settings import Settings
from tests.helpers.artifacts import build_tiny_artifact
from tests.helpers.images import encode, fundus_like
from tests.helpers.live_server import live_server, wait_until_ready


def percentiles(latencies: list[float]) -> str:
    p50, p95, p99 = np.percentile(np.asarray(latencies) * 1e3, [50, 95, 99])
    return f"p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  p99 {p99:7.1f} ms"


def model_alone(model_dir: Path, images: list[bytes], batch: int, repeats: int) -> float:
    scorer = Scorer.from_artifact(model_dir, device="cpu")
    prepared = [prepare_image(d, scorer.pipeline) for d in images[:batch]]
    scorer.score_batch(prepared)  # warm
    start = time.perf_counter()
    for _ in range(repeats):
        scorer.score_batch(prepared)
    return batch * repeats / (time.perf_counter() - start)


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
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        if args.model_dir is not None:
            model_dir = args.model_dir
        elif args.model == "full":
            from models.artifact import DEFAULT_ARTIFACT_DIR

            model_dir = Path(DEFAULT_ARTIFACT_DIR)
        else:
            model_dir = build_tiny_artifact(Path(tmp) / "tiny")
        images = [encode(fundus_like(i, size=args.image_size)) for i in range(64)]
        import torch

        print(
            f"machine: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}, "
            f"model {model_dir}, load average {os.getloadavg()[0]:.1f} (other processes share the CPU)"
        )
        for batch in sorted({1, args.max_batch_size}):
            ips = model_alone(model_dir, images, batch, repeats=max(3, 40 // batch))
            print(f"model alone  batch {batch:3d}  {ips:7.1f} img/s")
        settings = Settings(
            model_dir=model_dir,
            device="cpu",
            max_batch_size=args.max_batch_size,
            max_wait_ms=args.max_wait_ms,
            queue_size=256,
        )
        with live_server(settings) if args.in_process else subprocess_server(settings) as base:
            for c in args.concurrency:
                asyncio.run(closed_loop(base, images, c, args.duration))
            for rate in args.rate:
                asyncio.run(open_loop(base, images, rate, args.duration))


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
