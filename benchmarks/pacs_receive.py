"""The C-STORE receiver's cost: how long one instance takes to be acknowledged (the durable spool write, fsync and
atomic rename, comes before the answer) and how long and how much CPU a visit takes from its last instance to its
SR.

Starts ``radscreen dicom-listen`` on loopback (no archive: the SR stays in the spool's outbox), sends ``--studies``
two-eye visits of synthetic fundus photographs (Ophthalmic Photography, JPEG Baseline, ``--size`` px) one after the
other over one association with pynetdicom, and prints: the C-STORE round trip per instance (median, p95), the
time from a visit's last acknowledgement to its SR in the outbox (grading and building the SR; the settle delay is
set to 0 and the spool is polled every 0.05 s), and the receiver's CPU seconds per visit (user + system, from
/proc, receiving and grading together). The tiny test model unless ``--model-dir``. Example::

    .venv/bin/python benchmarks/pacs_receive.py --studies 20
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from PIL import Image
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.encaps import encapsulate
from pydicom.uid import JPEGBaseline8Bit, generate_uid

from support.artifacts import build_tiny_artifact
from support.images import fundus_like
from support.processes import ROOT, free_port, running_process

OP_8BIT = "1.2.840.10008.5.1.4.1.1.77.1.5.1"


def op_instance(rgb: np.ndarray, laterality: str, study_uid: str) -> Dataset:
    """A JPEG Baseline Ophthalmic Photography data set of ``rgb`` (what a fundus camera sends)."""
    jpeg = io.BytesIO()
    Image.fromarray(rgb).save(jpeg, "JPEG", quality=92)
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = JPEGBaseline8Bit
    ds.SOPClassUID, ds.SOPInstanceUID = OP_8BIT, generate_uid()
    ds.StudyInstanceUID, ds.SeriesInstanceUID = study_uid, generate_uid()
    ds.Modality, ds.PatientID, ds.ImageLaterality = "OP", "bench", laterality
    ds.Rows, ds.Columns = rgb.shape[:2]
    ds.SamplesPerPixel, ds.PhotometricInterpretation, ds.PlanarConfiguration = 3, "YBR_FULL_422", 0
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = encapsulate([jpeg.getvalue()])
    ds["PixelData"].VR = "OB"
    return ds


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def wait_ready(metrics_url: str, proc: subprocess.Popen[bytes], deadline_s: float = 180) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and proc.poll() is None:
        try:
            if "radscreen_ready 1.0" in httpx.get(metrics_url, timeout=2).text:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("dicom-listen did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=20)
    parser.add_argument("--size", type=int, default=1024, help="photograph side in px (default 1024)")
    parser.add_argument("--model-dir", type=Path, default=None, help="artifact (default: the tiny test model)")
    args = parser.parse_args()
    from pynetdicom import AE

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = args.model_dir or build_tiny_artifact(tmp / "tiny")
        spool, port, metrics_port = tmp / "spool", free_port(), free_port()
        env = {**os.environ, "RADSCREEN_DEVICE": "cpu", "RADSCREEN_PACS_SETTLE_S": "0", "RADSCREEN_PACS_POLL_S": "0.05",
               "RADSCREEN_PACS_METRICS_PORT": str(metrics_port), "RADSCREEN_LOG_LEVEL": "warning"}
        command = [sys.executable, "-m", "service", "dicom-listen", "--spool-dir", str(spool), "--port", str(port),
                   "--model-dir", str(model)]
        with running_process(command, tmp / "listener.log", cwd=ROOT, env=env) as proc:
            wait_ready(f"http://127.0.0.1:{metrics_port}/metrics", proc)
            ae = AE(ae_title="BENCH")
            ae.add_requested_context(OP_8BIT, JPEGBaseline8Bit)
            assoc = ae.associate("127.0.0.1", port, ae_title="RADSCREEN")
            acks: list[float] = []
            to_sr: list[float] = []
            cpu_start = cpu_seconds(proc.pid)
            for i in range(args.studies):
                study = generate_uid()
                for eye, seed in (("R", 2 * i), ("L", 2 * i + 1)):
                    ds = op_instance(fundus_like(seed, args.size), eye, study)
                    sent = time.perf_counter()
                    assert assoc.send_c_store(ds).Status == 0
                    acks.append(time.perf_counter() - sent)
                last = time.perf_counter()
                while len(list((spool / "results").glob("*.dcm"))) < i + 1:
                    time.sleep(0.005)
                to_sr.append(time.perf_counter() - last)
            cpu = cpu_seconds(proc.pid) - cpu_start
            assoc.release()
    ms = sorted(a * 1e3 for a in acks)
    print(f"{args.studies} visits, {len(acks)} instances of {args.size} px, model {args.model_dir or 'tiny'}")
    print(f"C-STORE acknowledged (spool write with fsync): median {statistics.median(ms):.1f} ms, "
          f"p95 {ms[int(0.95 * (len(ms) - 1))]:.1f} ms")
    print(f"last instance -> SR in the outbox: median {statistics.median(to_sr) * 1e3:.0f} ms, "
          f"max {max(to_sr) * 1e3:.0f} ms")
    print(f"receiver CPU per visit (receive + grade + SR): {cpu / args.studies:.3f} s")
    flags = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    print(next((line for line in flags.splitlines() if line.startswith("Model name")), "Model name: ?"))


if __name__ == "__main__":
    main()
