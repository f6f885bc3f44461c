"""The durable spool: received instances, graded sets, results waiting for the archive, delivered results.

Layout under the spool folder (``RADSCREEN_PACS_SPOOL_DIR``)::

    studies/<study key>/<instance key>-<R|L>.dcm  a received instance, exactly the bytes received
    studies/<study key>/identity.json         per held instance: its eye, a keyed sha256 of its PatientID and
                                              the sha256 of its PixelData value (digests only, no identifier)
    studies/<study key>/graded.json           the instance set last graded and its result's UID
    studies/<study key>/grading.json          a grading in progress: the instance set and how many passes started
    studies/<study key>/quarantine.json       a study set aside: the instance set, the reason (no identifier), when
    .study-locks/<n>.lock                     the per-study receiving locks (64 stripes, by study key)
    results/<result key>.dcm                  an SR built and not yet delivered (the outbox)
    results/<result key>.json                 its exam (the /v1/exams fields) and FHIR bundle
    sent/<result key>.json                    an SR the archive has acknowledged (kept: it is the duplicate check)

Keys are sha256 digests (first 32 hex) of the StudyInstanceUID, SOP Instance UID and SR SOP Instance UID, so no
identifier appears in a file name. Every write is :func:`models.io.atomic.atomic_write_bytes` (temporary file,
fsync, rename, fsync of the folder), so an instance is on disk before its receipt is acknowledged and a process
killed at any point leaves each file either absent or whole. The spool holds each SOP instance once: a resent
instance whose bytes are identical to the file held is acknowledged without rewriting it, so its arrival time (the
file's mtime, from which the worker waits for a study to settle) stays that of its first receipt; one whose bytes
differ replaces it (under the eye it now names).

**Receiving lock.** Several processes may receive into one spool (HTTP workers, ``radscreen dicom-listen``).
:meth:`Spool.study_lock` serialises what :func:`service.pacs.receive.receive` does with one study (count the
instances held, read ``identity.json``, write it and the instance): an exclusive ``flock`` on one of
:data:`LOCK_STRIPES` files under ``.study-locks/``, chosen by the study key. Each call opens the file itself, so two
threads of one process exclude each other as two processes do; the lock is released when the call returns or its
process dies. :meth:`Spool.remove_study` takes the same lock.

**Identity file.** ``identity.json`` records, per held instance (by instance key), what the intake compares
between the instances of a study without keeping an identifier: the eye, :func:`patient_digest` (HMAC-SHA256 of
the PatientID keyed by the StudyInstanceUID, so equal PatientIDs of two studies give unrelated digests) and the
sha256 of the raw PixelData element value. It is written atomically before the instance, and read back only for
instances still on disk, so a receiver killed between the two writes leaves no record of an instance not held.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from models.io.atomic import atomic_write_bytes, fsync_dir, stale_temporaries
from models.outcome.decision import Eye

GRADED = "graded.json"
GRADING = "grading.json"
QUARANTINE = "quarantine.json"
IDENTITY = "identity.json"
LOCKS = ".study-locks"
LOCK_STRIPES = 64
_LETTER = {Eye.RIGHT: "R", Eye.LEFT: "L"}
_EYE = {letter: eye for eye, letter in _LETTER.items()}


def key_of(uid: str) -> str:
    """The file-name key of a UID: no identifier is ever a file name."""
    return hashlib.sha256(uid.encode("utf-8")).hexdigest()[:32]


def patient_digest(study_uid: str, patient_id: str | None) -> str:
    """What ``identity.json`` keeps of a PatientID: HMAC-SHA256 keyed by the StudyInstanceUID (an absent PatientID
    has a digest of its own, unequal to any present one's)."""
    message = b"\x00" if patient_id is None else b"\x01" + patient_id.encode("utf-8")
    return hmac.new(study_uid.encode("utf-8"), message, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class HeldInstance:
    """What the spool records of one held instance for the intake's comparisons (digests only)."""

    eye: Eye
    patient: str | None  # patient_digest; None when the instance's header can no longer be read
    pixels: str | None  # sha256 of the raw PixelData value; None without pixel data

    def to_json(self) -> dict[str, str | None]:
        return {"eye": _LETTER[self.eye], "patient": self.patient, "pixels": self.pixels}

    @staticmethod
    def from_json(value: Any) -> HeldInstance | None:
        """The record, or None for one that is not a record (a hand-edited or foreign file)."""
        if not isinstance(value, dict) or value.get("eye") not in _EYE:
            return None
        patient, pixels = value.get("patient"), value.get("pixels")
        if not all(v is None or isinstance(v, str) for v in (patient, pixels)):
            return None
        return HeldInstance(_EYE[value["eye"]], patient, pixels)


@dataclass(frozen=True)
class StudyFolder:
    """One study in the spool as it is now on disk."""

    key: str
    folder: Path
    instances: tuple[Path, ...]  # sorted by name
    last_arrival: float  # newest instance's mtime (epoch seconds); survives a restart

    @property
    def eyes(self) -> set[Eye]:
        """The eyes photographed so far (from the file names)."""
        return {eye for eye, letter in _LETTER.items() for p in self.instances if p.stem.endswith(f"-{letter}")}

    @property
    def digest(self) -> str:
        """The instance set's identity (names are the instance keys)."""
        return hashlib.sha256("\n".join(p.stem for p in self.instances).encode()).hexdigest()


class Spool:
    """The spool folder (module docstring). Safe for several threads of one process."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.studies_dir = self.root / "studies"
        self.results_dir = self.root / "results"
        self.sent_dir = self.root / "sent"
        self.locks_dir = self.root / LOCKS
        for folder in (self.studies_dir, self.results_dir, self.sent_dir, self.locks_dir):
            folder.mkdir(parents=True, exist_ok=True)
        fsync_dir(self.root)
        self._lock: BinaryIO | None = None

    def try_lock(self) -> bool:
        """Take the spool's grading lock (``flock`` on ``.worker.lock``, released when the process ends); False
        while another process holds it. One grader per spool: several HTTP workers may receive into one."""
        if self._lock is not None:
            return True
        handle = open(self.root / ".worker.lock", "a+b")  # noqa: SIM115 (held open for the process's life)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._lock = handle
        return True

    # -- instances -------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def study_lock(self, study_uid: str) -> Iterator[None]:
        """Hold the study's receiving lock for the block (module docstring: threads and processes)."""
        with self._stripe(key_of(study_uid)):
            yield

    @contextlib.contextmanager
    def _stripe(self, study_key: str) -> Iterator[None]:
        stripe = int(study_key[:8], 16) % LOCK_STRIPES
        with open(self.locks_dir / f"{stripe:02d}.lock", "a+b") as handle:  # this call's own open file
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
            yield

    def put_instance(self, study_uid: str, sop_instance_uid: str, eye: Eye, data: bytes) -> Path:
        """Store one instance durably (fsync + atomic rename + folder fsync); returns its path. The eye is part
        of the name (``<instance key>-R.dcm``), so deciding whether a study is complete reads no header. Bytes
        identical to the file held are not written again (its mtime, the arrival time, stays); the same instance
        held under the other eye's name is removed once the new file is in place."""
        folder = self.studies_dir / key_of(study_uid)
        if not folder.is_dir():
            folder.mkdir(exist_ok=True)
            fsync_dir(self.studies_dir)
        path = folder / f"{key_of(sop_instance_uid)}-{_LETTER[eye]}.dcm"
        if not _holds_bytes(path, data):
            atomic_write_bytes(path, data)
        other = folder / f"{key_of(sop_instance_uid)}-{_LETTER[Eye.LEFT if eye is Eye.RIGHT else Eye.RIGHT]}.dcm"
        if other.exists():
            other.unlink()
            fsync_dir(folder)
        return path

    def instances_of(self, study_uid: str) -> list[Path]:
        """The instances held for ``study_uid``."""
        return sorted((self.studies_dir / key_of(study_uid)).glob("*.dcm"))

    def holds(self, study_uid: str, sop_instance_uid: str) -> bool:
        """Whether the spool holds this instance already (under either eye)."""
        return any((self.studies_dir / key_of(study_uid)).glob(f"{key_of(sop_instance_uid)}-*.dcm"))

    def held_instances(self, study_uid: str) -> dict[str, Path]:
        """The instances held for ``study_uid`` by instance key."""
        return {p.stem.rsplit("-", 1)[0]: p for p in self.instances_of(study_uid)}

    def identity(self, study_uid: str) -> dict[str, HeldInstance]:
        """The records of ``identity.json`` (module docstring) of the instances still held, by instance key. Call
        under :meth:`study_lock`; an instance held without a record (received before identity files) is absent."""
        held = self.held_instances(study_uid)
        recorded = _read_json(self.studies_dir / key_of(study_uid) / IDENTITY) or {}
        records = {key: HeldInstance.from_json(value) for key, value in recorded.items() if key in held}
        return {key: record for key, record in records.items() if record is not None}

    def record_identity(self, study_uid: str, records: dict[str, HeldInstance]) -> None:
        """Replace the study's ``identity.json`` with ``records`` (atomically; not rewritten when unchanged). Call
        under :meth:`study_lock`, before :meth:`put_instance`."""
        folder = self.studies_dir / key_of(study_uid)
        if not folder.is_dir():
            folder.mkdir(exist_ok=True)
            fsync_dir(self.studies_dir)
        data = json.dumps({key: records[key].to_json() for key in sorted(records)}, sort_keys=True).encode()
        path = folder / IDENTITY
        if not _holds_bytes(path, data):
            atomic_write_bytes(path, data)

    def studies(self) -> list[StudyFolder]:
        """Every study folder with at least one instance, oldest activity first."""
        found: list[StudyFolder] = []
        for folder in self.studies_dir.iterdir():
            if not folder.is_dir():
                continue
            instances = tuple(sorted(folder.glob("*.dcm")))
            if not instances:
                continue
            last = max(_mtime(p) for p in instances)
            found.append(StudyFolder(folder.name, folder, instances, last))
        return sorted(found, key=lambda s: s.last_arrival)

    def graded(self, study: StudyFolder) -> dict[str, Any] | None:
        """What was last graded of this study: ``{"digest": ..., "result": <result key>}``, or None."""
        return _read_json(study.folder / GRADED)

    def mark_graded(self, study: StudyFolder, result_key: str) -> None:
        atomic_write_bytes(study.folder / GRADED, json.dumps({"digest": study.digest, "result": result_key}).encode())

    # -- a grading in progress, and quarantine ----------------------------------------------------------------
    def start_grading(self, study: StudyFolder) -> int:
        """Record that a grading pass of this instance set starts; returns how many passes of this same set had
        started before without finishing (a process that ended during them: killed, out of memory, crashed)."""
        record = _read_json(study.folder / GRADING)
        unfinished = int(record.get("started", 0)) if record and record.get("digest") == study.digest else 0
        atomic_write_bytes(study.folder / GRADING,
                           json.dumps({"digest": study.digest, "started": unfinished + 1}).encode())
        return unfinished

    def restore_grading(self, study: StudyFolder, unfinished: int) -> None:
        """Undo :meth:`start_grading` (the pass did not happen: the model was busy)."""
        if unfinished:
            atomic_write_bytes(study.folder / GRADING,
                               json.dumps({"digest": study.digest, "started": unfinished}).encode())
        else:
            self.finish_grading(study)

    def finish_grading(self, study: StudyFolder) -> None:
        """The pass ended (graded, refused or quarantined): nothing is left in progress."""
        (study.folder / GRADING).unlink(missing_ok=True)

    def quarantine(self, study: StudyFolder, reason: str, detail: str) -> None:
        """Set this instance set aside: the worker does not grade it again (a restart included) until an instance
        is added or replaced, or an operator releases it. ``reason`` is a fixed word, ``detail`` plain words
        without any identifier."""
        record = {"digest": study.digest, "reason": reason, "detail": detail, "since": time.time(),
                  "photographs": len(study.instances)}
        atomic_write_bytes(study.folder / QUARANTINE, json.dumps(record).encode())
        self.finish_grading(study)

    def quarantined(self, study: StudyFolder) -> dict[str, Any] | None:
        """The quarantine record of this instance set, or None (none, or one of an earlier set)."""
        record = _read_json(study.folder / QUARANTINE)
        return record if record is not None and record.get("digest") == study.digest else None

    def quarantine_list(self) -> list[tuple[StudyFolder, dict[str, Any]]]:
        """Every study whose current instance set is quarantined, oldest activity first."""
        return [(s, q) for s in self.studies() if (q := self.quarantined(s)) is not None]

    def release(self, study_key: str) -> bool:
        """Lift a study's quarantine (an operator, after fixing its cause): it is graded at the next pass.
        False when no such quarantined study is held."""
        path = self.studies_dir / study_key / QUARANTINE
        if not _is_key(study_key) or not path.is_file():
            return False
        path.unlink()
        (self.studies_dir / study_key / GRADING).unlink(missing_ok=True)
        fsync_dir(path.parent)
        return True

    def free_bytes(self) -> int:
        """Bytes free for writing on the spool's file system."""
        return shutil.disk_usage(self.root).free

    def remove_study(self, study: StudyFolder) -> None:
        """Delete the files of ``study`` as listed (retention over, result delivered). An instance received in the
        meantime is kept (the folder stays), and the study is graded again with it. Under the study's receiving
        lock, so the identity file goes with the last instance and a receiver never sees half a removal."""
        with self._stripe(study.key):
            for path in (*study.instances, study.folder / GRADED, study.folder / GRADING,
                         study.folder / QUARANTINE):
                path.unlink(missing_ok=True)
            if any(study.folder.glob("*.dcm")):  # something arrived since the listing
                return
            (study.folder / IDENTITY).unlink(missing_ok=True)
            try:
                study.folder.rmdir()
            except OSError:  # a file that is no instance (a temporary file of a killed writer): kept for cleaning
                return
            fsync_dir(self.studies_dir)

    # -- results ---------------------------------------------------------------------------------------------
    def put_result(self, sr_uid: str, sr_bytes: bytes, record: dict[str, Any]) -> str:
        """Queue a result for delivery (record first, then the SR: the SR's presence means 'to deliver')."""
        key = key_of(sr_uid)
        atomic_write_bytes(self.results_dir / f"{key}.json", json.dumps(record, ensure_ascii=False).encode())
        atomic_write_bytes(self.results_dir / f"{key}.dcm", sr_bytes)
        return key

    def outbox(self) -> list[Path]:
        """SRs waiting for the archive, oldest first."""
        return sorted(self.results_dir.glob("*.dcm"), key=_mtime)

    def outbox_times(self) -> list[float]:
        """When each waiting SR was queued (epoch seconds; one gone meanwhile is left out)."""
        return [t for t in (_mtime(p) for p in self.results_dir.glob("*.dcm")) if t > 0]

    def is_sent(self, result_key: str) -> bool:
        return (self.sent_dir / f"{result_key}.json").is_file()

    def mark_sent(self, sr_path: Path) -> None:
        """The archive acknowledged ``sr_path``: move its record to ``sent/`` and drop the SR bytes."""
        key = sr_path.stem
        record = _read_json(self.results_dir / f"{key}.json") or {}
        record["delivered_at"] = time.time()
        atomic_write_bytes(self.sent_dir / f"{key}.json", json.dumps(record, ensure_ascii=False).encode())
        sr_path.unlink(missing_ok=True)
        (self.results_dir / f"{key}.json").unlink(missing_ok=True)
        fsync_dir(self.results_dir)

    def record(self, result_key: str) -> dict[str, Any] | None:
        """A result's record, delivered or not."""
        return _read_json(self.sent_dir / f"{result_key}.json") or _read_json(self.results_dir / f"{result_key}.json")

    def clean_temporaries(self) -> int:
        """Remove temporary files of writers killed mid-write (call once at start, before receiving)."""
        stale = [p for folder in (self.results_dir, self.sent_dir, *self.studies_dir.iterdir())
                 if folder.is_dir() for p in stale_temporaries(folder)]
        for path in stale:
            path.unlink(missing_ok=True)
        return len(stale)


def _is_key(text: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{32}", text) is not None


def _holds_bytes(path: Path, data: bytes) -> bool:
    """Whether ``path`` is a file holding exactly ``data``."""
    try:
        if path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except FileNotFoundError:
        return False


def _mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return value if isinstance(value, dict) else None
