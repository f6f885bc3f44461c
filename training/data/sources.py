"""A manifest of several sources: the eyes of ODIR-5K and EyePACS in one CSV, each row naming its ``source``.

The training data of a model that must work on more than one screening programme. Each row keeps the
programme it comes from (``source``: ``odir`` or ``eyepacs``, a plain string column), its patient number
*within that source* (the two programmes number their patients independently: a patient is the pair
(source, patient_id)), and, for EyePACS, which public copy the photograph comes from (``copy``):

- ``natural-1024``: the original camera photographs (natural colour, camera frame), 384 px here;
- ``stretched-256``: a copy squashed to 256x256 with every channel contrast-stretched (false colour, no field
  geometry). Whether it helps a model of real cameras is a measurement, so the manifest keeps it and a
  recipe decides: ``TrainConfig.exclude_copies`` drops it, ``TrainConfig.train_only_copies`` keeps it for
  training only (validation and test then hold natural photographs alone). The patient split is made
  before either filter, so every recipe has the same validation and test patients.

Grades: ODIR's are mapped from clinical keywords (its README); EyePACS's are the programme's own 0-4 grades.
The target is the standard one for both: **referable DR = grade >= 2** (moderate non-proliferative DR or
worse). The CSV reads back with ``read_manifest`` (``--layout manifest``); image paths under the CSV's folder
are stored relative to it (the manifest moves with the data), others absolute.

Example::

    rows = build_sources_manifest(odir=Path("../shared/data/odir-5k"), eyepacs=Path("../shared/data/eyepacs-5k"))
    write_sources_manifest(rows, Path("/root/radscreen-cache/manifests/odir-eyepacs.csv"))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from models.io.csv_cells import write_csv
from training.data.manifest import Manifest, ManifestError, ManifestRow, _Layout, _read, read_odir

ODIR, EYEPACS = "odir", "eyepacs"
SOURCES: tuple[str, ...] = (ODIR, EYEPACS)
NATURAL_COPY, STRETCHED_COPY = "natural-1024", "stretched-256"
EYEPACS_COPIES: tuple[str, ...] = (NATURAL_COPY, STRETCHED_COPY)
COLUMNS: tuple[str, ...] = ("path", "grade", "patient_id", "eye", "source", "copy", "category")


def read_eyepacs_labels(csv_path: Path, *, verify_images: bool = True) -> Manifest:
    """The shared EyePACS folder's ``labels.csv`` (``image,patient,eye,dr_grade,referable,copy``; images in
    ``images/``): the programme's own grades, the patient and eye columns, and the copy of each photograph."""
    csv_path = Path(csv_path)

    def identify(name: str, record: dict[str, str]) -> tuple[str, str | None]:
        eye = record["eye"].strip().lower() or None
        if eye not in (None, "left", "right"):
            raise ManifestError.at(csv_path, None, f"eye must be left or right, got {eye!r} ({name})")
        return record["patient"].strip(), eye

    layout = _Layout("image", "dr_grade", None, identify, required=("patient", "eye", "copy"), optional=("copy",))
    rows = _read(csv_path, csv_path.parent / "images", layout, on_error="raise", verify_images=verify_images)
    unknown = sorted({row.copy or "" for row in rows} - set(EYEPACS_COPIES))
    if unknown:
        raise ManifestError.at(csv_path, None, f"unknown copy {unknown} (expected {', '.join(EYEPACS_COPIES)})")
    return Manifest([replace(row, source=EYEPACS) for row in rows], source=rows.source, skipped=rows.skipped)


def build_sources_manifest(*, odir: Path | None = None, eyepacs: Path | None = None,
                           include_other_disease: bool = True, verify_images: bool = True) -> list[ManifestRow]:
    """Every eye of the given sources' folders (each holding its ``labels.csv``), ODIR first, in CSV order,
    with ``source`` set. ODIR's other-disease eyes are kept as non-referable unless ``include_other_disease``
    is False (as ``--layout odir``)."""
    rows: list[ManifestRow] = []
    if odir is not None:
        part = read_odir(Path(odir) / "labels.csv", include_other_disease=include_other_disease,
                         verify_images=verify_images)
        rows += [replace(row, source=ODIR) for row in part]
    if eyepacs is not None:
        rows += list(read_eyepacs_labels(Path(eyepacs) / "labels.csv", verify_images=verify_images))
    if not rows:
        raise ValueError("build_sources_manifest: name at least one source folder (odir, eyepacs)")
    return rows


def write_sources_manifest(rows: Sequence[ManifestRow], path: Path) -> Path:
    """Write ``rows`` as a ``--layout manifest`` CSV with the columns of :data:`COLUMNS` (image paths relative to
    the CSV's folder when they lie under it, else absolute); atomic, so a reader never sees half a manifest."""
    from models.io.atomic import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = path.parent.resolve()

    def stored(row: ManifestRow) -> str:
        image = Path(row.path).resolve()
        return (image.relative_to(folder) if image.is_relative_to(folder) else image).as_posix()

    with atomic_write(path) as tmp, Path(tmp).open("w", newline="", encoding="utf-8") as f:  # the one CSV rule
        write_csv(f, COLUMNS, ([stored(row), row.grade, row.patient_id, row.eye or "", row.source or "",
                                row.copy or "", row.category or ""] for row in rows))
    return path


def source_counts(rows: Sequence[ManifestRow]) -> dict[str, dict[str, int]]:
    """Per source (and ``source/copy`` where a source has copies): eyes, patients and referable eyes."""
    groups: dict[str, list[ManifestRow]] = {}
    for row in rows:
        groups.setdefault(row.source or "unnamed", []).append(row)
        if row.copy:
            groups.setdefault(f"{row.source or 'unnamed'}/{row.copy}", []).append(row)
    return {name: {"eyes": len(part), "patients": len({r.patient_id for r in part}),
                   "referable": sum(r.referable for r in part)} for name, part in sorted(groups.items())}


def keep_copies(rows: Sequence[ManifestRow], exclude: Sequence[str]) -> list[ManifestRow]:
    """``rows`` without those whose ``copy`` is in ``exclude`` (order kept)."""
    dropped = set(exclude)
    return [row for row in rows if row.copy not in dropped]


def describe_counts(rows: Sequence[ManifestRow]) -> str:
    """One line: eyes and referable eyes per source, e.g. ``odir 6340 eyes (1132 referable); eyepacs ...``."""
    counts = Counter(row.source or "unnamed" for row in rows)
    referable = Counter(row.source or "unnamed" for row in rows if row.referable)
    return "; ".join(f"{name} {n} eyes ({referable[name]} referable)" for name, n in sorted(counts.items()))
