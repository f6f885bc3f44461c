"""The benchmarks measure a GPU service when asked: ``--device cuda`` is an option of each, refused with the
reason where torch sees no GPU, and the core benchmark has a GPU-memory column."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")


def bench(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, check=False)


@NO_CUDA
@pytest.mark.parametrize("script", ["bench_core.py", "load_service.py", "precision_drift.py"])
def test_device_cuda_is_an_option_refused_with_the_reason_without_a_gpu(script: str) -> None:
    done = bench(script, "--device", "cuda")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--device cuda: torch" in done.stderr and "sees no CUDA device" in done.stderr


def test_bench_core_reports_a_memory_column() -> None:
    done = bench("bench_core.py", "--device", "cpu", "--width", "2", "--size", "32", "--batch", "1", "--k", "2",
                 "--repeats", "1", "--modes", "drawn-grouped,onnx", "--precisions", "fp32", "--threads", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    header = next(line for line in done.stdout.splitlines() if line.startswith("| path |"))
    assert header.rstrip(" |").endswith("peak GPU MiB")
    rows = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in done.stdout.splitlines()
            if line.startswith(("| drawn-grouped", "| onnx"))}
    assert rows == {"drawn-grouped": "—", "onnx": "—"}  # the CPU has no GPU memory to report
