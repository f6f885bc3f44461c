"""Ctrl-C on ``radscreen-train fit``: one line saying how to resume (exit 130, no traceback), and the rerun
of the same command resumes from the last checkpoint and finishes. ``--no-progress`` hides every bar,
the preprocessing ones included.

The fit runs in a subprocess under an audit hook that slows each checkpoint commit (0.3 s), so it is still
training when the test, having seen the first checkpoint, sends it a real SIGINT.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from training.checkpoint import CHECKPOINT_FILE

pytestmark = pytest.mark.training
REPO = Path(__file__).resolve().parents[2]
MESSAGE = "interrupted: rerun the same command to resume"
SLOW_CHECKPOINTS = f"""
import os, sys, time
from training.cli import main

def slow(event, args):
    if event == "os.rename" and os.path.basename(os.fsdecode(args[1])) == "{CHECKPOINT_FILE}":
        time.sleep(0.3)

sys.addaudithook(slow)
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_on_fit_says_how_to_resume_and_the_same_command_finishes(tiny_data: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["-v", "fit", "--data", str(tiny_data), "--out", str(run), "--artifact", str(tmp_path / "artifact"),
            "--width", "2", "--input-size", "32", "--epochs", "3", "--batch-size", "8", "--eval-samples", "2",
            "--checkpoint-every", "1", "--no-progress", "--rho-init", "-3", "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # a start that fails before its first checkpoint (no such data) does not become the run's recorded command
    wrong = [a if a != str(tiny_data) else str(tmp_path / "no-such-data") for a in args]
    failed = subprocess.run([sys.executable, "-m", "training", *wrong], cwd=REPO, env=env, capture_output=True,
                            timeout=300, check=False)
    assert failed.returncode != 0
    fit = subprocess.Popen([sys.executable, "-c", SLOW_CHECKPOINTS, *args], cwd=REPO, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (run / CHECKPOINT_FILE).exists() and fit.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fit.poll() is None, "the fit ended before the interrupt"
        assert (run / CHECKPOINT_FILE).exists(), "no checkpoint within 180 s"
        os.killpg(fit.pid, signal.SIGINT)  # as Ctrl-C in a terminal: the whole process group
        _, err_bytes = fit.communicate(timeout=60)
    finally:
        if fit.poll() is None:
            fit.kill()
            fit.wait(timeout=30)
    err = err_bytes.decode()
    assert fit.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert err.strip().splitlines()[-1] == MESSAGE
    assert "preprocessing" not in err  # --no-progress: no bar at all (the preprocessing cache had bars)
    assert not (tmp_path / "artifact").exists()

    again = subprocess.run([sys.executable, "-m", "training", *args], cwd=REPO, env=env, capture_output=True,
                           timeout=600, check=False)
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    assert re.search(r"resuming .* at epoch \d+ step \d+", again.stderr.decode())
    recorded = (run / "command.txt").read_text()  # the command that trained the run, kept across the resume
    assert str(tiny_data) in recorded and "no-such-data" not in recorded
    assert "trained 3 epochs" in again.stdout.decode()
    assert (tmp_path / "artifact" / "weights.safetensors").is_file()
