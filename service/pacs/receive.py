"""One received instance, by either network path: bounded, checked, then stored durably, or refused with its status.

:func:`receive` is what the STOW-RS route and the C-STORE receiver both do with each instance:

1. :func:`service.pacs.intake.check_instance` (SOP class, transfer syntax, UIDs, laterality; the header only);
2. larger than ``max_bytes`` (``RADSCREEN_MAX_UPLOAD_BYTES``, the limit of any photograph) -> 0xA700;
3. when the URL names a study (STOW-RS ``/studies/{study}``), an instance of another study -> 0xA900;
4. a study that already holds ``max_instances`` photographs (``RADSCREEN_MAX_EXAM_IMAGES``) gets no new one
   (0xA700): a visit is graded in one batch, so its size is bounded like ``POST /v1/exams``; a resent instance
   it already holds is stored again (the same file);
5. written to the spool (fsync, atomic rename) before the caller acknowledges it; a failed write -> 0xA700.
"""

from __future__ import annotations

from service.pacs.intake import DATASET_DOES_NOT_MATCH, OUT_OF_RESOURCES, Accepted, Refused, check_instance
from service.pacs.store import Spool


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
    held = spool.instances_of(verdict.study_uid)
    if len(held) >= max_instances and not spool.holds(verdict.study_uid, verdict.sop_instance_uid):
        return Refused(OUT_OF_RESOURCES, f"the study already holds {len(held)} photographs "
                       "(RADSCREEN_MAX_EXAM_IMAGES)", *ids)
    try:
        spool.put_instance(verdict.study_uid, verdict.sop_instance_uid, verdict.eye, data)
    except OSError:  # the disk is full or gone: the sender keeps its copy and may retry
        return Refused(OUT_OF_RESOURCES, "not stored: the spool cannot be written", *ids)
    return verdict
