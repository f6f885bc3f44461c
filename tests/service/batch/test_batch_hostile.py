"""Hostile batch inputs, through the real CLI in its own process: a symlink loop, a FIFO named like an
image, a sparse file far above the upload limit, and ids a spreadsheet would run as formulas.

Each must end as its own error row (or, for the ids, an inert CSV cell) while the good images are scored;
the job must finish (a FIFO that is opened blocks forever: the subprocess has a timeout), and its peak
memory must not include the sparse file.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from service.batch.output import read_output, write_output
from service.batch.rows import COLUMNS
from support.images import encode, fundus_like
from support.processes import ROOT

SPARSE_BYTES = 1 << 30  # 1 GiB of holes: nothing on disk, 1 GiB of memory if read whole
FORMULA_IDS = ('=HYPERLINK("evil.example")&"x".png', "+1.png", "-2.png", "@3.png", "'quoted.png")


def _child_peak_mib(command: list[str], timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``command`` under ``/usr/bin/time``-free accounting: the peak RSS read from a wrapper."""
    wrapper = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
               "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
               "sys.exit(r.returncode)")
    done = subprocess.run([sys.executable, "-c", wrapper, *command], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "RADSCREEN_DEVICE": "cpu"})
    peak = [line for line in done.stderr.splitlines() if line.startswith("PEAK_KIB")]
    return done, int(peak[-1].split()[1]) / 1024 if peak else float("nan")


def test_batch_cli_turns_loops_fifos_and_sparse_giants_into_rows(tiny_artifact: Path, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    (folder / "loop").mkdir(parents=True)
    for i, name in enumerate(("good-0.png", "good-1.png", *FORMULA_IDS)):
        (folder / name).write_bytes(encode(fundus_like(i, size=96)))
    os.symlink("self.jpg", folder / "loop" / "self.jpg")  # resolves to itself
    os.mkfifo(folder / "pipe.jpg")
    with (folder / "huge.jpg").open("wb") as fh:
        fh.truncate(SPARSE_BYTES)
    out = tmp_path / "rows.csv"
    command = [sys.executable, "-m", "service.batch", "score", "--input", str(folder), "--output", str(out),
               "--model-dir", str(tiny_artifact), "--no-progress", "--max-upload-bytes", str(2 * 1024 * 1024)]
    done, peak_mib = _child_peak_mib(command, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    rows = {r["id"]: r for r in read_output(out)}
    assert rows["loop/self.jpg"]["error"].startswith("unresolvable-path: ")
    assert rows["pipe.jpg"]["error"].startswith("not-a-regular-file: a FIFO")
    assert rows["huge.jpg"]["error"].startswith(f"payload-too-large: the file is {SPARSE_BYTES} bytes")
    for name in ("good-0.png", "good-1.png", *FORMULA_IDS):
        assert not rows[name]["error"] and rows[name]["referable_dr_probability"] is not None, rows[name]
    assert peak_mib < SPARSE_BYTES / 2**20, f"peak RSS {peak_mib:.0f} MiB: the sparse file was read"
    with out.open(newline="", encoding="utf-8") as fh:
        cells = [record["id"] for record in csv.DictReader(fh)]
    assert sorted(cells) == sorted(["'" + i for i in FORMULA_IDS] + ["good-0.png", "good-1.png", "huge.jpg",
                                                                     "loop/self.jpg", "pipe.jpg"])


def test_csv_guards_formulas_while_jsonl_keeps_the_values_exact(tmp_path: Path) -> None:
    rows = [dict.fromkeys(COLUMNS) | {"id": i, "path": f"/data/{i}", "error": "", "quality_issues": [],
                                      "referral_reasons": []} for i in FORMULA_IDS]
    write_output(tmp_path / "r.csv", rows)
    write_output(tmp_path / "r.jsonl", rows)
    raw = list(csv.DictReader((tmp_path / "r.csv").open(newline="", encoding="utf-8")))
    assert [r["id"] for r in raw] == ["'" + i for i in FORMULA_IDS]  # inert in a spreadsheet
    assert [r["id"] for r in read_output(tmp_path / "r.csv")] == list(FORMULA_IDS)  # read back exactly
    lines = (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == list(FORMULA_IDS)
