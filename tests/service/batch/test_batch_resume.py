"""Kill-and-resume: SIGKILL the CLI mid-run, rerun, and get exactly the uninterrupted output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from service.batch.job import BatchJobConfig, parts_dir_for, run_job
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec

REPO = Path(__file__).resolve().parents[3]


def cli(args: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "service.batch", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[bytes]) -> None:
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]


def test_sigkill_mid_run_then_rerun_gives_exactly_once_identical_output(
    make_folder: Callable[..., Path], batch_artifact: Path, batch_scorer: Scorer, tmp_path: Path
) -> None:
    folder = make_folder(36)
    common = ["--input", str(folder), "--model-dir", str(batch_artifact), "--device", "cpu",
              "--batch-size", "4", "--chunk-size", "1", "--no-progress"]
    reference = tmp_path / "reference.csv"
    killed = tmp_path / "killed.csv"

    proc = cli(["score", "--output", str(killed), *common])
    parts = parts_dir_for(killed)
    deadline = time.monotonic() + 90
    while len(list(parts.glob("part-*.jsonl"))) < 3:
        assert proc.poll() is None, "the job finished before it could be killed"
        assert time.monotonic() < deadline, "no parts appeared"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    n_parts = len(list(parts.glob("part-*.jsonl")))
    if n_parts >= 9:  # 36 images in windows of 4 (the corrupt one joins the first): all parts written
        pytest.fail("the kill came after the last part; the machine is too fast for this test's input")
    assert not killed.exists()  # the results file is only ever assembled whole

    finish(cli(["score", "--output", str(killed), *common]))  # resume
    # uninterrupted, in this process (same code, same thread count, so the same floats)
    run_job(BatchJobConfig(input=folder, output=reference, spec=ScorerSpec(model_dir=batch_artifact, device="cpu"),
                           batch_size=4, chunk_size=1, progress=False), scorer=batch_scorer)

    lines = killed.read_text().splitlines()
    assert len(lines) == 1 + 38  # header + every input exactly once (36 images, corrupt.jpg, notes.txt)
    ids = [line.split(",", 1)[0] for line in lines[1:]]
    assert len(set(ids)) == len(ids)
    assert killed.read_bytes() == reference.read_bytes()
