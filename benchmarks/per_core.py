"""Throughput per core: the service and the batch job pinned to 1 and 2 cores, threads vs processes.

Real photographs (ODIR-5K validation patients: 512 px JPEGs of ~30 kB, so decoding is cheap here; a camera's
4-12 MP original adds its decode time, docs/results-benchmarks.md "Decode") go through:

* **the service** — real uvicorn processes (``service.app:create_app``, as deployed) pinned with ``taskset``:
  one process on 1 core (``RADSCREEN_THREADS=1``), one process on 2 cores (``RADSCREEN_THREADS=2``), and two
  replicas of one core each (the client spreads the requests round-robin, as a load balancer would).
  ``--concurrency`` clients per replica keep each one busy; images/s over ``--requests`` uploads after a
  warm-up.
* **the batch job** — ``radscreen-batch score`` over a folder of the same photographs, pinned to 1 and 2
  cores (``--workers`` decoders, the model's threads = the cores).

Each configuration runs with ``RADSCREEN_PRECISION=auto`` (what the artifact permits on this CPU) and, with
``--fp32``, with fp32 as well. Prints images/s and images/s per core; ``lscpu`` model and flags first.

    .venv/bin/python benchmarks/per_core.py --fp32
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.drift_real import odir_split, sample
from models.platform.cpu import detect_cpu
from support.processes import free_port, running_process, wait_until_ready

ROOT = Path(__file__).resolve().parents[1]


def photographs(n: int, seed: int) -> list[Path]:
    """A seeded sample of the model's ODIR validation patients' photographs (drift_real.py's sample)."""
    return sample(odir_split(0).val, n, seed)


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM), MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) / 1024


@contextlib.contextmanager
def replica(cores: str, env: dict[str, str], log: Path, peaks: list[float]) -> Iterator[str]:
    """A service process pinned to ``cores`` (taskset list); yields its base URL once ready and appends its
    peak memory to ``peaks`` when it stops."""
    port = free_port()
    cmd = ["taskset", "-c", cores, sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app",
           "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    base = f"http://127.0.0.1:{port}"
    with running_process(cmd, log, cwd=ROOT, env={**os.environ, **env}) as proc:
        wait_until_ready(proc, f"{base}/readyz", deadline_s=600, log_path=log)
        yield base
        peaks.append(peak_rss_mb(proc.pid))


def post(base: str, jpeg: bytes) -> None:
    r = httpx.post(f"{base}/v1/predict", content=jpeg, headers={"Content-Type": "image/jpeg"}, timeout=300)
    if r.status_code != 200:
        raise SystemExit(f"{base}: HTTP {r.status_code}: {r.text[:300]}")


def service_rate(bases: Sequence[str], jpegs: Sequence[bytes], requests: int, concurrency: int) -> float:
    """Images/s over ``requests`` uploads spread round-robin over the replicas (after one warm-up round)."""
    for base in bases:
        post(base, jpegs[0])
    jobs = list(zip(itertools.cycle(bases), itertools.islice(itertools.cycle(jpegs), requests), strict=False))
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency * len(bases)) as pool:
        list(pool.map(lambda job: post(*job), jobs))
    return requests / (time.perf_counter() - start)


def batch_rate(cores: str, threads: int, workers: int, folder: Path, env: dict[str, str], n: int) -> float:
    out = folder.parent / f"results-{cores.replace(',', '_')}-{env['RADSCREEN_PRECISION']}.csv"
    cmd = ["taskset", "-c", cores, sys.executable, "-m", "service.batch.cli", "score", "--input", str(folder),
           "--output", str(out), "--workers", str(workers), "--pool", "thread", "--no-progress", "--restart"]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **env, "RADSCREEN_THREADS": str(threads)},
                          capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"batch job failed: {done.stderr[-2000:]}")
    return n / elapsed  # includes start-up (model load, quantisation): the job as an operator runs it


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=None, help="artifact (default: the embedded model)")
    p.add_argument("--photos", type=int, default=128,
                   help="distinct ODIR validation photographs (a guard band re-scores a share of them: take many)")
    p.add_argument("--requests", type=int, default=96, help="service uploads per configuration")
    p.add_argument("--concurrency", type=int, default=2, help="clients per replica")
    p.add_argument("--batch-images", type=int, default=96, help="images in the batch job's folder")
    p.add_argument("--fp32", action="store_true", help="also run every configuration in fp32")
    p.add_argument("--skip-batch", action="store_true")
    p.add_argument("--seed", type=int, default=2026)
    args = p.parse_args()
    if shutil.which("taskset") is None:
        raise SystemExit("per_core needs taskset (util-linux)")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit(f"per_core needs 2 cores, this process may use {cores}")
    cpu = detect_cpu()
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")),
                 cpu.model_name)
    print(f"CPU: {model}; {cpu.summary()}; cores used {cores[:2]}")
    paths = photographs(args.photos, args.seed)
    jpegs = [path.read_bytes() for path in paths]
    print(f"{len(jpegs)} ODIR validation photographs, median {np.median([len(j) for j in jpegs]) / 1e3:.0f} kB")
    c0, c1 = str(cores[0]), str(cores[1])
    rows = []
    with tempfile.TemporaryDirectory(prefix="radscreen-per-core-") as tmp:
        folder = Path(tmp) / "photos"
        folder.mkdir()
        for i in range(args.batch_images):
            shutil.copy(paths[i % len(paths)], folder / f"{i:04d}.jpg")
        for precision in ("auto", "fp32") if args.fp32 else ("auto",):
            env = {"RADSCREEN_PRECISION": precision, "RADSCREEN_DEVICE": "cpu"}
            if args.model_dir:
                env["RADSCREEN_MODEL_DIR"] = str(args.model_dir.resolve())
            logs, peaks = Path(tmp), list[float]()
            with replica(c0, {**env, "RADSCREEN_THREADS": "1"}, logs / "a.log", peaks) as a:
                chosen = httpx.get(f"{a}/v1/model", timeout=10).json()["runtime"]
                label = f"{precision} -> {chosen['backend']} {chosen['precision']}"
                rows.append((label, "service, 1 process x 1 thread", 1,
                             service_rate([a], jpegs, args.requests, args.concurrency)))
            with replica(f"{c0},{c1}", {**env, "RADSCREEN_THREADS": "2"}, logs / "b.log", peaks) as b:
                rows.append((label, "service, 1 process x 2 threads", 2,
                             service_rate([b], jpegs, args.requests, args.concurrency)))
            with replica(c0, {**env, "RADSCREEN_THREADS": "1"}, logs / "c.log", peaks) as r0, \
                    replica(c1, {**env, "RADSCREEN_THREADS": "1"}, logs / "d.log", peaks) as r1:
                rows.append((label, "service, 2 replicas x 1 thread", 2,
                             service_rate([r0, r1], jpegs, args.requests, args.concurrency)))
            if not args.skip_batch:
                rows.append((label, "batch job, 1 core (1 thread, 1 decoder)", 1,
                             batch_rate(c0, 1, 1, folder, env, args.batch_images)))
                rows.append((label, "batch job, 2 cores (2 threads, 2 decoders)", 2,
                             batch_rate(f"{c0},{c1}", 2, 2, folder, env, args.batch_images)))
            for row in rows[-5:]:
                print(f"  {row[0]} | {row[1]}: {row[3]:.2f} img/s", flush=True)
            print(f"  {label} | peak memory of a service replica (VmHWM): {max(peaks) / 1024:.2f} GB", flush=True)
    print("\n| precision (chosen) | configuration | cores | images/s | images/s per core |")
    print("| --- | --- | ---: | ---: | ---: |")
    for label, config, n, rate in rows:
        print(f"| {label} | {config} | {n} | {rate:.2f} | {rate / n:.2f} |")
    print(json.dumps([{"precision": r[0], "config": r[1], "cores": r[2], "images_per_s": r[3]} for r in rows]))


if __name__ == "__main__":
    main()
