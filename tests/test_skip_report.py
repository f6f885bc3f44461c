"""A run without the shared real photographs says so once where the skips are reported: how many tests wanted
them, the folder looked in and the variable that names it (the skips themselves name the folder too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_summary_names_the_shared_data_folder_the_skips_wanted(tmp_path: Path) -> None:
    absent = tmp_path / "no-shared-data"
    env = {**os.environ, "RADSCREEN_SHARED_DATA": str(absent), "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/service/test_dicom.py", "-k", "real_odir", "-rs", "-q",
         "-p", "no:cacheprovider"], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stdout[-2000:]
    assert f"real photographs not found at {absent / 'odir-5k'}" in run.stdout  # each skip names the folder
    assert (f"2 skipped for want of the real photographs: looked in {absent}; set RADSCREEN_SHARED_DATA"
            in run.stdout), run.stdout[-2000:]
