"""Kill-and-resume: SIGKILL the CLI at a known point mid-run, rerun, and get exactly the uninterrupted output.

The kill is not a race with the job: the CLI runs under an audit hook (``sys.addaudithook``) that SIGKILLs
its own process as the third part file is about to be renamed into place (``os.replace`` raises the
``os.rename`` audit event before it acts). Two parts are then committed, the third is a temporary that was
never renamed, and no finally block, atexit handler or buffered write of the job runs, whatever the speed
of the machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from models.io.atomic import stale_temporaries
from service.batch.job import BatchJobConfig, parts_dir_for, run_job
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec

REPO = Path(__file__).resolve().parents[3]
KILLED_AT_PART = 3
# ``python -c`` program: the batch CLI under the audit hook that kills it as part KILLED_AT_PART is being committed.
KILL_AT_PART = f"""
import os, re, signal, sys
from service.batch.cli import main

renames = 0

def kill_at_part(event, args):
    global renames
    if event == "os.rename" and re.fullmatch(r"part-\\d+\\.jsonl", os.path.basename(os.fsdecode(args[1]))):
        renames += 1
        if renames == {KILLED_AT_PART}:
            os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(kill_at_part)
sys.exit(main(sys.argv[1:]))
"""


def cli(args: list[str], *, kill_at_part: bool = False) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    program = ["-c", KILL_AT_PART] if kill_at_part else ["-m", "service.batch"]
    return subprocess.run([sys.executable, *program, *args], cwd=REPO, env=env, capture_output=True,
                          timeout=120, check=False)


def test_sigkill_mid_run_then_rerun_gives_exactly_once_identical_output(
    make_folder: Callable[..., Path], batch_artifact: Path, batch_scorer: Scorer, tmp_path: Path
) -> None:
    folder = make_folder(36)
    common = ["--input", str(folder), "--model-dir", str(batch_artifact), "--device", "cpu",
              "--batch-size", "4", "--chunk-size", "4", "--no-progress"]
    reference = tmp_path / "reference.csv"
    killed = tmp_path / "killed.csv"

    done = cli(["score", "--output", str(killed), *common], kill_at_part=True)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    parts = parts_dir_for(killed)
    assert len(list(parts.glob("part-*.jsonl"))) == KILLED_AT_PART - 1  # of 9: 36 images in windows of 4
    assert len(stale_temporaries(parts)) == 1  # the part being committed, never renamed into place
    assert not killed.exists()  # the results file is only ever assembled whole

    resumed = cli(["score", "--output", str(killed), *common])
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    assert not stale_temporaries(parts)
    # uninterrupted, in this process (same code, same thread count, so the same floats)
    run_job(BatchJobConfig(input=folder, output=reference, spec=ScorerSpec(model_dir=batch_artifact, device="cpu"),
                           batch_size=4, chunk_size=4, progress=False), scorer=batch_scorer)

    lines = killed.read_text().splitlines()
    assert len(lines) == 1 + 38  # header + every input exactly once (36 images, corrupt.jpg, notes.txt)
    ids = [line.split(",", 1)[0] for line in lines[1:]]
    assert len(set(ids)) == len(ids)
    assert killed.read_bytes() == reference.read_bytes()
