"""benchmarks/bench_peer.py on a tiny artifact, with test-time flip on and off: every path at the served
option, the peer at the same passes, and the table says so."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from support.artifacts import build_tiny_artifact

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("bayesian_torch", reason="make setup installs the peer (scripts/setup.sh)")


def _photograph(path: Path) -> Path:
    """A JPEG fundus-like disc: bright circle on black, with some texture."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:160, :160]
    disc = ((yy - 80) ** 2 + (xx - 80) ** 2) < 70 ** 2
    rgb = np.zeros((160, 160, 3), np.uint8)
    rgb[disc] = (np.array([180, 90, 40]) + rng.integers(-20, 20, (int(disc.sum()), 3))).clip(0, 255)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=90)
    path.write_bytes(buf.getvalue())
    return path


@pytest.mark.parametrize(("flip", "split"), [(False, "16 draws × 1 view"), (True, "8 draws × 2 views")])
def test_every_row_scores_the_served_option(tmp_path, flip, split):
    art = build_tiny_artifact(tmp_path / "art", test_time_flip=flip, head_draws=4)  # head draws cost no pass
    image = _photograph(tmp_path / "eye.jpg")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_peer.py"), "--model-dir", str(art),
                           "--image", str(image), "--threads", "1", "--repeats", "1",
                           "--paths", "torch-loop,torch-grouped,onnx-loop,auto"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert f"served option {split} = 16 passes per image" in out
    rows = {m[0]: m[1:] for m in re.findall(r"^\| (\S[^|]*?) \| (\d+) \| ([\d.]+) \| [\d.]+ \| ([\d.]+)× \| (\S+) \|$",
                                            out, flags=re.M)}
    assert set(rows) == {"peer (bayesian-torch)", "torch-loop", "torch-grouped", "onnx-loop", "auto"}
    for name, (passes, p50, ratio, delta) in rows.items():
        assert passes == "16", name
        assert float(p50) > 0 and float(ratio) > 0
        if name not in ("peer (bayesian-torch)", "torch-loop"):
            assert float(delta) < 1e-3, (name, delta)  # the same draws and views as the reference
