"""Peak resident memory of the service while the hostile-input suite's requests hit it.

Starts ``python -m service serve`` (tiny model by default, ``--model full`` for the embedded default
artifact) with the service's default limits unless overridden, warms it with one normal image
(baseline RSS), resets the process's peak-RSS counter (``/proc/<pid>/clear_refs``), then replays, with
``--concurrency`` client threads, ``--rounds`` times: every crafted bomb of support/hostile.py,
budget-sized zip bombs (a black PNG of exactly RADSCREEN_MAX_PIXELS, alone and a full batch of them),
too many parts, mid-body and mid-processing disconnects, a stalled and a trickled upload. Prints the
baseline, the peak (``VmHWM``, and the highest 10 ms sample of ``VmRSS``), the statuses seen, and the
bound the service's configuration implies (docs/service.md, "Memory bound").

Examples::

    .venv/bin/python benchmarks/memory_bound.py                     # tiny model, default limits
    .venv/bin/python benchmarks/memory_bound.py --model full        # embedded default model
    .venv/bin/python benchmarks/memory_bound.py --max-pixels 4000000 --concurrency 8
"""

from __future__ import annotations

import argparse
import collections
import math
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from service.model_host import CPU_DECODE_WORKERS
from service.settings import Settings
from support.artifacts import build_tiny_artifact
from support.hostile import hostile_bodies, png_black, small_png
from support.hostile_service import (
    Service,
    disconnect_mid_body,
    disconnect_while_processing,
    hostile_service,
    multipart_body,
    post,
    stalled_upload,
    trickled_upload,
    watch_rss,
)

# Measured peak bytes per pixel of one decode + quality gate + preprocessing at the pixel budget
# (benchmarks/decode_peak.py, 2026-11-23): RGB PNG/JPEG 14, 16-bit 14.8, RGBA 18.8, 32-bit integer or
# float 22.8: the worst is rounded up (tests/service/test_decode_memory.py holds every kind to it).
DECODE_BYTES_PER_PIXEL = 24
MIB = 1024 * 1024
SLOW = 900.0  # client timeout: a batch of 16 budget-sized images through the full model on a shared CPU is slow


def requests_of(svc: Service, max_pixels: int, max_batch_items: int) -> list[tuple[str, Callable[[], int]]]:
    """(label, call returning the HTTP status, or 499 for a disconnect) for one round of the suite."""
    calls: list[tuple[str, Callable[[], int]]] = []
    def raw(body: bytes) -> Callable[[], int]:
        return lambda: post(svc, "/v1/predict", body, "application/octet-stream", "bench-bomb-0000", SLOW).status_code

    def gone(call: Callable[[], None]) -> Callable[[], int]:
        def run() -> int:
            call()
            return 499

        return run

    calls += [(name, raw(bomb.body)) for name, bomb in hostile_bodies(max_pixels).items()]
    budget = png_black(math.isqrt(max_pixels))
    calls.append(("budget-zip-bomb",
                  lambda: post(svc, "/v1/predict", budget, "image/png", "bench-budget-1", SLOW).status_code))
    batch, ctype = multipart_body([("image", f"{i}.png", budget) for i in range(max_batch_items)])
    calls.append(("budget-batch",
                  lambda: post(svc, "/v1/predict/batch", batch, ctype, "bench-budget-2", SLOW).status_code))
    many, many_type = multipart_body([("image", f"{i}.png", b"x") for i in range(5000)])
    calls.append(("5000-parts",
                  lambda: post(svc, "/v1/predict/batch", many, many_type, "bench-parts-01", SLOW).status_code))
    good = small_png(256)
    calls.append(("disconnect-upload", gone(lambda: disconnect_mid_body(svc, "bench-gone-0001"))))
    calls.append(("disconnect-processing",
                  gone(lambda: disconnect_while_processing(svc, "bench-gone-0002", good, 0.0))))
    calls.append(("stalled-upload", lambda: stalled_upload(svc, "bench-slow-0001")[0]))
    calls.append(("trickled-upload", lambda: trickled_upload(svc, "bench-slow-0002")[0]))
    return calls


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["tiny", "full"], default="tiny")
    ap.add_argument("--max-pixels", type=int, default=Settings.model_fields["max_pixels"].default)
    ap.add_argument("--max-upload-bytes", type=int, default=Settings.model_fields["max_upload_bytes"].default)
    ap.add_argument("--decode-workers", type=int, default=CPU_DECODE_WORKERS)
    ap.add_argument("--concurrency", type=int, default=4, help="client threads replaying the requests")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)

    env = {"RADSCREEN_MAX_PIXELS": str(args.max_pixels), "RADSCREEN_MAX_UPLOAD_BYTES": str(args.max_upload_bytes),
           "RADSCREEN_DECODE_WORKERS": str(args.decode_workers),
           "RADSCREEN_UPLOAD_IDLE_TIMEOUT_S": "2", "RADSCREEN_UPLOAD_TIMEOUT_S": "6"}  # short, to end the run
    max_batch_items = Settings.model_fields["max_batch_items"].default
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_artifact(Path(tmp) / "tiny") if args.model == "tiny" else None
        with hostile_service(model_dir, Path(tmp) / "service.log", env) as svc:
            assert post(svc, "/v1/predict", small_png(256), "image/png", "bench-warm-0001").status_code == 200
            calls = requests_of(svc, args.max_pixels, max_batch_items) * args.rounds
            with watch_rss(svc.pid) as rss, ThreadPoolExecutor(args.concurrency) as pool:
                started = time.perf_counter()
                statuses = list(pool.map(lambda call: (call[0], call[1]()), calls))
                elapsed = time.perf_counter() - started
            baseline, reset, peak = rss.baseline, rss.peak_reset, rss.peak()
            log = svc.log_path.read_text(errors="replace")
            tracebacks = log.count("Traceback")

    by_status = collections.Counter(status for _, status in statuses)
    decode = args.decode_workers * DECODE_BYTES_PER_PIXEL * args.max_pixels
    bodies = args.concurrency * (args.max_upload_bytes + 64 * 1024) * max_batch_items
    print(f"machine: {platform.processor() or platform.machine()}, {platform.system()} (shared, 2 cores)")
    print(f"model: {args.model}; max_pixels={args.max_pixels} max_upload_bytes={args.max_upload_bytes} "
          f"decode_workers={args.decode_workers}; {len(calls)} requests, concurrency {args.concurrency}, "
          f"{elapsed:.1f} s")
    print(f"statuses: {dict(sorted(by_status.items()))}; tracebacks in the service log: {tracebacks}")
    print(f"baseline RSS {baseline / 1024:.0f} MiB; peak RSS {peak / 1024:.0f} MiB "
          f"(+{(peak - baseline) / 1024:.0f} MiB; VmHWM reset: {reset})")
    print(f"bound above baseline: decode {decode / MIB:.0f} MiB (workers x {DECODE_BYTES_PER_PIXEL} B/px x "
          f"max_pixels) + bodies in flight (<= {bodies / MIB:.0f} MiB for {args.concurrency} concurrent "
          "full batches)")


if __name__ == "__main__":
    main()
