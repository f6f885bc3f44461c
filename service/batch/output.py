"""The final results file: CSV, JSON Lines or Parquet, written atomically in input order.

The file is assembled from the committed parts at the end of a run into a temporary file in the same
folder, fsynced and renamed over ``--output`` (``models.io.atomic``), so a reader never sees a half-written
results file. Parquet needs pyarrow (the ``batch`` extra) and is imported only when asked for.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from models.io.atomic import atomic_write
from models.io.csv_cells import write_csv
from service.batch.rows import (
    BOOL_COLUMNS,
    COLUMNS,
    FLOAT_COLUMNS,
    LIST_COLUMNS,
    Row,
    csv_values,
    from_csv_cells,
)

FORMATS: dict[str, str] = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}
PARQUET_ROW_GROUP = 10_000


class OutputError(Exception):
    """The output path cannot be written in a supported format."""


def output_format(path: Path) -> str:
    """``csv``, ``jsonl`` or ``parquet`` from the output suffix; anything else is refused clearly."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise OutputError(f"unsupported output {path.name!r}: use a .csv, .jsonl or .parquet file name")
    if fmt == "parquet":
        _require_pyarrow()
    return fmt


def _require_pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise OutputError("Parquet output needs pyarrow: pip install 'radial-screen[batch]'") from exc
    return pyarrow


def arrow_schema() -> Any:
    """The Parquet schema: floats float64, flags bool, list columns list<string>, the rest string."""
    pa = _require_pyarrow()
    fields = []
    for col in COLUMNS:
        if col in FLOAT_COLUMNS:
            typ = pa.float64()
        elif col in BOOL_COLUMNS:
            typ = pa.bool_()
        elif col in LIST_COLUMNS:
            typ = pa.list_(pa.string())
        else:
            typ = pa.string()
        fields.append(pa.field(col, typ))
    return pa.schema(fields)


def write_output(path: Path, rows: Iterable[Row]) -> int:
    """Write ``rows`` to ``path`` atomically in the format its suffix names; returns the row count."""
    fmt = output_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as tmp:
        if fmt == "parquet":
            count = _write_parquet(tmp, rows)
        else:
            with tmp.open("w", encoding="utf-8", newline="") as fh:
                count = _write_csv(fh, rows) if fmt == "csv" else _write_jsonl(fh, rows)
    return count


def _write_csv(fh: IO[str], rows: Iterable[Row]) -> int:
    return write_csv(fh, COLUMNS, (csv_values(row) for row in rows))


def _write_jsonl(fh: io.TextIOBase, rows: Iterable[Row]) -> int:
    count = 0
    for row in rows:
        fh.write(json.dumps({c: row.get(c) for c in COLUMNS}, ensure_ascii=False) + "\n")
        count += 1
    return count


def _write_parquet(tmp: Path, rows: Iterable[Row]) -> int:
    pa = _require_pyarrow()
    import pyarrow.parquet as pq

    schema = arrow_schema()
    count = 0
    with pq.ParquetWriter(tmp, schema) as writer:
        batch: list[Row] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= PARQUET_ROW_GROUP:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count += len(batch)
                batch = []
        if batch or count == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
    return count


def read_output(path: Path) -> Iterator[Row]:
    """Rows of a results file written by :func:`write_output` (types restored), in file order."""
    fmt = output_format(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        for record in pq.read_table(path).to_pylist():
            yield {c: record.get(c) for c in COLUMNS}
    elif fmt == "jsonl":
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    yield json.loads(line)
    else:
        with path.open(encoding="utf-8", newline="") as fh:
            for record in csv.DictReader(fh):
                yield from_csv_cells(record)


def output_model_shas(path: Path) -> set[str]:
    """The model sha256 values in an existing results file (empty set if it has none or is unreadable)."""
    try:
        return {str(r["model_sha256"]) for r in read_output(path) if r.get("model_sha256")}
    except (OSError, ValueError, KeyError, OutputError):
        return set()
