"""Ctrl-C on the batch job, and what ``--chunk-size`` commits.

The SIGINT test runs the real CLI in a subprocess and sends it a real SIGINT once its progress bar shows
scored rows: it must say in one line how to resume (exit 130, no traceback) and commit every row it had
scored, though ``--chunk-size`` is far above the rows scored (only the interrupt commits them). Its reads are
slowed by an audit hook, so the job is still running when the signal comes, whatever the machine. A rerun
then completes the file with every input once, byte-identical to an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from service.batch.job import BatchJobConfig, parts_dir_for, run_job
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec

REPO = Path(__file__).resolve().parents[3]
MESSAGE = "interrupted: rerun the same command to resume"
# ``python -c`` program: the batch CLI with each image read slowed down (0.1 s), so that a SIGINT sent once
# rows are scored arrives long before the job could end.
SLOW_READS = """
import signal, sys, time
from service.batch.cli import main

# as started from a terminal: a job launched in the background by a non-interactive shell (CI) inherits
# SIGINT ignored, and Python then installs no KeyboardInterrupt handler
signal.signal(signal.SIGINT, signal.default_int_handler)

def slow(event, args):
    if event == "open" and str(args[0]).endswith(".png"):
        time.sleep(0.1)

sys.addaudithook(slow)
sys.exit(main(sys.argv[1:]))
"""
BAR = re.compile(rb"scoring:[^\r\n]*?\b(\d+)/(\d+) \[")


def committed_ids(parts: Path) -> list[str]:
    return [json.loads(line)["id"] for part in sorted(parts.glob("part-*.jsonl"))
            for line in part.read_text().splitlines() if line.strip()]


def part_sizes(parts: Path) -> list[int]:
    return [len(part.read_text().splitlines()) for part in sorted(parts.glob("part-*.jsonl"))]


def test_chunk_size_is_the_rows_of_each_part_file(
    make_folder: Callable[..., Path], batch_artifact: Path, batch_scorer: Scorer, tmp_path: Path
) -> None:
    """``--chunk-size 4`` with ``--batch-size 16`` writes parts of 4 rows (no batch spans two parts)."""
    folder = make_folder(21)  # 21 images + corrupt.jpg scored; notes.txt is not an image
    output = tmp_path / "chunks.csv"
    run_job(BatchJobConfig(input=folder, output=output, spec=ScorerSpec(model_dir=batch_artifact, device="cpu"),
                           batch_size=16, chunk_size=4, flush_seconds=1e9, progress=False), scorer=batch_scorer)
    assert part_sizes(parts_dir_for(output)) == [4, 4, 4, 4, 4, 2]


def test_ctrl_c_commits_what_was_scored_says_how_to_resume_and_the_rerun_completes(
    make_folder: Callable[..., Path], batch_artifact: Path, batch_scorer: Scorer, tmp_path: Path
) -> None:
    folder = make_folder(60)
    output = tmp_path / "interrupted.csv"
    common = ["--input", str(folder), "--model-dir", str(batch_artifact), "--device", "cpu",
              "--batch-size", "4", "--chunk-size", "1000", "--workers", "2"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    job = subprocess.Popen([sys.executable, "-c", SLOW_READS, "score", "--output", str(output), *common],
                           cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    err = bytearray()

    def read_stderr() -> None:
        assert job.stderr is not None
        while chunk := os.read(job.stderr.fileno(), 4096):
            err.extend(chunk)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    scored_before, deadline = 0, time.monotonic() + 120
    try:
        while scored_before < 8 and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            counts = BAR.findall(bytes(err))
            scored_before = int(counts[-1][0]) if counts else 0
        assert job.poll() is None, f"the job ended before the interrupt: {bytes(err)[-2000:]!r}"
        assert scored_before >= 8, f"no rows scored within 120 s: {bytes(err)[-2000:]!r}"
        os.killpg(job.pid, signal.SIGINT)  # as Ctrl-C in a terminal: the whole process group
        assert job.wait(timeout=60) == 130, bytes(err)[-2000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(timeout=30)
    reader.join(timeout=30)
    text = bytes(err).decode()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-2000:]
    assert [line for line in re.split(r"[\r\n]+", text) if line.strip()][-1] == MESSAGE

    parts = parts_dir_for(output)
    done = committed_ids(parts)
    assert len(done) >= scored_before  # every row the bar had counted (the chunk size was never reached)
    assert len(done) < 61 and len(set(done)) == len(done)  # it did stop early, and nothing twice
    assert not output.exists()

    resumed = subprocess.run([sys.executable, "-m", "service.batch", "score", "--output", str(output), *common,
                              "--no-progress"], cwd=REPO, env=env, capture_output=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    assert f"resuming: {len(done)} of 62 inputs already scored" in resumed.stderr.decode()
    reference = tmp_path / "reference.csv"
    run_job(BatchJobConfig(input=folder, output=reference, spec=ScorerSpec(model_dir=batch_artifact, device="cpu"),
                           batch_size=4, chunk_size=1000, progress=False), scorer=batch_scorer)
    lines = output.read_text().splitlines()
    ids = [line.split(",", 1)[0] for line in lines[1:]]
    assert len(ids) == len(set(ids)) == 62  # 60 images, corrupt.jpg, notes.txt: each exactly once
    assert output.read_bytes() == reference.read_bytes()
