"""One received instance, by either network path: bounded, checked, then stored durably, or refused with its status.

:func:`receive` is what the STOW-RS route and the C-STORE receiver both do with each instance:

1. :func:`service.pacs.intake.check_instance` (SOP class, transfer syntax, UIDs exactly as sent, ImageLaterality;
   the header only, and the sha256 of the raw pixel data);
2. larger than ``max_bytes`` (``RADSCREEN_MAX_UPLOAD_BYTES``, the limit of any photograph) -> 0xA700;
3. when the URL names a study (STOW-RS ``/studies/{study}``), an instance of another study -> 0xA900;

then, under the study's receiving lock (:meth:`service.pacs.store.Spool.study_lock`: one study's steps 4-7 run
for one instance at a time across threads and processes, so concurrent senders cannot overrun the bound):

4. a study that already holds ``max_instances`` photographs (``RADSCREEN_MAX_EXAM_IMAGES``) gets no new one
   (0xA700): a visit is graded in one batch, so its size is bounded like ``POST /v1/exams``; an instance it
   already holds (the same SOP Instance UID) is not a new one;
5. an instance whose PatientID differs from that of the other instances the study holds (an absent PatientID
   counts as a value of its own) -> 0xA900: a study is one patient's visit, and the sender learns it now rather
   than the study being refused at grading with nothing sent back;
6. an instance whose pixel data (the sha256 of the raw PixelData value) equals that of an instance of the other
   eye the study holds (a relabelled copy of the same instance included) -> 0xA900: one photograph cannot stand
   for both eyes. The same photograph twice for one eye is harmless and stored;
7. its record (eye, PatientID digest, pixel digest; ``identity.json``, no identifier) then the instance are
   written to the spool (fsync, atomic rename) before the caller acknowledges it; a resent instance identical
   to the one held is acknowledged without rewriting it (its arrival time stays); a failed write -> 0xA700.

The reasons name no identifier. Instances held without a record (a spool written before identity files) are
read back from their files under the lock for steps 5 and 6.
"""

from __future__ import annotations

from pathlib import Path

from models.outcome.decision import Eye
from service.pacs.intake import DATASET_DOES_NOT_MATCH, OUT_OF_RESOURCES, Accepted, Refused, check_instance
from service.pacs.store import HeldInstance, Spool, key_of, patient_digest

_EYE_NAME = {Eye.RIGHT: "right", Eye.LEFT: "left"}


def receive(data: bytes, spool: Spool, *, max_bytes: int, max_instances: int,
            study_uid: str | None = None) -> Accepted | Refused:
    """Store ``data`` or say why not (module docstring)."""
    verdict = check_instance(data)
    if isinstance(verdict, Refused):
        return verdict
    ids = (verdict.sop_instance_uid, verdict.sop_class_uid)
    if len(data) > max_bytes:
        return Refused(OUT_OF_RESOURCES, f"instance larger than {max_bytes} bytes (RADSCREEN_MAX_UPLOAD_BYTES)", *ids)
    if study_uid is not None and verdict.study_uid != study_uid:
        return Refused(DATASET_DOES_NOT_MATCH, "instance of another study than the URL's", *ids)
    with spool.study_lock(verdict.study_uid):
        return _admit(verdict, data, spool, max_instances)


def _admit(verdict: Accepted, data: bytes, spool: Spool, max_instances: int) -> Accepted | Refused:
    """Steps 4-7 of the module docstring; the caller holds the study's lock."""
    ids = (verdict.sop_instance_uid, verdict.sop_class_uid)
    held = _records(spool, verdict.study_uid)
    key = key_of(verdict.sop_instance_uid)
    if key not in held and len(held) >= max_instances:
        return Refused(OUT_OF_RESOURCES, f"the study already holds {len(held)} photographs "
                       "(RADSCREEN_MAX_EXAM_IMAGES)", *ids)
    patient = patient_digest(verdict.study_uid, verdict.patient_id)
    if any(record.patient not in (None, patient) for other, record in held.items() if other != key):
        return Refused(DATASET_DOES_NOT_MATCH, "the PatientID differs from that of the instances the study already "
                       "holds (an absent one counts as different): a study is one patient's visit", *ids)
    if verdict.pixel_sha256 is not None:
        for record in held.values():
            if record.eye is not verdict.eye and record.pixels == verdict.pixel_sha256:
                return Refused(DATASET_DOES_NOT_MATCH, f"the same photograph as the {_EYE_NAME[record.eye]} eye's "
                               "instance already held: one photograph cannot stand for both eyes", *ids)
    held[key] = HeldInstance(verdict.eye, patient, verdict.pixel_sha256)
    try:
        spool.record_identity(verdict.study_uid, held)
        spool.put_instance(verdict.study_uid, verdict.sop_instance_uid, verdict.eye, data)
    except OSError:  # the disk is full or gone: the sender keeps its copy and may retry
        return Refused(OUT_OF_RESOURCES, "not stored: the spool cannot be written", *ids)
    return verdict


def _records(spool: Spool, study_uid: str) -> dict[str, HeldInstance]:
    """The study's records, an instance held without one read back from its file."""
    records = spool.identity(study_uid)
    for key, path in spool.held_instances(study_uid).items():
        if key not in records:
            records[key] = _read_back(study_uid, path)
    return records


def _read_back(study_uid: str, path: Path) -> HeldInstance:
    eye = Eye.RIGHT if path.stem.endswith("-R") else Eye.LEFT
    try:
        verdict = check_instance(path.read_bytes())
    except OSError:  # unreadable (a disk error, or removed by hand): counted, not compared
        return HeldInstance(eye, None, None)
    if not isinstance(verdict, Accepted):  # received under older rules: counted, not compared
        return HeldInstance(eye, None, None)
    return HeldInstance(verdict.eye, patient_digest(study_uid, verdict.patient_id), verdict.pixel_sha256)
