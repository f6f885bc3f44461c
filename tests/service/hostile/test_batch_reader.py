"""One reader: ``--group-by study`` reads each file through the batch job's reader (regular files only, the
upload limit by ``stat``), never with ``Path.read_bytes()``.

Before the fix, a FIFO named ``scan.dcm`` hung the job forever (grouping opened it and waited for a writer)
and a sparse 5 GiB ``.dcm`` was read whole (5.5 GB of memory). The CLI runs in its own process with a
timeout, and its peak memory is read from the wrapper's ``RUSAGE_CHILDREN``.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from support.hostile_dicom import deflate_bomb, many_elements
from support.images import fundus_like
from support.processes import ROOT
from tests.helpers.dicom_files import op_dicom

SPARSE_BYTES = 5 << 30  # holes only: nothing on disk, 5 GiB of memory if read whole
STUDY = "1.2.826.0.1.3680043.8.498.77"


def _run_peak_mib(command: list[str], timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    wrapper = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
               "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
               "sys.exit(r.returncode)")
    done = subprocess.run([sys.executable, "-c", wrapper, *command], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "RADSCREEN_DEVICE": "cpu"})
    peak = [line for line in done.stderr.splitlines() if line.startswith("PEAK_KIB")]
    return done, int(peak[-1].split()[1]) / 1024 if peak else float("nan")


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_group_by_study_reads_through_the_one_reader(tiny_artifact: Path, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for seed, side in enumerate("RL", start=3):  # two photographs: one as both eyes is refused (exam identity)
        (folder / f"good-{side}.dcm").write_bytes(op_dicom(fundus_like(seed, size=80), laterality=side,
                                                           study_uid=STUDY))
    os.mkfifo(folder / "scan.dcm")  # opened for reading, it blocks until a writer comes: never
    with (folder / "huge.dcm").open("wb") as fh:
        fh.truncate(SPARSE_BYTES)
    (folder / "deflate.dcm").write_bytes(deflate_bomb(64 * 1024))
    (folder / "elements.dcm").write_bytes(many_elements(300_000))  # 3 MB of header: over the 1 MiB bound
    out = tmp_path / "rows.csv"
    command = [sys.executable, "-m", "service.batch", "score", "--input", str(folder), "--output", str(out),
               "--model-dir", str(tiny_artifact), "--no-progress", "--group-by", "study",
               "--max-upload-bytes", str(8 * 1024 * 1024)]
    done, peak_mib = _run_peak_mib(command, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    rows = _rows(out)
    assert rows["scan.dcm"]["error"].startswith("not-a-regular-file: a FIFO")
    assert rows["huge.dcm"]["error"].startswith(f"payload-too-large: the file is {SPARSE_BYTES} bytes")
    assert rows["deflate.dcm"]["error"].startswith(
        "unsupported-media-type: DICOM transfer syntax 1.2.840.10008.1.2.1.99")
    assert rows["elements.dcm"]["error"].startswith("image-too-complex: The DICOM header runs over")
    assert not rows["good-R.dcm"]["error"] and not rows["good-L.dcm"]["error"]
    assert peak_mib < 1024, f"peak RSS {peak_mib:.0f} MiB: the sparse file was read"
    with (tmp_path / "rows.exams.csv").open(newline="", encoding="utf-8") as fh:
        exams = list(csv.DictReader(fh))
    [study] = [e for e in exams if e["exam_id"] == STUDY]
    assert study["images"] == "2" and study["outcome"] and not study["error"]
    ungrouped = {e["image_ids"]: e["error"] for e in exams if e["exam_id"] == ""}
    assert ungrouped["scan.dcm"] == "ungrouped: scan.dcm: not-a-regular-file: a FIFO (named pipe), not an image " \
        "file; it was not opened"
    assert ungrouped["huge.dcm"].startswith(f"ungrouped: huge.dcm: payload-too-large: the file is {SPARSE_BYTES}")
    assert "1.2.840.10008.1.2.1.99" in ungrouped["deflate.dcm"] and "runs over" in ungrouped["elements.dcm"]
