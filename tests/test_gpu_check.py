"""The one-command GPU check (scripts/gpu_check.py) on a machine without CUDA: it succeeds, reports the
environment it found and the gpu tests as skipped with the reason, and says that nothing else ran."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine runs the whole check (minutes)")
def test_the_gpu_check_skips_cleanly_without_cuda(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(tmp_path)], cwd=ROOT, text=True,
                          capture_output=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (report,) = tmp_path.glob("gpu-check-*.md")
    text = report.read_text(encoding="utf-8")
    assert f"torch {torch.__version__}" in text and "GPU: none visible to torch" in text
    assert "ONNX Runtime CUDA session: CUDA provider did not activate" in text  # found, not assumed
    assert "-m gpu" in text and "skipped" in text and "no CUDA device" in text and " failed" not in text
    assert "## Not run" in text and "bench_core on CUDA" not in text
