"""Exams in the batch job (``--group-by``): the per-image rows of one patient visit -> one exam row.

Which photographs form one exam, and which eye each shows, comes from one of three sources:

- ``patient``: a CSV manifest's ``patient`` and ``eye`` columns (names: ``--patient-column``/``--eye-column``;
  eye values ``left``/``right``, also ``L``/``R``/``OS``/``OD``, any case);
- ``filename``: file names of the form ``{patient}_{left|right}`` (the EyePACS and ODIR convention,
  e.g. ``10_left.jpeg``), optionally followed by ``_<n>`` for several photographs of an eye; the exam is the
  file's folder and that patient (``siteA/10`` and ``siteB/10`` are two exams, whatever ``--id-column`` says);
- ``study``: DICOM files, grouped by StudyInstanceUID (the visit), the eye from ImageLaterality/Laterality; a
  StudyInstanceUID outside the DICOM UID grammar makes the file ``ungrouped`` (``service.screening.identifiers``).

An exam must also pass the identity rules of ``service.screening.identity``: a study whose files carry two PatientIDs
is a ``mixed-patients`` error row (never one exam of two patients), and the same photograph as both eyes a
``same-photograph-both-eyes`` error row: identical decoded pixels (``service.inference.prepare.pixel_digest``),
whatever the files' names, headers or metadata say (a DICOM file copied with another laterality, a JPEG with other
EXIF bytes). The per-image rows do not keep the digest, so for the exams with both eyes each photograph is read
again through the one reader and decoded again by the one decoder (:func:`photograph_hashes`). The exam CSV goes
through the one CSV rule (``models.io.csv_cells``), its ``image_ids`` cell stopping under a spreadsheet's cell limit
with a note (the per-image results carry every id).

Exam rows are derived at the end of the job from the assembled per-image rows (which the job commits
exactly once), so they are as exactly-once and resumable as those rows: a rerun derives the same exam rows
again. Each exam's outcome is :func:`models.outcome.decision.exam_decision` of its scored photographs. Nothing is a
silent gap: an exam with a photograph that failed (unreadable file, refused image) is an error row with no
outcome (the exam is not decided from part of its photographs; the error names the failed ones and any
scored photograph already ``refer_referable_dr``), and an image whose exam or eye cannot be told is an
``ungrouped`` error row of its own.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from models.io.atomic import atomic_write
from models.io.csv_cells import write_csv
from models.outcome.decision import EXAM_PRECEDENCE, Eye, ScreeningOutcome
from service.batch.inputs import InputError, InputItem, InputSource, RowError
from service.batch.manifest import read_manifest
from service.batch.rows import Row, error_kind
from service.screening.exam import ExamResult, exam_result
from service.screening.identifiers import UID_RULE, is_dicom_uid, normalised_uid
from service.screening.identity import cross_eye_duplicate, distinct

if TYPE_CHECKING:
    from service.inference.imaging import ImagePipeline

logger = logging.getLogger(__name__)

GroupBy = Literal["patient", "filename", "study"]
GROUP_BY_CHOICES: tuple[str, ...] = ("patient", "filename", "study")
FAILED = "failed"  # by-outcome key of exams not decided (a photograph failed, or ungrouped images)
UNGROUPED = "ungrouped"
PHOTOGRAPHS_FAILED = "photographs-failed"
MIXED_PATIENTS = "mixed-patients"  # a study whose DICOM files carry two PatientIDs
SAME_PHOTOGRAPH = "same-photograph-both-eyes"  # one photograph's pixels sent as both the right and the left eye
IMAGE_IDS_BUDGET = 32_000  # characters of the image_ids cell, under a spreadsheet's 32,767 per cell
EXAM_COLUMNS: tuple[str, ...] = (
    "exam_id", "outcome", "outcome_reason", "right_outcome", "left_outcome", "right_images", "left_images",
    "images", "failed_images", "image_ids", "model_sha256", "error",
)
_EYE_WORDS = {"left": Eye.LEFT, "l": Eye.LEFT, "os": Eye.LEFT, "right": Eye.RIGHT, "r": Eye.RIGHT, "od": Eye.RIGHT}
_FILENAME = re.compile(r"^(?P<patient>.+?)_(?P<eye>left|right)(?:_\d+)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Membership:
    """The exam and eye of one input row, or why they cannot be told; ``patient``: the DICOM PatientID of a
    ``study`` member (compared within the exam, never written)."""

    exam: str | None
    eye: Eye | None
    problem: str = ""
    patient: str | None = None


def _eye_word(value: str) -> Eye | None:
    return _EYE_WORDS.get(value.strip().lower())


def from_manifest(manifest: Path, items: Sequence[InputItem], *, patient_column: str, eye_column: str
                  ) -> dict[int, Membership]:
    """``--group-by patient``: the manifest's patient and eye cells of each row (by row index)."""
    if manifest.suffix.lower() != ".csv":
        raise InputError("--group-by patient reads a CSV manifest's patient and eye columns; the input is a folder "
                         "(use --group-by filename or study)")
    names, records = read_manifest(manifest)
    missing = [c for c in (patient_column, eye_column) if c not in names]
    if missing:
        raise InputError(f"manifest {manifest} has no {' or '.join(map(repr, missing))} column for --group-by "
                         f"patient (found: {', '.join(map(repr, names))}); name them with --patient-column / "
                         "--eye-column")
    out: dict[int, Membership] = {}
    for item in items:
        record = records[item.index].cells if item.index < len(records) else {}
        patient = str(record.get(patient_column) or "").strip()
        eye = _eye_word(str(record.get(eye_column) or ""))
        if not patient or eye is None:
            out[item.index] = Membership(None, None, f"no patient or no left/right eye in the {patient_column!r} / "
                                         f"{eye_column!r} cells")
        else:
            out[item.index] = Membership(patient, eye)
    return out


def _folder(path: str, root: Path | None) -> str:
    """The folder of ``path`` relative to ``root`` (POSIX, ``""`` for the root itself); absolute when outside."""
    parent = Path(path).parent
    if root is not None:
        relative = os.path.relpath(parent, root)
        if not relative.startswith(".."):
            parent = Path(relative)
    text = parent.as_posix()
    return "" if text == "." else text


def from_filenames(items: Sequence[InputItem], root: Path | None = None) -> dict[int, Membership]:
    """``--group-by filename``: ``{patient}_{left|right}[_n].ext``; the patient keeps the folder of its file
    (``siteA/10`` and ``siteB/10`` are two exams), relative to ``root`` (the input folder or image root),
    whatever the row's id (``--id-column``)."""
    out: dict[int, Membership] = {}
    for item in items:
        name = Path(item.path)
        match = _FILENAME.match(name.stem)
        if match is None:
            out[item.index] = Membership(None, None, "the file name is not {patient}_{left|right}")
            continue
        folder = _folder(item.path, root)
        patient = f"{folder}/{match['patient']}" if folder else match["patient"]
        out[item.index] = Membership(patient, Eye(match["eye"].lower()))
    return out


def from_dicom_studies(items: Sequence[InputItem], max_bytes: int) -> dict[int, Membership]:
    """``--group-by study``: StudyInstanceUID and laterality from each DICOM header, read through the job's one
    reader (``service.batch.reading``: regular files only, ``max_bytes`` by ``stat``, the header's bytes only)."""
    from service.batch.reading import read_input_file
    from service.inference.dicom import is_dicom, read_dicom_tags
    from service.inference.dicom_header import HEADER_READ_BYTES
    from service.inference.imaging import ImageRejected

    out: dict[int, Membership] = {}
    for item in items:
        data = read_input_file(str(item.file), max_bytes, head=HEADER_READ_BYTES) if item.file is not None else b""
        if isinstance(data, RowError):
            out[item.index] = Membership(None, None, data.text())
            continue
        if not is_dicom(data):
            out[item.index] = Membership(None, None, "not a DICOM file: no StudyInstanceUID to group by")
            continue
        try:
            tags = read_dicom_tags(data)
        except ImageRejected as exc:
            out[item.index] = Membership(None, None, exc.detail)
            continue
        study = normalised_uid(tags.study_uid)
        if study is None or tags.laterality is None:
            out[item.index] = Membership(None, None, "the DICOM header lacks StudyInstanceUID or a R/L laterality")
        elif not is_dicom_uid(study):
            out[item.index] = Membership(None, None, f"the DICOM StudyInstanceUID is not valid ({UID_RULE})")
        else:
            out[item.index] = Membership(study, tags.laterality, patient=tags.patient_id)
    return out


def memberships(source: InputSource, input_path: Path, group_by: GroupBy, *, patient_column: str = "patient",
                eye_column: str = "eye", image_root: Path | None = None, max_bytes: int) -> dict[int, Membership]:
    """Each input row's exam and eye, by row index (module docstring). ``image_root``: a manifest's image root
    (default: its folder), which the folders of ``filename`` exams are named from; ``max_bytes``: the job's upload
    limit (``study`` reads each file's header through the one reader)."""
    if group_by == "patient":
        return from_manifest(input_path, source.items, patient_column=patient_column, eye_column=eye_column)
    if group_by == "filename":
        root = input_path if input_path.is_dir() else (image_root or input_path.parent)
        return from_filenames(source.items, root)
    if group_by == "study":
        return from_dicom_studies(source.items, max_bytes)
    raise ValueError(f"unknown --group-by {group_by!r}; expected one of: {', '.join(GROUP_BY_CHOICES)}")


@dataclass
class _Exam:
    exam_id: str
    photographs: list[tuple[Eye, Row]] = field(default_factory=list)
    patients: list[str | None] = field(default_factory=list)
    indexes: list[int] = field(default_factory=list)


def _undecided(exam: _Exam, failed: int, sha: str, error: str) -> Row:
    """The row of an exam with no outcome: its counts, its image ids and why it is not decided."""
    return {
        "exam_id": exam.exam_id, "outcome": None, "outcome_reason": None, "right_outcome": None, "left_outcome": None,
        "right_images": sum(1 for e, _ in exam.photographs if e is Eye.RIGHT),
        "left_images": sum(1 for e, _ in exam.photographs if e is Eye.LEFT),
        "images": len(exam.photographs), "failed_images": failed,
        "image_ids": [str(r["id"]) for _, r in exam.photographs], "model_sha256": sha, "error": error,
    }


def _failed_exam(exam: _Exam, failed: list[Row], sha: str) -> Row:
    referable = sum(1 for _, r in exam.photographs if r.get("outcome") == ScreeningOutcome.REFER_REFERABLE_DR.value)
    note = f"; {referable} scored photograph(s) already refer_referable_dr" if referable else ""
    return _undecided(exam, len(failed), sha,
                      f"{PHOTOGRAPHS_FAILED}: {len(failed)} of {len(exam.photographs)} photographs not scored "
                      f"({', '.join(str(r['id']) for r in failed)}); the exam is not decided{note}")


def _identity_error(exam: _Exam, hashes: Mapping[int, str]) -> str | None:
    """Why the exam's photographs cannot be one patient's visit (``service.screening.identity``), or ``None``."""
    patients = distinct(exam.patients)
    if len(patients) > 1:
        return (f"{MIXED_PATIENTS}: the study's DICOM files carry {len(patients)} different PatientIDs (an absent "
                "one counts); they are not merged into one exam and the exam is not decided")
    pair = cross_eye_duplicate((str(row["id"]), eye, hashes[index])
                               for (eye, row), index in zip(exam.photographs, exam.indexes, strict=True)
                               if index in hashes)
    if pair is not None:
        return (f"{SAME_PHOTOGRAPH}: {pair[0]} (right eye) and {pair[1]} (left eye) are the same photograph "
                "(identical decoded pixels); one photograph cannot stand for both eyes, the exam is not decided")
    return None


def _exams(items: Sequence[InputItem], groups: Mapping[int, Membership]) -> dict[str, list[int]]:
    """Row indexes of each grouped exam, in order of first appearance."""
    out: dict[str, list[int]] = {}
    for item in items:
        member = groups[item.index]
        if member.exam is not None and member.eye is not None:
            out.setdefault(member.exam, []).append(item.index)
    return out


def photograph_hashes(items: Sequence[InputItem], groups: Mapping[int, Membership], pipeline: ImagePipeline
                      ) -> dict[int, str]:
    """The pixel digest (``service.inference.prepare.pixel_digest``) of each photograph of an exam that has both
    eyes (row index -> hex): read through the one reader (``service.batch.reading``) and decoded by the one
    decoder (``service.inference.dicom.decode_photograph``) under ``pipeline``'s limits, model size and decode
    deadline, as ``prepare_image`` decoded it for its row. A file that cannot be read or decoded has no digest
    (its row is already an error, and its exam not decided). Only exams with both eyes are decoded: a duplicate
    across eyes needs two."""
    from service.batch.reading import read_input_file
    from service.inference.decode_deadline import DecodeDeadline
    from service.inference.dicom import decode_photograph
    from service.inference.imaging import ImageRejected
    from service.inference.prepare import pixel_digest

    by_index = {item.index: item for item in items}
    out: dict[int, str] = {}
    for indexes in _exams(items, groups).values():
        if len({groups[i].eye for i in indexes}) < 2:
            continue
        for index in indexes:
            file = by_index[index].file
            data = read_input_file(str(file), pipeline.max_bytes) if file is not None else None
            if not isinstance(data, bytes):
                continue
            try:
                rgb = decode_photograph(data, max_pixels=pipeline.max_pixels, max_bytes=pipeline.max_bytes,
                                        size=pipeline.size, deadline=DecodeDeadline(pipeline.decode_timeout_s))
            except ImageRejected:
                continue
            except Exception as exc:  # a bad image must not end a long job; its row already says what happened
                logger.warning("unexpected %s while decoding a photograph for the exam rules; it is not compared",
                               type(exc).__name__)
                continue
            out[index] = pixel_digest(rgb)
    return out


def exam_rows(rows: Iterable[Row], items: Sequence[InputItem], groups: Mapping[int, Membership], sha: str,
              hashes: Mapping[int, str] | None = None) -> list[Row]:
    """One row per exam (in order of first appearance), then one ``ungrouped`` error row per ungroupable image.

    ``rows`` are the assembled per-image rows, in the order of ``items``; ``hashes``: the photographs' content
    digests by row index (:func:`photograph_hashes`: decoded pixels), for the same-photograph-as-both-eyes check.
    """
    exams: dict[str, _Exam] = {}
    ungrouped: list[Row] = []
    for item, row in zip(items, rows, strict=True):
        member = groups[item.index]
        if member.exam is None or member.eye is None:
            ungrouped.append({**dict.fromkeys(EXAM_COLUMNS), "exam_id": "", "images": 1, "failed_images": 0,
                              "image_ids": [str(row["id"])], "model_sha256": sha,
                              "error": f"{UNGROUPED}: {row['id']}: {member.problem}"})
            continue
        exam = exams.setdefault(member.exam, _Exam(member.exam))
        exam.photographs.append((member.eye, row))
        exam.patients.append(member.patient)
        exam.indexes.append(item.index)
    out: list[Row] = []
    for exam in exams.values():
        failed = [r for _, r in exam.photographs if error_kind(r) is not None]
        if failed:
            out.append(_failed_exam(exam, failed, sha))
            continue
        problem = _identity_error(exam, hashes or {})
        if problem is not None:
            out.append(_undecided(exam, 0, sha, problem))
            continue
        result = exam_result((eye, ScreeningOutcome(str(r["outcome"]))) for eye, r in exam.photographs)
        out.append(exam_row(exam, result, sha))
    return out + ungrouped


def exam_row(exam: _Exam, result: ExamResult, sha: str) -> Row:
    """The CSV row of a decided exam: the typed result's outcome, reason and eyes, and its photographs."""
    right, left = result.eyes[Eye.RIGHT], result.eyes[Eye.LEFT]
    return {
        "exam_id": exam.exam_id, "outcome": result.outcome.value, "outcome_reason": result.reason,
        "right_outcome": right.outcome.value, "left_outcome": left.outcome.value,
        "right_images": right.photographs, "left_images": left.photographs,
        "images": len(exam.photographs), "failed_images": 0,
        "image_ids": [str(r["id"]) for _, r in exam.photographs], "model_sha256": sha, "error": "",
    }


def exam_of_row(row: Row) -> ExamResult:
    """The typed result a decided exam row states (the CSV read back); ``ValueError`` for an undecided row."""
    if not row.get("outcome"):
        raise ValueError(f"exam {row.get('exam_id')!r} is not decided: {row.get('error')}")
    return ExamResult.from_fields({
        "outcome": row["outcome"], "outcome_reason": row["outcome_reason"],
        "eyes": {eye.value: {"outcome": row[f"{eye.value}_outcome"], "photographs": row[f"{eye.value}_images"]}
                 for eye in Eye},
    })


def exams_path_for(output: Path) -> Path:
    """The exam rows beside the results: ``results.parquet`` -> ``results.exams.csv``."""
    return output.with_name(f"{output.stem}.exams.csv")


def joined_ids(ids: Sequence[str], budget: int = IMAGE_IDS_BUDGET) -> str:
    """Image ids joined by ``;``, at most ``budget`` characters: a longer list stops at a whole id and says how
    many more there are and where they are (the per-image results, whose rows carry every id)."""
    text = ";".join(ids)
    if len(text) <= budget:
        return text
    kept: list[str] = []
    used = 0
    for image_id in ids:
        if used + len(image_id) + 1 > budget - 80:  # room for the note
            break
        kept.append(image_id)
        used += len(image_id) + 1
    return ";".join(kept) + f";... and {len(ids) - len(kept)} more (every id is in the per-image results)"


def write_exams(path: Path, rows: Sequence[Row]) -> None:
    """Write the exam rows as CSV, atomically, through the one CSV rule (``models.io.csv_cells``): image ids
    joined by ``;`` (:func:`joined_ids`), empty cells for None, no cell over a spreadsheet's limit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as tmp, tmp.open("w", encoding="utf-8", newline="") as fh:
        write_csv(fh, EXAM_COLUMNS, ([joined_ids(row[c]) if c == "image_ids" and row.get(c) is not None
                                     else row.get(c) for c in EXAM_COLUMNS] for row in rows))


def exam_summary(rows: Sequence[Row]) -> dict[str, Any]:
    """Exams by outcome (``failed``: not decided), and photographs per exam."""
    by_outcome = Counter(str(r["outcome"]) if r.get("outcome") else FAILED for r in rows)
    images = [int(r["images"]) for r in rows if not str(r.get("error") or "").startswith(UNGROUPED)]
    keys = [o.value for o in EXAM_PRECEDENCE] + [FAILED]
    return {
        "count": len(rows),
        "by_outcome": {k: by_outcome.get(k, 0) for k in keys},
        "ungrouped_images": sum(1 for r in rows if str(r.get("error") or "").startswith(UNGROUPED)),
        "images_per_exam": {"mean": sum(images) / len(images), "max": max(images)} if images else None,
    }
