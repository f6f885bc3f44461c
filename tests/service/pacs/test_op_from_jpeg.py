"""``radscreen dicom-from-jpeg``: a JPEG becomes an Ophthalmic Photography instance the PACS path grades.

The command runs as a subprocess on the example photographs (both eyes of one visit, the second given the
first's study UID); the files validate in dciodvfy, carry the JPEG's bytes unchanged, decode to the JPEG's
pixels through the service's DICOM decoder, and a running ``radscreen dicom-listen`` stores both over a real
C-STORE association and builds the visit's SR. Files it cannot wrap as they are are refused with the reason.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pydicom
import pytest
from PIL import Image
from pydicom.encaps import generate_frames

from service.pacs.intake import SUCCESS, Accepted, check_instance
from tests.helpers.dicom_listener import Listener, running_listener

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = {"R": ROOT / "examples" / "fundus-gradable.jpg", "L": ROOT / "examples" / "fundus-ungradable.jpg"}
pytestmark = pytest.mark.timeout(300)


def _wrap(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service", "dicom-from-jpeg", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def visit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("op")
    right = _wrap(str(EXAMPLES["R"]), str(folder / "right.dcm"), "--eye", "R")
    assert right.returncode == 0, right.stderr
    study = re.search(r"--study-uid (\S+)", right.stdout).group(1)  # type: ignore[union-attr]
    left = _wrap(str(EXAMPLES["L"]), str(folder / "left.dcm"), "--eye", "L", "--study-uid", study)
    assert left.returncode == 0, left.stderr
    return {"R": folder / "right.dcm", "L": folder / "left.dcm"}


def test_the_instances_are_op_of_one_visit_with_the_jpeg_unchanged(visit: dict[str, Path]) -> None:
    from service.inference.dicom import decode_dicom_rgb

    verdicts = {eye: check_instance(path.read_bytes()) for eye, path in visit.items()}
    assert all(isinstance(v, Accepted) for v in verdicts.values()), verdicts
    right, left = verdicts["R"], verdicts["L"]
    assert isinstance(right, Accepted) and isinstance(left, Accepted)
    assert (right.eye.value, left.eye.value) == ("right", "left") and right.study_uid == left.study_uid
    for eye, path in visit.items():
        ds = pydicom.dcmread(path)
        assert ds.SOPClassUID == "1.2.840.10008.5.1.4.1.1.77.1.5.1" and ds.Modality == "OP"
        assert ds.file_meta.TransferSyntaxUID == "1.2.840.10008.1.2.4.50"  # JPEG Baseline: no second lossy step
        [frame] = generate_frames(ds.PixelData, number_of_frames=1)
        jpeg = EXAMPLES[eye].read_bytes()
        assert frame == jpeg + b"\x00" * (len(jpeg) % 2)  # the JPEG, padded to even length as DICOM requires
        assert (ds.PatientName, ds.PatientID) == ("", "")  # names no one
        rgb = decode_dicom_rgb(path.read_bytes(), max_pixels=10**8, max_bytes=10**8)
        reference = np.asarray(Image.open(EXAMPLES[eye]).convert("RGB"))
        assert rgb.shape == reference.shape and np.abs(rgb.astype(int) - reference).max() <= 2


def test_dciodvfy_finds_no_error(visit: dict[str, Path]) -> None:
    tool = shutil.which("dciodvfy")
    if tool is None:
        pytest.skip("dciodvfy not installed: run scripts/install-system-deps.sh (Debian package dicom3tools)")
    for path in visit.values():
        out = subprocess.run([tool, str(path)], capture_output=True, text=True, timeout=60)
        text = out.stdout + out.stderr
        assert "OphthalmicPhotography8BitImage" in text
        assert [line for line in text.splitlines() if line.startswith("Error")] == []


def test_the_listener_stores_both_eyes_and_builds_the_visits_sr(
    visit: dict[str, Path], tiny_artifact: Path, tmp_path: Path
) -> None:
    from pynetdicom import AE
    from pynetdicom.sop_class import OphthalmicPhotography8BitImageStorage  # type: ignore[attr-defined]

    from tests.helpers.dicom_listener import AE_TITLE

    with running_listener(tiny_artifact, tmp_path / "spool", tmp_path / "listener.log") as listener:
        ae = AE(ae_title="TRYOUT")
        ae.acse_timeout = ae.dimse_timeout = ae.network_timeout = 30
        ae.add_requested_context(OphthalmicPhotography8BitImageStorage, "1.2.840.10008.1.2.4.50")
        assoc = ae.associate("127.0.0.1", listener.port, ae_title=AE_TITLE)
        assert assoc.is_established
        try:
            statuses = [int(assoc.send_c_store(pydicom.dcmread(path)).Status) for path in visit.values()]
        finally:
            assoc.release()
        assert statuses == [SUCCESS, SUCCESS]
        _wait_for_result(listener)


def _wait_for_result(listener: Listener, timeout_s: float = 180.0) -> None:
    end = time.monotonic() + timeout_s
    while listener.metric('radscreen_pacs_results_total{event="built"}') < 1:
        assert time.monotonic() < end, f"no SR built in {timeout_s} s:\n{listener.log.read_text()[-2000:]}"
        time.sleep(0.5)


@pytest.mark.parametrize(("name", "save", "why"), [
    ("photo.png", {"format": "PNG"}, "a PNG file: save the photograph as a JPEG first"),
    ("photo.jpg", {"format": "JPEG", "progressive": True}, "a progressive JPEG: re-save it as baseline"),
    ("grey.jpg", {"format": "JPEG", "mode": "L"}, "a L JPEG: only colour"),
])
def test_a_file_it_cannot_wrap_is_refused_with_the_reason(tmp_path: Path, name: str, save: dict, why: str) -> None:
    image = Image.open(EXAMPLES["R"]).convert(save.pop("mode", "RGB"))
    buf = io.BytesIO()
    image.save(buf, **save)
    (tmp_path / name).write_bytes(buf.getvalue())
    out = _wrap(str(tmp_path / name), str(tmp_path / "out.dcm"), "--eye", "R")
    assert out.returncode == 2 and why in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "out.dcm").exists()
