"""benchmarks/pass_split.py refuses to write its re-served artifact over a directory that holds anything,
before it scores a single eye: nothing is deleted for the user."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_apply_into_a_non_empty_directory_is_refused_and_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "models"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pass_split.py"), "--run", str(tmp_path),
                           "--manifest", str(tmp_path / "m.csv"), "--out", str(tmp_path / "out"),
                           "--apply", str(target)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "exists and is not empty" in done.stderr
    assert (target / "keep.txt").read_text() == "mine" and not (tmp_path / "out").exists()
