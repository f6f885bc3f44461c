"""The C-STORE receiver's bounds against hostile peers: size while the bytes arrive, and fair association slots.

A real ``radscreen dicom-listen`` (``RADSCREEN_MAX_UPLOAD_BYTES`` 2 MiB, 4 associations, 2 per calling AE title,
its temp dir a folder of the test) and real pynetdicom peers:

- a data set of 128 MiB is aborted as it arrives (A-ABORT, no status), within 10 s, the receiver's peak RSS grows
  by less than 150 MiB, nothing is stored, no temporary file is left, and a normal study is stored afterwards;
- a P-DATA-TF PDU announcing 1 GiB is refused after its header: the sender cannot push 64 MiB into it;
- PDUs of the announced length carrying a command set that never ends, or data set fragments with no command,
  are refused past 64 KiB / the bound;
- a malformed UID in a C-STORE command (which pynetdicom now writes into the received file's meta, pydicom
  warning with the value quoted) is refused and stays out of the receiver's log;
- one calling AE title holding its associations open cannot keep another AE's store out: its third and fourth
  requests are rejected (rejected-transient, "local limit exceeded");
- a calling AE title padded with spaces is the same title (PS3.5 6.2): accepted alone, and no extra slot; in
  the allow-list too (a ``StoreSCP`` in process, whose ``stop`` does not wait for an open association).
"""

from __future__ import annotations

import contextlib
import io
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydicom
import pytest
from pydicom.uid import UID, generate_uid
from pynetdicom import AE
from pynetdicom.sop_class import OphthalmicPhotography8BitImageStorage  # type: ignore[attr-defined]

from service.pacs.intake import SUCCESS
from support.images import fundus_like
from tests.helpers.dicom_files import EXPLICIT_VR_LE, op_dicom
from tests.helpers.dicom_listener import AE_TITLE, Listener, running_listener

pytestmark = pytest.mark.timeout(300)
MIB = 1024 * 1024
MAX_UPLOAD = 2 * MIB
VERIFICATION = "1.2.840.10008.1.1"
REFUSED = 'radscreen_pacs_instances_total{path="cstore",result="refused"}'
REJECTED_TRANSIENT, PRESENTATION_PROVIDER, LOCAL_LIMIT_EXCEEDED = 0x02, 0x03, 0x02


@dataclass(frozen=True)
class Bounded:
    listener: Listener
    spool: Path
    tmp: Path  # the receiver's TMPDIR: where pynetdicom writes incoming data sets (tmp*.dcm)


@pytest.fixture(scope="module")
def bounded(tiny_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bounded]:
    folder = tmp_path_factory.mktemp("cstore-bounds")
    tmp = folder / "tmp"
    tmp.mkdir()
    env = {"RADSCREEN_MAX_UPLOAD_BYTES": str(MAX_UPLOAD), "RADSCREEN_PACS_MAX_ASSOCIATIONS": "4",
           "RADSCREEN_PACS_MAX_ASSOCIATIONS_PER_AE": "2", "TMPDIR": str(tmp)}
    with running_listener(tiny_artifact, folder / "spool", folder / "listener.log", env=env) as running:
        yield Bounded(running, folder / "spool", tmp)


def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@contextlib.contextmanager
def _peak_growth(pid: int) -> Iterator[dict[str, float]]:
    """Yield a dict that holds, on exit, the growth of the process's peak RSS (MiB) over its RSS at entry."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _kib(pid, "VmRSS")
    out: dict[str, float] = {}
    yield out
    out["mib"] = (_kib(pid, "VmHWM") - before) / 1024


def _ae(title: str, *contexts: tuple[str, str]) -> AE:
    ae = AE(ae_title=title)
    ae.acse_timeout = ae.dimse_timeout = ae.network_timeout = 60
    for abstract, syntax in contexts:
        ae.add_requested_context(abstract, syntax)
    return ae


def _associate(port: int, title: str, *contexts: tuple[str, str]) -> Any:
    return _ae(title, *contexts).associate("127.0.0.1", port, ae_title=AE_TITLE)


def _echo_association(port: int, title: str) -> Any:
    return _associate(port, title, (VERIFICATION, EXPLICIT_VR_LE))


def _rejected_for_local_limit(assoc: Any) -> bool:
    rj = assoc.acceptor.primitive
    return bool(assoc.is_rejected and (rj.result, rj.result_source, rj.diagnostic)
                == (REJECTED_TRANSIENT, PRESENTATION_PROVIDER, LOCAL_LIMIT_EXCEEDED))


def _store(listener: Listener, path: Path, title: str = "MODALITY") -> tuple[int | None, bool]:
    """C-STORE the file at ``path`` as it is on disk (pynetdicom's chunked send): (status or None, whether the
    association ended under it: aborted, or its connection reset while the sender was still writing)."""
    from pynetdicom import _config

    chunked = _config.STORE_SEND_CHUNKED_DATASET
    _config.STORE_SEND_CHUNKED_DATASET = True
    assoc = _associate(listener.port, title, (OphthalmicPhotography8BitImageStorage, EXPLICIT_VR_LE))
    assert assoc.is_established
    try:
        rsp = assoc.send_c_store(path)
        status = int(rsp.Status) if "Status" in rsp else None
        if status is None:  # pynetdicom's reactor marks the association ended a moment after send_c_store returns
            with contextlib.suppress(AssertionError):
                _until(lambda: not assoc.is_established, 10, "the sender's association ends")
        return status, not assoc.is_established
    finally:
        if assoc.is_established:
            assoc.release()
        _config.STORE_SEND_CHUNKED_DATASET = chunked


def _stored(spool: Path) -> set[Path]:
    return set((spool / "studies").rglob("*.dcm"))


def _partial(bounded: Bounded) -> list[Path]:
    """pynetdicom's temporary data set files (``tmp*.dcm`` in the receiver's TMPDIR)."""
    return list(bounded.tmp.glob("*.dcm"))


def _normal_study(listener: Listener, tmp_path: Path, title: str = "MODALITY") -> list[int | None]:
    """Both eyes of one synthetic visit (256 x 256, uncompressed): the statuses of their C-STOREs."""
    study = generate_uid()
    statuses = []
    for seed, eye in ((11, "R"), (12, "L")):
        path = tmp_path / f"{eye}.dcm"
        path.write_bytes(op_dicom(fundus_like(seed, 256), laterality=eye, study_uid=study))
        statuses.append(_store(listener, path, title)[0])
    return statuses


def _alive(listener: Listener) -> None:
    assoc = _echo_association(listener.port, "PROBE")
    assert assoc.is_established
    assert assoc.send_c_echo().Status == SUCCESS
    assoc.release()


def test_a_data_set_far_over_the_bound_is_aborted_as_it_arrives(bounded: Bounded, tmp_path: Path) -> None:
    listener = bounded.listener
    ds = pydicom.dcmread(io.BytesIO(op_dicom(fundus_like(9, 64))))
    ds.PixelData = bytes(128 * MIB)  # 64 x MAX_UPLOAD
    big = tmp_path / "big.dcm"
    ds.save_as(big, enforce_file_format=False)
    stored, refused = _stored(bounded.spool), listener.metric(REFUSED)
    outcome: dict[str, tuple[int | None, bool]] = {}
    sender = threading.Thread(target=lambda: outcome.update(sent=_store(listener, big)), daemon=True)
    with _peak_growth(listener.proc.pid) as growth:
        sender.start()
        _until(lambda: listener.metric(REFUSED) > refused, 10, "the receiver refuses the transfer")
        sender.join(timeout=120)
        assert not sender.is_alive()
    assert outcome["sent"] == (None, True)  # ended under the sender, no status: the receiver stopped reading
    assert growth["mib"] < 150, f"peak RSS grew by {growth['mib']:.0f} MiB"
    assert _stored(bounded.spool) == stored
    _until(lambda: not _partial(bounded), 30, "the partial data set file is removed")
    assert _normal_study(listener, tmp_path) == [SUCCESS, SUCCESS]
    assert len(_stored(bounded.spool) - stored) == 2
    assert not _partial(bounded)


def test_a_pdu_longer_than_announced_is_refused_before_its_body(bounded: Bounded) -> None:
    listener = bounded.listener
    assoc = _echo_association(listener.port, "GIANTPDU")
    assert assoc.is_established
    with _peak_growth(listener.proc.pid) as growth:
        # a P-DATA-TF of 1 GiB (we announce 256 KiB), then its body
        sent = _flood(assoc, bytes(MIB), 256 * MIB, head=struct.pack(">BBL", 0x04, 0, 1 << 30))
    assert sent < 64 * MIB, f"the receiver took {sent // MIB} MiB of one PDU"
    assert growth["mib"] < 150, f"peak RSS grew by {growth['mib']:.0f} MiB"
    _alive(listener)


def _flood(assoc: Any, chunk: bytes, limit: int, *, head: bytes = b"") -> int:
    """Write ``head``, then ``chunk`` again and again on the association's socket until ``limit`` bytes went or the
    receiver ends it; abort the association; return the bytes of ``chunk`` sent."""
    sent = 0
    try:
        raw = assoc.dul.socket.socket
        raw.sendall(head)
        while sent < limit:
            raw.sendall(chunk)
            sent += len(chunk)
    except (OSError, AttributeError):  # reset, or closed under us by pynetdicom on the A-ABORT
        pass
    finally:
        with contextlib.suppress(Exception):
            assoc.abort()
    return sent


def _p_data(control: int, fragment: bytes) -> bytes:
    """One P-DATA-TF PDU of one PDV (presentation context 1) with ``control`` as its message control header."""
    item = struct.pack(">LBB", 2 + len(fragment), 1, control) + fragment
    return struct.pack(">BBL", 0x04, 0, len(item)) + item


@pytest.mark.parametrize("control", [0x01, 0x00], ids=["command-set-without-end", "data-set-without-command"])
def test_endless_fragments_in_valid_pdus_are_refused(bounded: Bounded, control: int) -> None:
    """PDUs within the announced length, but fragments of one message that never ends: a command set past
    64 KiB, or data set fragments past the bound, abort the association (pynetdicom would keep them in memory)."""
    listener = bounded.listener
    assoc = _echo_association(listener.port, "ENDLESS")
    assert assoc.is_established
    with _peak_growth(listener.proc.pid) as growth:
        sent = _flood(assoc, _p_data(control, bytes(16_000)), 96 * MIB)
    assert sent < 32 * MIB, f"the receiver took {sent // MIB} MiB of one message"
    assert growth["mib"] < 150, f"peak RSS grew by {growth['mib']:.0f} MiB"
    _alive(listener)


def test_a_malformed_uid_in_the_command_stays_out_of_the_log(bounded: Bounded, tmp_path: Path) -> None:
    """pynetdicom writes the command's SOP Instance UID into the received file's meta (in its own thread), and
    pydicom warns about a malformed one, quoting it: the receiver refuses the instance and logs no UID."""
    listener = bounded.listener
    ds = pydicom.dcmread(io.BytesIO(op_dicom(fundus_like(13, 64))))
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = UID("1.2.826.PHIUID7391")
    path = tmp_path / "bad-uid.dcm"
    ds.save_as(path, enforce_file_format=False)
    status, ended = _store(listener, path)
    assert status is not None and status != SUCCESS and not ended
    _alive(listener)
    assert "PHIUID7391" not in listener.log.read_text()


def test_one_ae_holding_its_slots_cannot_keep_another_out(bounded: Bounded, tmp_path: Path) -> None:
    listener = bounded.listener
    held = [_echo_association(listener.port, "HOLDER") for _ in range(4)]  # as many as the receiver's whole limit
    try:
        assert [a.is_established for a in held] == [True, True, False, False]
        assert all(_rejected_for_local_limit(a) for a in held[2:])
        assert all(a.send_c_echo().Status == SUCCESS for a in held[:2])  # idle holders keep their slots
        statuses: list[int | None] = []

        def pacs_stores() -> bool:  # a rejected HOLDER's connection may take a moment to wind down
            with contextlib.suppress(AssertionError):
                statuses[:] = _normal_study(listener, tmp_path, "ORTHANC")
            return statuses == [SUCCESS, SUCCESS]

        _until(pacs_stores, 10, "another AE stores while HOLDER holds its slots")
    finally:
        for assoc in held:
            if assoc.is_established:
                assoc.release()
    _alive(listener)


@pytest.mark.parametrize("padded", [" HOLDER", "  HOLDER  ", "HOLDER    "])
def test_a_padded_calling_ae_title_is_the_same_title(bounded: Bounded, padded: str) -> None:
    listener = bounded.listener
    alone = _echo_association(listener.port, padded)
    assert alone.is_established  # conformant: spaces around an AE title are not significant
    alone.release()
    held = [_echo_association(listener.port, "HOLDER") for _ in range(2)]
    try:
        assert all(a.is_established for a in held)
        held.append(_echo_association(listener.port, padded))
        assert _rejected_for_local_limit(held[-1]), "padding the title bought an extra slot"
    finally:
        for assoc in held:
            if assoc.is_established:
                assoc.release()
    _alive(listener)


def test_the_allow_list_compares_titles_without_their_spaces(tmp_path: Path) -> None:
    """In process: ``allowed_calling_aets`` ["ORTHANC"] admits " ORTHANC", whose padded and plain associations
    share ORTHANC's two slots; another title is "calling AE title not recognised"; ``stop`` returns while an
    association is still open."""
    from service.metrics import ServiceMetrics
    from service.pacs.listener import StoreSCP
    from service.pacs.settings import PacsSettings
    from service.pacs.store import Spool
    from support.processes import free_port

    settings = PacsSettings(spool_dir=tmp_path / "spool", listen_port=free_port(), allowed_calling_aets=["ORTHANC"])
    scp = StoreSCP(settings, Spool(tmp_path / "spool"), ServiceMetrics(), max_bytes=MAX_UPLOAD, max_instances=4)
    scp.start()
    port = settings.listen_port
    held: list[Any] = []
    try:
        stranger = _echo_association(port, "STRANGER")
        rj = stranger.acceptor.primitive
        assert stranger.is_rejected and (rj.result, rj.result_source, rj.diagnostic) == (0x01, 0x01, 0x03)
        held += [_echo_association(port, " ORTHANC"), _echo_association(port, "ORTHANC")]
        assert all(a.is_established for a in held)
        held.append(_echo_association(port, "ORTHANC "))
        assert _rejected_for_local_limit(held[-1])
    finally:
        stopped = threading.Thread(target=scp.stop, daemon=True)
        stopped.start()
        stopped.join(timeout=10)
        assert not stopped.is_alive(), "stop() waits for the open associations"
        for assoc in held:
            if assoc.is_established:
                assoc.release()


def test_per_ae_slots_are_at_most_the_total() -> None:
    from pydantic import ValidationError

    from service.pacs.settings import PacsSettings

    with pytest.raises(ValidationError, match="max_associations_per_ae"):
        PacsSettings(max_associations=2, max_associations_per_ae=3)
    assert PacsSettings().max_associations_per_ae <= PacsSettings().max_associations
