"""Read image manifests (EyePACS, APTOS, synthetic, generic CSV) into typed rows, validated up front.

Every problem is found when the manifest is read, not deep inside a DataLoader worker, and is
reported with the CSV file, its line number and what is wrong. With ``on_error="skip"`` bad rows are
left out but counted: ``Manifest.skipped`` lists each one with its reason, and a warning logs the
counts per reason (never the image names: they are patient identifiers in real data sets).

Example::

    rows = read_eyepacs(Path("eyepacs/trainLabels.csv"), Path("eyepacs/train"), ext="jpeg")
    rows = read_aptos(Path("aptos/train.csv"), Path("aptos/train_images"), on_error="skip")
    print(len(rows), len(rows.skipped))
"""

from __future__ import annotations

import csv
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from PIL import Image

logger = logging.getLogger(__name__)

OnError = Literal["raise", "skip"]
_EYEPACS_NAME = re.compile(r"^(?P<patient>.+)_(?P<eye>left|right)$")


class ManifestError(ValueError):
    """A manifest problem; the message names the CSV file, the line and what is wrong."""

    def __init__(
        self, message: str, *, csv_path: Path | None = None, line: int | None = None, reason: str = "invalid"
    ) -> None:
        super().__init__(message)
        self.csv_path = csv_path
        self.line = line
        self.reason = reason

    @classmethod
    def at(cls, csv_path: Path, line: int | None, problem: str, reason: str = "invalid") -> ManifestError:
        where = f"{csv_path}" if line is None else f"{csv_path}, line {line}"
        return cls(f"{where}: {problem}", csv_path=csv_path, line=line, reason=reason)


@dataclass(frozen=True)
class ManifestRow:
    """One labelled image. ``row_no`` is the line of the CSV it came from (the header is line 1)."""

    path: Path
    grade: int  # DR grade 0-4 (EyePACS / ICDR scale)
    patient_id: str
    eye: str | None  # "left" | "right" | None when the layout does not say
    row_no: int
    gradable: bool = True
    category: str | None = None  # the data set's own category (ODIR: normal_fundus, dr_keyword, other_non_dr)
    source: str | None = None  # the programme the eye comes from (multi-source manifests: "odir", "eyepacs")
    copy: str | None = None  # which copy of that source's images (EyePACS: "natural-1024", "stretched-256")
    # the label where a programme states it (a "referable" column, which may carry macular oedema); None: the grade's
    referable_label: bool | None = None

    @property
    def referable(self) -> bool:
        """The binary target: the stated label where there is one, else referable DR is grade >= 2."""
        return self.grade >= 2 if self.referable_label is None else self.referable_label


@dataclass(frozen=True)
class SkippedRow:
    """A row left out in ``on_error="skip"`` mode, and why."""

    line: int | None
    reason: str  # short code: bad_grade, missing_file, unreadable_image, duplicate, ...
    message: str


class Manifest(list[ManifestRow]):
    """The rows of one manifest file (a plain list of ``ManifestRow``) plus what was skipped reading it."""

    def __init__(self, rows: list[ManifestRow], *, source: Path, skipped: list[SkippedRow] | None = None) -> None:
        super().__init__(rows)
        self.source = source
        self.skipped: list[SkippedRow] = skipped or []


@dataclass(frozen=True)
class _Layout:
    image_column: str
    grade_column: str
    ext: str | None  # appended to the image column when it has no suffix
    identify: Callable[[str, dict[str, str]], tuple[str, str | None]]  # (image name, record) -> (patient, eye)
    required: tuple[str, ...] = field(default=())
    category_column: str | None = None  # copied into ManifestRow.category when set
    optional: tuple[str, ...] = ()  # copied into the ManifestRow field of the same name when the CSV has them


def _verify_image(path: Path) -> str | None:
    """None when the file opens as an image (header and structure checked), else the reason."""
    try:
        with Image.open(path) as im:
            im.verify()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _read(
    csv_path: Path, image_dir: Path | None, layout: _Layout, *, on_error: OnError, verify_images: bool
) -> Manifest:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    csv_path = Path(csv_path)
    if not csv_path.is_file():
        raise ManifestError.at(csv_path, None, "manifest file not found", reason="missing_manifest")
    root = Path(image_dir) if image_dir is not None else csv_path.parent
    rows: list[ManifestRow] = []
    skipped: list[SkippedRow] = []
    first_seen: dict[str, int] = {}

    def bad(line: int, problem: str, reason: str) -> None:
        err = ManifestError.at(csv_path, line, problem, reason)
        if on_error == "raise":
            raise err
        skipped.append(SkippedRow(line, reason, str(err)))

    with csv_path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        for column in (layout.image_column, layout.grade_column, *layout.required):
            if column not in header:
                raise ManifestError.at(
                    csv_path,
                    1,
                    f"missing column {column!r} (found: {', '.join(header) or 'none'})",
                    reason="missing_column",
                )
        for record in reader:
            line = reader.line_num
            if None in record or any(v is None for v in record.values()):
                bad(line, f"row has a different number of fields than the header ({len(header)})", "bad_row")
                continue
            name = record[layout.image_column].strip()
            raw_grade = record[layout.grade_column].strip()
            if not name:
                bad(line, f"empty {layout.image_column!r}", "bad_row")
                continue
            try:
                grade = int(raw_grade)
            except ValueError:
                bad(line, f"grade {raw_grade!r} in column {layout.grade_column!r} is not an integer", "bad_grade")
                continue
            if not 0 <= grade <= 4:
                bad(line, f"grade {grade} in column {layout.grade_column!r} is outside 0-4", "bad_grade")
                continue
            if name in first_seen:
                bad(line, f"duplicate image {name!r} (first listed on line {first_seen[name]})", "duplicate")
                continue
            first_seen[name] = line
            filename = name if layout.ext is None or Path(name).suffix else f"{name}.{layout.ext}"
            path = root / filename
            if not path.is_file():
                bad(line, f"image file not found: {path}", "missing_file")
                continue
            if verify_images and (why := _verify_image(path)) is not None:
                bad(line, f"cannot read image {path}: {why}", "unreadable_image")
                continue
            patient, eye = layout.identify(name, record)
            category = None
            if layout.category_column is not None:
                category = record[layout.category_column].strip() or None
            extra = {column: (record.get(column) or "").strip() or None for column in layout.optional}
            rows.append(ManifestRow(path=path, grade=grade, patient_id=patient, eye=eye, row_no=line,
                                    category=extra.get("category", category), source=extra.get("source"),
                                    copy=extra.get("copy")))
    if skipped:
        reasons = Counter(s.reason for s in skipped)
        logger.warning(
            "%s: skipped %d of %d rows (%s)",
            csv_path.name,
            len(skipped),
            len(skipped) + len(rows),
            ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items())),
        )
    return Manifest(rows, source=csv_path, skipped=skipped)


def eyepacs_identity(name: str, record: dict[str, str] | None = None) -> tuple[str, str | None]:
    """Patient id and eye from an EyePACS image name ``<patient>_<left|right>``; other names: own patient."""
    match = _EYEPACS_NAME.match(Path(name).stem if Path(name).suffix in {".jpeg", ".jpg", ".png"} else name)
    if match is None:
        return name, None
    return match["patient"], match["eye"]


def read_eyepacs(
    csv_path: Path,
    image_dir: Path | None = None,
    *,
    ext: str = "jpeg",
    on_error: OnError = "raise",
    verify_images: bool = True,
) -> Manifest:
    """Kaggle/EyePACS ``trainLabels.csv`` (``image,level``), images ``<image_dir>/<image>.<ext>``.

    The patient id and eye come from the ``<patient>_<left|right>`` image name, so both eyes of a
    patient stay in the same split. ``image_dir`` defaults to the CSV's folder.
    """
    layout = _Layout("image", "level", ext.lstrip("."), eyepacs_identity)
    return _read(csv_path, image_dir, layout, on_error=on_error, verify_images=verify_images)


def read_aptos(
    csv_path: Path,
    image_dir: Path | None = None,
    *,
    ext: str = "png",
    on_error: OnError = "raise",
    verify_images: bool = True,
) -> Manifest:
    """APTOS 2019 ``train.csv`` (``id_code,diagnosis``), images ``<image_dir>/<id_code>.png``.

    APTOS has no patient ids: each image is its own group (its ``id_code`` is the patient id).
    """
    layout = _Layout("id_code", "diagnosis", ext.lstrip("."), lambda name, _record: (name, None))
    return _read(csv_path, image_dir, layout, on_error=on_error, verify_images=verify_images)


def read_manifest(
    csv_path: Path,
    image_dir: Path | None = None,
    *,
    path_column: str = "path",
    grade_column: str = "grade",
    patient_column: str = "patient_id",
    eye_column: str = "eye",
    on_error: OnError = "raise",
    verify_images: bool = True,
) -> Manifest:
    """Any CSV with an image path and a grade column; patient id and eye columns are used when present.

    Paths are relative to ``image_dir`` (default: the CSV's folder) unless absolute. Without a patient
    column, each image is its own patient. Optional ``source``, ``copy`` and ``category`` columns (a
    multi-source manifest, ``training.data.sources``) are kept on each row; a patient id is unique within
    its source, so the splits are made per source (``training.data.splits.split_by_source``).
    """

    def identify(name: str, record: dict[str, str]) -> tuple[str, str | None]:
        patient = (record.get(patient_column) or "").strip() or name
        eye = (record.get(eye_column) or "").strip() or None
        return patient, eye

    layout = _Layout(path_column, grade_column, None, identify, optional=("source", "copy", "category"))
    return _read(csv_path, image_dir, layout, on_error=on_error, verify_images=verify_images)


ODIR_CATEGORIES: tuple[str, ...] = ("normal_fundus", "dr_keyword", "other_non_dr")
OTHER_DISEASE = "other_non_dr"


def read_odir(
    csv_path: Path,
    image_dir: Path | None = None,
    *,
    include_other_disease: bool = True,
    on_error: OnError = "raise",
    verify_images: bool = True,
) -> Manifest:
    """ODIR-5K with per-eye DR grades (``labels.csv``: ``image,patient,eye,dr_grade,referable,category,...``).

    ``image`` is relative to ``image_dir`` (default: the CSV's folder); ``patient`` and ``eye`` come from
    their own columns, so both eyes of a patient stay in one split. Eyes with another eye disease and no
    DR (``category`` ``other_non_dr``: cataract, glaucoma, AMD, ...) are grade 0: they are part of a real
    screening population and are kept by default; ``include_other_disease=False`` leaves them out (not
    counted as skipped: they are valid rows, left out by request).
    """

    def identify(name: str, record: dict[str, str]) -> tuple[str, str | None]:
        eye = record["eye"].strip().lower() or None
        if eye not in (None, "left", "right"):
            raise ManifestError.at(Path(csv_path), None, f"eye must be left or right, got {eye!r} ({name})")
        return record["patient"].strip(), eye

    layout = _Layout("image", "dr_grade", None, identify, required=("patient", "eye", "category"),
                     category_column="category")
    rows = _read(csv_path, image_dir, layout, on_error=on_error, verify_images=verify_images)
    if include_other_disease:
        return rows
    kept = [row for row in rows if row.category != OTHER_DISEASE]
    return Manifest(kept, source=rows.source, skipped=rows.skipped)


def read_synthetic(
    root: Path, *, on_error: OnError = "raise", verify_images: bool = True, gradable_only: bool = False
) -> Manifest:
    """A data set written by ``training.synthetic.generate_dataset`` (EyePACS layout + ``metadata.csv``).

    ``metadata.csv``'s ``gradable`` column marks ungradable images; ``gradable_only`` drops them
    (they are not counted as skipped: they are valid rows, left out by request).
    """
    root = Path(root)
    ext = "jpeg"
    info = root / "dataset.json"
    if info.is_file():
        ext = str(json.loads(info.read_text()).get("image_format", ext))
    rows = read_eyepacs(
        root / "trainLabels.csv", root / "train", ext=ext, on_error=on_error, verify_images=verify_images
    )
    meta_path = root / "metadata.csv"
    if not meta_path.is_file():
        return rows
    gradable: dict[str, bool] = {}
    with meta_path.open(newline="") as f:
        reader = csv.DictReader(f)
        for column in ("image", "gradable"):
            if column not in (reader.fieldnames or []):
                raise ManifestError.at(meta_path, 1, f"missing column {column!r}", reason="missing_column")
        for record in reader:
            value = (record["gradable"] or "").strip()
            if value not in ("0", "1"):
                raise ManifestError.at(meta_path, reader.line_num, f"gradable must be 0 or 1, got {value!r}")
            gradable[record["image"]] = value == "1"
    out = []
    for row in rows:
        flag = gradable.get(row.path.stem, True)
        if gradable_only and not flag:
            continue
        out.append(ManifestRow(row.path, row.grade, row.patient_id, row.eye, row.row_no, flag))
    return Manifest(out, source=rows.source, skipped=rows.skipped)
