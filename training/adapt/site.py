"""A programme's own graded photographs: its labels file, the quality gate's verdicts, and its patient split.

``LABELS.csv`` has an ``image`` column (a path relative to the image folder) and ``grade`` (0-4) or
``referable`` (0/1); where both are given, ``referable`` wins (a programme may refer for macular oedema at a low
DR grade). ``patient`` and ``eye`` are optional; every other column is ignored. A row that cannot be used (no
image, a missing or unreadable file, a grade outside 0-4, a second row for the same file) is counted with its
line number and reason and left out; a file without the required columns is refused whole.

Every photograph then meets the service's quality gate (``models.image.quality``) on the frame the service decodes
(``models.image.transform.ImageTransform.decode``): the eyes it refuses are counted, never trained or calibrated on,
because the service answers them ``retake_ungradable`` whatever the network says.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from models.image.quality import assess_quality
from models.image.transform import ImageTransform
from training.data.manifest import ManifestRow
from training.data.splits import assign_sides

GATE_FILE = "gate.json"


class AdaptError(ValueError):
    """A site's data or options that adaptation cannot use; the message is one line that says what to change."""


@dataclass(frozen=True)
class SiteEye:
    """One usable row of the labels file."""

    line: int  # the CSV line (the header is line 1)
    image: str  # as written in the CSV, relative to the image folder
    referable: bool
    grade: int | None
    patient: str
    eye: str | None

    def row(self, root: Path) -> ManifestRow:
        """The training data's row for this eye (its label kept as stated)."""
        grade = self.grade if self.grade is not None else (2 if self.referable else 0)
        return ManifestRow(path=root / self.image, grade=grade, patient_id=self.patient, eye=self.eye,
                           row_no=self.line, source="site", referable_label=self.referable)


@dataclass(frozen=True)
class SiteLabels:
    eyes: list[SiteEye]
    skipped: dict[str, list[int]]  # reason -> the CSV lines left out for it
    has_patients: bool

    def skipped_text(self) -> str:
        return "; ".join(f"{reason}: {len(lines)} (lines {_lines(lines)})" for reason, lines in self.skipped.items())


def read_site_labels(csv_path: Path, image_root: Path) -> SiteLabels:
    """The usable rows of ``csv_path`` (see the module docstring); AdaptError when the file cannot be used at all."""
    if not csv_path.is_file():
        raise AdaptError(f"{csv_path}: no such labels file")
    if not image_root.is_dir():
        raise AdaptError(f"{image_root}: no such image folder")
    try:
        with csv_path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            columns = {c.strip().lower(): c for c in reader.fieldnames or []}
            records = list(reader)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise AdaptError(f"{csv_path}: not a readable CSV file ({exc})") from None
    if "image" not in columns or not ({"grade", "referable"} & set(columns)):
        raise AdaptError(f"{csv_path}: needs an 'image' column and a 'grade' (0-4) or 'referable' (0/1) column; "
                         f"it has {sorted(columns) or 'none'}")
    skipped: dict[str, list[int]] = {}
    eyes: list[SiteEye] = []
    seen: set[str] = set()
    root = image_root.resolve()
    for line, record in enumerate(records, start=2):
        def cell(name: str, record: dict[str, Any] = record) -> str:
            return (record.get(columns[name]) or "").strip() if name in columns else ""
        image = cell("image")
        reason = _problem(image, cell("grade"), cell("referable"), root, seen)
        if reason is not None:
            skipped.setdefault(reason, []).append(line)
            continue
        seen.add(str((root / image).resolve()))
        grade = int(cell("grade")) if cell("grade") else None
        referable = cell("referable") == "1" if cell("referable") else bool(grade is not None and grade >= 2)
        eye = cell("eye").lower() or None
        eyes.append(SiteEye(line=line, image=image, referable=referable, grade=grade,
                            patient=cell("patient") or f"row-{line}", eye=eye))
    return SiteLabels(eyes, skipped, has_patients="patient" in columns)


def _problem(image: str, grade: str, referable: str, root: Path, seen: set[str]) -> str | None:
    if not image:
        return "no image"
    if grade and grade not in {"0", "1", "2", "3", "4"}:
        return "grade not 0-4"
    if referable and referable not in {"0", "1"}:
        return "referable not 0/1"
    if not grade and not referable:
        return "no label"
    path = (root / image).resolve()
    if not path.is_relative_to(root):
        return "image outside the image folder"
    if not path.is_file():
        return "missing file"
    if str(path) in seen:
        return "duplicate image"
    return None


def _lines(lines: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in lines[:5])
    return shown + (f", … {len(lines) - 5} more" if len(lines) > 5 else "")


def gate_verdicts(eyes: Sequence[SiteEye], root: Path, transform: ImageTransform, run_dir: Path, *,
                  progress: bool = True) -> dict[str, str]:
    """Image -> ``"gradable"``, the gate's first issue (``"blurred"``, ...) or ``"unreadable"``; kept in
    ``run_dir/gate.json`` so that a resumed run judges each photograph once."""
    path = run_dir / GATE_FILE
    known: dict[str, str] = json.loads(path.read_text()) if path.is_file() else {}
    todo = [e for e in eyes if e.image not in known]
    for i, eye in enumerate(tqdm(todo, desc="quality gate", unit="image", disable=not progress)):
        try:
            report = assess_quality(transform.decode(root / eye.image))
            known[eye.image] = "gradable" if report.gradable else report.issues[0]
        except Exception:  # a file the decoder refuses is what the service answers 422 for: counted, not used
            known[eye.image] = "unreadable"
        if (i + 1) % 50 == 0 or i + 1 == len(todo):
            _write_json(path, known)
    return known


def site_split(eyes: Sequence[SiteEye], calibration_share: float, seed: int) -> tuple[list[SiteEye], list[SiteEye]]:
    """(tuning eyes, calibration eyes): by patient, stratified by whether the patient has a referable eye, so
    both eyes of a patient land on one side (``training.data.splits.assign_sides``)."""
    if not 0 < calibration_share < 1:
        raise AdaptError(f"--calibration-share must lie in (0, 1), got {calibration_share}")
    rows = [e.row(Path(".")) for e in eyes]
    side = assign_sides(rows, (1 - calibration_share, calibration_share, 0.0), seed)
    return ([e for e, s in zip(eyes, side, strict=True) if s == 0],
            [e for e, s in zip(eyes, side, strict=True) if s == 1])


def needed_referable(miss_share: float) -> int:
    """Referable calibration eyes a miss-share bound needs: the promise is cross-fitted on halves of the patients,
    and a half resolves a share of ``miss_share`` only when it holds ``ceil(1 / miss_share)`` referable eyes
    (one miss among them is that share); so twice that."""
    return 2 * math.ceil(1 / miss_share - 1e-9)


def check_enough(eyes: Sequence[SiteEye], miss_share: float, what: str) -> None:
    """AdaptError naming the number needed when ``eyes`` are too few for the bound."""
    n_pos = sum(e.referable for e in eyes)
    n_neg = len(eyes) - n_pos
    need = needed_referable(miss_share)
    if n_pos < need:
        tightest = f"{1 / (n_pos // 2):.0%}" if n_pos >= 2 else "none"
        raise AdaptError(
            f"the {what} hold {n_pos} referable eyes; a miss-share bound of {miss_share:.0%} needs at least {need} "
            f"({need // 2} in each half the promise is cross-fitted on): add {need - n_pos} graded referable eyes, "
            f"or loosen --miss-share (the tightest these eyes resolve: {tightest})")
    if n_neg < 2:
        raise AdaptError(f"the {what} hold {n_neg} non-referable eyes; the operating point needs both kinds")


def describe(eyes: Sequence[SiteEye]) -> dict[str, Any]:
    """Counts only (no file names or patients): the card's and the record's description of the site's data."""
    grades = Counter(e.grade for e in eyes if e.grade is not None)
    return {"eyes": len(eyes), "patients": len({e.patient for e in eyes}),
            "referable": sum(e.referable for e in eyes),
            "grades": {str(g): grades[g] for g in sorted(grades)},
            "referable_by_label": sum(e.referable and (e.grade is None or e.grade < 2) for e in eyes)}


def eyes_record(eyes: Sequence[SiteEye]) -> list[dict[str, Any]]:
    return [asdict(e) for e in eyes]


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)


def indices(eyes: Sequence[SiteEye], subset: Sequence[SiteEye]) -> np.ndarray:
    where = {e.line: i for i, e in enumerate(eyes)}
    return np.asarray([where[e.line] for e in subset], dtype=np.int64)
