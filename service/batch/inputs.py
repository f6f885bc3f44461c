"""Input discovery for the batch job: a folder of images or a CSV manifest, with hygiene checks.

Every input row becomes exactly one :class:`InputItem`. Rows that cannot be scored for a reason known
before any file is read (a duplicate id, a path escaping the input root, an empty path cell) carry an
``error`` and turn into error rows in the output; nothing is silently dropped. Problems that make the
whole input unusable (missing folder, missing manifest columns) raise :class:`InputError` with a message
that names the file and what was expected.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.batch.manifest import read_manifest

# Lower-case suffixes treated as images when scanning a folder (and tried for extension-less
# manifest entries, e.g. the EyePACS ``image`` column "10_left" for ``10_left.jpeg``).
IMAGE_EXTENSIONS: tuple[str, ...] = (".jpeg", ".jpg", ".png", ".tif", ".tiff", ".bmp", ".webp", ".dcm")
DEFAULT_PATH_COLUMNS: tuple[str, ...] = ("image", "path")

# Stable error kinds for rows rejected before reading (also used as summary keys).
DUPLICATE_ID = "duplicate-id"
PATH_OUTSIDE_ROOT = "path-outside-input-root"
MISSING_PATH = "missing-path"
MALFORMED_ROW = "malformed-csv-row"  # an unbalanced quote or an unquoted comma: the row cannot be trusted
NOT_AN_IMAGE = "not-an-image"
UNRESOLVABLE_PATH = "unresolvable-path"  # a symlink loop (or a chain too long to follow)


class InputError(Exception):
    """The input as a whole cannot be used (missing folder/manifest, missing columns, ...)."""


@dataclass(frozen=True)
class RowError:
    """Why one input row will not be scored: a stable kind and a human detail."""

    kind: str
    detail: str

    def text(self) -> str:
        """The ``error`` column value: ``"<kind>: <detail>"``."""
        return f"{self.kind}: {self.detail}"


@dataclass(frozen=True)
class InputItem:
    """One input row: its id (unique among scorable rows), its path, and where to read it.

    ``path`` is the file that was read (manifest entries resolved against the image root) or, for rows
    rejected before reading, the value as written; ``file`` is ``None`` exactly for those rows.
    """

    index: int
    id: str
    path: str
    file: Path | None
    error: RowError | None = None


@dataclass(frozen=True)
class InputSource:
    """A described input: what it is (for the job's resume metadata) and its items in input order."""

    description: str
    items: list[InputItem]


def _containment(root: Path, file: Path, outside: str) -> RowError | None:
    """``None`` when ``file`` (after resolving symlinks and ``..``) lies under ``root`` (already
    resolved); else the error row: ``outside`` as the detail, or a symlink loop that cannot be resolved."""
    try:
        file.resolve().relative_to(root)
    except ValueError:
        return RowError(PATH_OUTSIDE_ROOT, outside)
    except (RuntimeError, OSError) as exc:  # RuntimeError("Symlink loop ...") up to Python 3.12, ELOOP after
        return RowError(UNRESOLVABLE_PATH, f"the path cannot be resolved (a symlink loop?): {type(exc).__name__}")
    return None


def discover_folder(folder: Path) -> InputSource:
    """Every file under ``folder`` (recursive), sorted by relative POSIX path; id = that path.

    Files whose suffix is not an image type (:data:`IMAGE_EXTENSIONS`, e.g. ``notes.pdf``) are not read
    but become ``not-an-image`` error rows, so a folder scan never drops a file without a word; hidden
    files (name starting with ``.``, e.g. ``.DS_Store``) and hidden folders are skipped. Symlinked files
    that resolve outside the folder become ``path-outside-input-root`` error rows.
    """
    if not folder.is_dir():
        raise InputError(f"input folder {folder} does not exist or is not a directory")
    root = folder.resolve()
    rel_paths: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if name.startswith("."):
                continue
            rel_paths.append(Path(dirpath, name).relative_to(folder).as_posix())
    rel_paths.sort()
    items: list[InputItem] = []
    for index, rel in enumerate(rel_paths):
        file = folder / rel
        shown = str(file)
        suffix = Path(rel).suffix.lower()
        if suffix not in IMAGE_EXTENSIONS:
            err = RowError(
                NOT_AN_IMAGE,
                f"skipped: {suffix or 'no'} suffix is not an image type ({', '.join(IMAGE_EXTENSIONS)})",
            )
            items.append(InputItem(index, rel, shown, None, err))
        elif outside := _containment(root, file, "symlink resolves outside the input folder"):
            items.append(InputItem(index, rel, shown, None, outside))
        else:
            items.append(InputItem(index, rel, shown, file))
    return InputSource(description=f"folder:{root}", items=items)


def _pick_column(fieldnames: Sequence[str], wanted: str | None, defaults: Sequence[str], manifest: Path,
                 what: str) -> str:
    """The column to use: ``wanted`` if given, else the first of ``defaults`` present."""
    candidates = [wanted] if wanted else list(defaults)
    for name in candidates:
        if name in fieldnames:
            return name
    raise InputError(
        f"manifest {manifest} has no {what} column: expected {' or '.join(repr(c) for c in candidates)}"
        f" (found columns: {', '.join(repr(f) for f in fieldnames) or 'none'}); "
        f"choose one with --{what}-column"
    )


def _resolve_entry(root: Path, value: str) -> Path:
    """The file a manifest cell points to: relative to ``root``; extension-less names try image suffixes."""
    candidate = Path(value) if os.path.isabs(value) else root / value
    if not candidate.suffix and not candidate.exists():
        for ext in IMAGE_EXTENSIONS:
            for suffix in (ext, ext.upper()):
                alt = candidate.with_name(candidate.name + suffix)
                if alt.exists():
                    return alt
    return candidate


def _malformed(row: dict[Any, Any], line: int, last_line: int, n_columns: int) -> str:
    """Why a parsed CSV record cannot be trusted ("" if it can): a quoted field running over several lines
    (an unbalanced quote swallows the rows after it) or more cells than the header (an unquoted comma)."""
    if last_line > line:
        return (f"a quoted field opened on line {line} runs to line {last_line}, so lines {line}-{last_line} "
                "were read as one row (an unbalanced quote?)")
    extra = row.get(None)
    if extra:
        return (f"line {line} has {n_columns + len(extra)} cells but the header has {n_columns} "
                "(an unquoted comma in a path or id?)")
    return ""


def discover_manifest(manifest: Path, *, path_column: str | None = None, id_column: str | None = None,
                      image_root: Path | None = None) -> InputSource:
    """Rows of a CSV manifest in file order.

    ``path_column`` defaults to the first of ``image``/``path`` present; ``id_column`` defaults to the
    path value itself. Relative paths are resolved against ``image_root`` (default: the manifest's
    folder), and every path must stay inside that root. The first occurrence of an id is scored; each
    later duplicate becomes a ``duplicate-id`` error row naming the first occurrence's line.
    """
    if not manifest.is_file():
        raise InputError(f"manifest {manifest} does not exist or is not a file")
    root_dir = image_root if image_root is not None else manifest.parent
    if not root_dir.is_dir():
        raise InputError(f"image root {root_dir} for manifest {manifest} is not a directory")
    root = root_dir.resolve()
    try:
        fieldnames, records = read_manifest(manifest)
    except ValueError as exc:  # the header line over the csv field limit, or not UTF-8
        raise InputError(str(exc)) from None
    pcol = _pick_column(fieldnames, path_column, DEFAULT_PATH_COLUMNS, manifest, "path")
    icol = _pick_column(fieldnames, id_column, (), manifest, "id") if id_column else pcol

    items: list[InputItem] = []
    first_line: dict[str, int] = {}
    for index, record in enumerate(records):
        row, line, last_line = record.cells, record.line, record.last_line
        if record.problem:
            err = RowError(MALFORMED_ROW, f"{record.problem} in {manifest.name}; the row is not scored")
            items.append(InputItem(index, f"line-{line}", "", None, err))
            continue
        value = (row.get(pcol) or "").strip()
        item_id = (row.get(icol) or "").strip() or value
        problem = _malformed(row, line, last_line, len(fieldnames))
        if problem:
            err = RowError(MALFORMED_ROW, f"{problem} in {manifest.name}; the row is not scored")
            items.append(InputItem(index, item_id if item_id and "\n" not in item_id else f"line-{line}", value,
                                   None, err))
            continue
        if not value:
            err = RowError(MISSING_PATH, f"empty {pcol!r} cell on line {line} of {manifest.name}")
            items.append(InputItem(index, item_id or f"line-{line}", value, None, err))
            continue
        if item_id in first_line:
            err = RowError(
                DUPLICATE_ID, f"id on line {line} duplicates line {first_line[item_id]} of {manifest.name}"
            )
            items.append(InputItem(index, item_id, value, None, err))
            continue
        first_line[item_id] = line
        file = _resolve_entry(root_dir, value)
        if outside := _containment(root, file, f"path on line {line} is outside the image root {root}"):
            items.append(InputItem(index, item_id, value, None, outside))
            continue
        items.append(InputItem(index, item_id, str(file), file))
    desc = f"manifest:{manifest.resolve()}|root:{root}|path:{pcol}|id:{icol}"
    return InputSource(description=desc, items=items)


def discover(input_path: Path, *, path_column: str | None = None, id_column: str | None = None,
             image_root: Path | None = None) -> InputSource:
    """A folder or a ``.csv`` manifest, dispatched on what ``input_path`` is."""
    if input_path.is_dir():
        if path_column or id_column or image_root:
            raise InputError(
                "--path-column, --id-column and --image-root apply to a CSV manifest, not a folder"
            )
        return discover_folder(input_path)
    if input_path.suffix.lower() == ".csv":
        return discover_manifest(input_path, path_column=path_column, id_column=id_column,
                                 image_root=image_root)
    if not input_path.exists():
        raise InputError(f"input {input_path} does not exist (expected a folder or a .csv manifest)")
    raise InputError(f"input {input_path} is neither a folder nor a .csv manifest")
