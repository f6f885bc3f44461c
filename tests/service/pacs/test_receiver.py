"""The C-STORE receiver against hostile peers, and killed mid-study.

Hostile DICOM over the network gets the refusal the standard gives and the receiver keeps serving:
another SOP class or an unsupported transfer syntax is rejected at association (presentation context result
"abstract syntax not supported" / "transfer syntax not supported", and dcmtk's storescu fails); a data set that
is not what its context says is answered with its DIMSE status (0x0122, 0xA900, 0xC000); a wrong called AE title
gets the association rejected. A receiver killed with SIGKILL after acknowledging one eye loses nothing: restarted
on the same spool, it grades the visit once the other eye arrives, and the archive gets one SR naming both.
"""

from __future__ import annotations

import io
import shutil
import signal
import struct
import subprocess
from pathlib import Path

import pydicom
import pytest
from pydicom.uid import JPEG2000Lossless, JPEGBaseline8Bit, generate_uid
from pynetdicom import AE
from pynetdicom.sop_class import CTImageStorage, OphthalmicPhotography8BitImageStorage  # type: ignore[attr-defined]

from service.pacs.intake import CANNOT_UNDERSTAND, DATASET_DOES_NOT_MATCH, SOP_CLASS_NOT_SUPPORTED, SUCCESS
from support.images import fundus_like
from support.processes import free_port
from tests.helpers.dicom_files import CT_IMAGE, EXPLICIT_VR_LE, op_dicom
from tests.helpers.dicom_listener import AE_TITLE, PATIENT_ID, Listener, running_listener, two_eye_study
from tests.helpers.pacs_checks import expected_for, require_orthanc, sr_summary

pytestmark = pytest.mark.timeout(300)
ABSTRACT_SYNTAX_NOT_SUPPORTED, TRANSFER_SYNTAX_NOT_SUPPORTED = 0x03, 0x04  # A-ASSOCIATE-AC result (PS3.8 9.3.3.2)


@pytest.fixture(scope="module")
def listener(tiny_artifact: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("receiver")
    with running_listener(tiny_artifact, folder / "spool", folder / "listener.log") as running:
        yield running


def _association(listener: Listener, *contexts: tuple[str, str], called: str = AE_TITLE, calling: str = "HOSTILE"):
    ae = AE(ae_title=calling)
    ae.acse_timeout = ae.dimse_timeout = ae.network_timeout = 30
    for abstract, syntax in contexts:
        ae.add_requested_context(abstract, syntax)
    return ae.associate("127.0.0.1", listener.port, ae_title=called)


def _alive(listener: Listener) -> None:
    assoc = _association(listener, ("1.2.840.10008.1.1", EXPLICIT_VR_LE))
    assert assoc.is_established
    assert assoc.send_c_echo().Status == SUCCESS
    assoc.release()


def _send_file(listener: Listener, path: Path, syntax: str = EXPLICIT_VR_LE) -> int:
    """C-STORE ``path`` as it is on disk: in pynetdicom's chunked mode the context comes from the file meta and
    the data set's bytes are sent without being parsed (so a hostile one travels as it is)."""
    from pynetdicom import _config

    chunked = _config.STORE_SEND_CHUNKED_DATASET
    _config.STORE_SEND_CHUNKED_DATASET = True
    assoc = _association(listener, (OphthalmicPhotography8BitImageStorage, syntax))
    assert assoc.is_established
    try:
        return int(assoc.send_c_store(path).Status)
    finally:
        assoc.release()
        _config.STORE_SEND_CHUNKED_DATASET = chunked


def _after_meta(garbage: bytes) -> bytes:
    """A valid preamble and file meta (OP, Explicit VR Little Endian), then ``garbage`` as the data set."""
    data = op_dicom(fundus_like(7, 64))
    end = 144 + struct.unpack("<I", data[140:144])[0]  # (0002,0000) group length's value sits at bytes 140-143
    return data[:end] + garbage


def test_other_sop_class_and_transfer_syntax_are_rejected_at_association(listener: Listener) -> None:
    assoc = _association(listener, (CTImageStorage, EXPLICIT_VR_LE),
                         (OphthalmicPhotography8BitImageStorage, JPEG2000Lossless))
    results = {cx.abstract_syntax: cx.result for cx in assoc.rejected_contexts}
    assert results == {CTImageStorage: ABSTRACT_SYNTAX_NOT_SUPPORTED,
                       OphthalmicPhotography8BitImageStorage: TRANSFER_SYNTAX_NOT_SUPPORTED}
    assert not assoc.accepted_contexts
    if assoc.is_established:
        assoc.release()
    _alive(listener)


def test_storescu_of_a_ct_slice_fails(listener: Listener, tmp_path: Path) -> None:
    if shutil.which("storescu") is None:
        pytest.skip("storescu not installed (Debian package dcmtk; scripts/install-system-deps.sh)")
    ct = tmp_path / "ct.dcm"
    ct.write_bytes(op_dicom(fundus_like(3, 64), SOPClassUID=CT_IMAGE, Modality="CT"))
    sent = subprocess.run(["storescu", "-aec", AE_TITLE, "127.0.0.1", str(listener.port), str(ct)],
                          capture_output=True, text=True, timeout=60)
    assert sent.returncode != 0
    assert "presentation context" in sent.stderr.lower()
    _alive(listener)


@pytest.mark.parametrize(("build", "status"), [
    (lambda: op_dicom(fundus_like(4, 64), SOPClassUID=CT_IMAGE), SOP_CLASS_NOT_SUPPORTED),  # meta says OP
    (lambda: op_dicom(fundus_like(5, 64), laterality=None), DATASET_DOES_NOT_MATCH),
    (lambda: op_dicom(fundus_like(6, 64), laterality="B"), DATASET_DOES_NOT_MATCH),
    (lambda: _after_meta(b"\xff" * 1024), CANNOT_UNDERSTAND),
    (lambda: _after_meta(b"\x08\x00\x16\x00UI\xf0\xff" + bytes(range(256)) * 4), CANNOT_UNDERSTAND),
], ids=["ct-dataset-in-op-context", "no-laterality", "both-eyes", "garbage-dataset", "garbage-sop-class"])
def test_wrong_data_sets_get_their_status(listener: Listener, tmp_path: Path, build, status: int) -> None:
    data = build()
    if status == SOP_CLASS_NOT_SUPPORTED:  # the file meta (which picks the context) still says OP
        ds = pydicom.dcmread(io.BytesIO(data), force=True)
        ds.file_meta.MediaStorageSOPClassUID = OphthalmicPhotography8BitImageStorage
        out = io.BytesIO()
        ds.save_as(out, enforce_file_format=False)  # as is: pydicom would otherwise align the meta with the data set
        data = out.getvalue()
    path = tmp_path / "hostile.dcm"
    path.write_bytes(data)
    assert _send_file(listener, path) == status
    _alive(listener)


def test_wrong_called_ae_title_is_rejected(listener: Listener) -> None:
    assoc = _association(listener, (OphthalmicPhotography8BitImageStorage, EXPLICIT_VR_LE), called="NOTRADSCREEN")
    assert assoc.is_rejected
    _alive(listener)


def test_receiver_killed_mid_study_loses_nothing(tiny_artifact: Path, tiny_scorer, tmp_path: Path) -> None:
    require_orthanc()
    from tests.helpers.orthanc import running_orthanc

    study_uid = generate_uid()
    right, left = two_eye_study(study_uid)
    expected = expected_for(tiny_scorer, [right, left])
    spool, port = tmp_path / "spool", free_port()
    with running_orthanc(tmp_path / "orthanc") as orthanc:
        with running_listener(tiny_artifact, spool, tmp_path / "first.log", archive_port=orthanc.dicom_port,
                              port=port) as first:
            path = tmp_path / "right.dcm"
            path.write_bytes(right)
            assert _send_file(first, path, JPEGBaseline8Bit) == SUCCESS  # acknowledged: on disk
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(timeout=30)
        assert orthanc.find(StudyInstanceUID=study_uid, Modality="SR") == []  # one eye: not graded before quiet_s
        with running_listener(tiny_artifact, spool, tmp_path / "second.log", archive_port=orthanc.dicom_port,
                              port=port) as second:
            path = tmp_path / "left.dcm"
            path.write_bytes(left)
            assert _send_file(second, path, JPEGBaseline8Bit) == SUCCESS
            ids = orthanc.wait_for(90, StudyInstanceUID=study_uid, Modality="SR")
            assert len(ids) == 1, second.log.read_text()[-2000:]
            summary = sr_summary(orthanc.instance_file(ids[0]))
            assert summary["dataset"].SOPInstanceUID == expected.sr_uid  # both eyes: the right one survived
            assert summary["exam_sources"] == set(expected.results)
            assert summary["dataset"].PatientID == PATIENT_ID


def test_association_limit(listener: Listener) -> None:
    """RADSCREEN_PACS_MAX_ASSOCIATIONS (4 by default): a fifth peer at once is rejected, the first four serve (four
    calling AE titles: one title gets RADSCREEN_PACS_MAX_ASSOCIATIONS_PER_AE, tests/service/hostile)."""
    held = [_association(listener, ("1.2.840.10008.1.1", EXPLICIT_VR_LE), calling=f"PEER{i}") for i in range(4)]
    try:
        assert all(a.is_established for a in held)
        extra = _association(listener, ("1.2.840.10008.1.1", EXPLICIT_VR_LE), calling="PEER4")
        assert extra.is_rejected
        assert held[0].send_c_echo().Status == SUCCESS
    finally:
        for assoc in held:
            assoc.release()
    _alive(listener)
