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

On a GPU the CPU's decode and preprocessing feed the model, so the run also measures decode + preprocessing
alone in a pool of 1..N threads (images/s: does it scale with cores?), and, for each ``--decode-workers``
value (``default``: the service's own choice, one thread per core on a GPU), the service's best closed-loop
throughput as a share of the model alone's at ``--max-batch-size``.

``--photos DIR`` uploads the photographs in DIR (``*.jpg``, ``*.jpeg``, ``*.png``, as they are; a GPU lease
carries real ones) instead of generated PNGs, so decode costs what a photograph costs. ``--report DIR``
appends each figure to a lease report (``DIR/lease.jsonl`` and ``lease.md``) as soon as it is measured: the
model alone, decode alone, each closed-loop concurrency (images/s, p50/p99) and the service's share of the
model alone.

Examples::

    .venv/bin/python benchmarks/load_service.py --model tiny                  # built on the fly
    .venv/bin/python benchmarks/load_service.py --model full --duration 20    # embedded default artifact
    .venv/bin/python benchmarks/load_service.py --model-dir models/my-run --concurrency 1 4 16
    .venv/bin/python benchmarks/load_service.py --model full --device cuda --max-batch-size 32
    .venv/bin/python benchmarks/load_service.py --decode-workers 1 2 default --concurrency 8 --rate
    python3 benchmarks/load_service.py --model-dir /tmp/embedded --device cuda --photos .lease/serving/photos \
        --concurrency 1 8 64 --max-batch-size 64 --rate --report $OUT      # the lease's service rows
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
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.artifact import load_artifact
from service.inference.imaging import ImagePipeline
from service.inference.loading import load_scorer
from service.inference.prepare import prepare_image
from service.inference.spec import ScorerSpec
from service.model_host import decode_threads
from service.settings import Settings
from support.artifacts import build_tiny_artifact
from support.images import encode, fundus_like
from support.lease import append_row
from support.live_server import live_server, wait_until_ready

SERVER_PIDS: dict[str, int] = {}  # base URL -> pid of the server subprocess (for its GPU memory)
PHOTO_TYPES = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png"}


def photographs(folder: Path) -> tuple[list[bytes], str]:
    """The photographs in ``folder`` (sorted by name) and their one content type."""
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in PHOTO_TYPES)
    types = {PHOTO_TYPES[p.suffix.lower()] for p in files}
    if not files or len(types) != 1:
        raise SystemExit(f"--photos {folder}: expected photographs of one type (jpeg or png), found "
                         f"{len(files)} of types {sorted(types)}")
    return [p.read_bytes() for p in files], types.pop()


def percentiles(latencies: list[float]) -> str:
    p50, p95, p99 = np.percentile(np.asarray(latencies) * 1e3, [50, 95, 99])
    return f"p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  p99 {p99:7.1f} ms"


def latency_figures(latencies: list[float]) -> dict[str, float | None]:
    if not latencies:
        return {"p50_ms": None, "p99_ms": None}
    p50, p99 = np.percentile(np.asarray(latencies) * 1e3, [50, 99])
    return {"p50_ms": round(float(p50), 1), "p99_ms": round(float(p99), 1)}


def model_alone(model_dir: Path, images: list[bytes], batch: int, repeats: int, device: str) -> tuple[float, str]:
    """Images/s of ``Scorer.score_batch`` at ``batch``, and a line naming what ran (and its GPU memory)."""
    import torch

    scorer = load_scorer(ScorerSpec(model_dir=model_dir, device=device))
    prepared = [prepare_image(images[i % len(images)], scorer.pipeline) for i in range(batch)]
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


def decode_alone(model_dir: Path, images: list[bytes], workers: int, repeats: int = 2) -> float:
    """Images/s of the service's decode + preprocessing (``prepare_image``) in a pool of ``workers`` threads
    (the artifact's pipeline alone: no network is built)."""
    pipeline = ImagePipeline.of(load_artifact(model_dir).image_transform())
    work = images * repeats
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda d: prepare_image(d, pipeline), images[:workers]))  # warm
        start = time.perf_counter()
        list(pool.map(lambda d: prepare_image(d, pipeline), work))
    return len(work) / (time.perf_counter() - start)


def gpu_memory_of(pid: int) -> str:
    """The GPU memory ``nvidia-smi`` attributes to process ``pid`` (what the server holds, ORT included)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown (nvidia-smi: {exc})"
    used = [line.split(",")[1].strip() for line in out.splitlines() if line.split(",")[0].strip() == str(pid)]
    return used[0] if used else "not listed by nvidia-smi (in a container, PIDs may differ)"


async def closed_loop(base: str, images: list[bytes], concurrency: int, duration: float,
                      content_type: str = "image/png", report: Path | None = None, workers: str = "default") -> float:
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + duration

    async def worker(client: httpx.AsyncClient, wid: int) -> None:
        nonlocal errors
        i = wid
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            r = await client.post("/v1/predict", content=images[i % len(images)],
                                  headers={"Content-Type": content_type})
            if r.status_code == 200:
                latencies.append(time.perf_counter() - t0)
            else:
                errors += 1
            i += concurrency

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        await asyncio.gather(*(worker(client, w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    rate = len(latencies) / elapsed
    print(f"closed  C={concurrency:3d}  {rate:7.1f} img/s  {percentiles(latencies) if latencies else ''}  "
          f"errors {errors}")
    if report is not None:
        append_row(report, "service closed loop", "ok" if latencies else "failed", clients=concurrency,
                   decode_workers=workers, seconds=round(elapsed, 1), images_per_s=round(rate, 2),
                   **latency_figures(latencies), errors=errors)
    return rate


async def open_loop(base: str, images: list[bytes], rate: float, duration: float,
                    content_type: str = "image/png") -> None:
    rng = np.random.default_rng(0)
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def one(client: httpx.AsyncClient, data: bytes) -> None:
        t0 = time.perf_counter()
        r = await client.post("/v1/predict", content=data, headers={"Content-Type": content_type})
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
    ap.add_argument("--rate", type=float, nargs="*", default=[20.0], help="open-loop arrival rates (none: skip)")
    ap.add_argument("--decode-workers", nargs="+", default=["default"],
                    help="RADSCREEN_DECODE_WORKERS values to serve with, each a server of its own (default: unset)")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--max-batch-size", type=int, default=8)
    ap.add_argument("--max-wait-ms", type=float, default=5.0)
    ap.add_argument("--image-size", type=int, default=256, help="side of the uploaded PNGs")
    ap.add_argument("--in-process", action="store_true", help="uvicorn in a thread of this process")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the model and service run")
    ap.add_argument("--photos", type=Path, default=None, help="upload the photographs in this folder as they are")
    ap.add_argument("--report", type=Path, default=None,
                    help="a lease report folder: append each figure to its lease.jsonl and lease.md")
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
        if args.photos is not None:
            images, content_type = photographs(args.photos)
            uploads = f"{len(images)} photographs of {args.photos}"
        else:
            images, content_type = [encode(fundus_like(i, size=args.image_size)) for i in range(64)], "image/png"
            uploads = f"64 generated {args.image_size} px PNGs"
        report = args.report
        gpu = f", GPU {torch.cuda.get_device_name()}" if args.device == "cuda" else ""
        print(
            f"machine: {platform.processor() or platform.machine()}{gpu}, torch threads {torch.get_num_threads()}, "
            f"model {model_dir}, load average {os.getloadavg()[0]:.1f} (other processes share the CPU)"
        )
        alone = 0.0
        for batch in sorted({1, args.max_batch_size}):
            alone, ran = model_alone(model_dir, images, batch, repeats=max(3, 40 // batch), device=args.device)
            print(f"model alone  batch {batch:3d}  {alone:7.1f} img/s  ({ran})")
            if report is not None:
                append_row(report, "service: model alone", "ok", batch=batch, images_per_s=round(alone, 2), ran=ran,
                           note="Scorer.score_batch on prepared images, as the service's batcher calls it")
        cores = os.cpu_count() or 1
        for workers in sorted({1, 2, cores}):
            rate = decode_alone(model_dir, images, workers)
            print(f"decode + preprocessing alone, {workers:2d} threads  {rate:7.1f} img/s  ({uploads}, {cores} cores)")
            if report is not None:
                append_row(report, "service: decode alone", "ok", threads=workers, images_per_s=round(rate, 2),
                           uploads=uploads, cores=cores)
        for workers in args.decode_workers:
            settings = Settings(
                model_dir=model_dir,
                device=args.device,
                max_batch_size=args.max_batch_size,
                max_wait_ms=args.max_wait_ms,
                queue_size=256,
                decode_workers=None if workers == "default" else int(workers),
            )
            print(f"-- the service, RADSCREEN_DECODE_WORKERS={workers}")
            pool = f"{decode_threads(settings.decode_workers, args.device)} ({workers})"  # what the server sizes
            with live_server(settings) if args.in_process else subprocess_server(settings) as base:
                best = max(asyncio.run(closed_loop(base, images, c, args.duration, content_type, report, pool))
                           for c in args.concurrency)
                print(f"service / model alone (batch {args.max_batch_size}): {best:.1f} / {alone:.1f} img/s = "
                      f"{best / alone:.0%}  (decode workers {workers})")
                if report is not None:
                    append_row(report, "service share of model alone", "ok", decode_workers=pool,
                               best_images_per_s=round(best, 2), model_alone_images_per_s=round(alone, 2),
                               model_alone_batch=args.max_batch_size, share=round(best / alone, 3))
                for rate in args.rate:
                    asyncio.run(open_loop(base, images, rate, args.duration, content_type))
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
        **({"RADSCREEN_DECODE_WORKERS": str(settings.decode_workers)} if settings.decode_workers else {}),
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
