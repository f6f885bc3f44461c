"""Reading a CSV manifest's records, one record per row whatever a row holds.

Both the input discovery (``service.batch.inputs``) and ``--group-by patient`` (``service.batch.exams``) read
the manifest through :func:`read_manifest`, so record *i* is the same row for both. A row the csv module
refuses (a cell longer than ``csv.field_size_limit()``, 131,072 characters by default, which raises
``_csv.Error`` in the middle of the file) becomes a record with a ``problem`` and no cells, and reading goes on
with the next line: the job makes it an error row instead of stopping with no output. Line numbers come from the
csv reader's count of lines read (``csv.reader.line_num``), which counts a refused row's line too;
``DictReader.line_num`` is only updated by a row that parses, so two refused rows in a row would name one line.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ManifestRecord:
    """One manifest row: its cells (by header name; extra cells under ``None``), its first and last line, and
    ``problem`` when the csv module could not read it (then ``cells`` is empty)."""

    line: int
    last_line: int
    cells: dict[Any, Any] = field(default_factory=dict)
    problem: str = ""


def read_manifest(manifest: Path) -> tuple[list[str], list[ManifestRecord]]:
    """The header (names stripped) and every record of ``manifest``, in file order; ``ValueError`` when the
    header itself cannot be read (or the file is not UTF-8)."""
    with manifest.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        try:
            fieldnames = [f.strip() for f in (reader.fieldnames or [])]
        except csv.Error as exc:
            raise ValueError(f"the header line of manifest {manifest} cannot be read as CSV ({exc})") from None
        reader.fieldnames = fieldnames
        records: list[ManifestRecord] = []
        while True:
            before = reader.reader.line_num  # the csv reader's own count: DictReader's is not updated by a failed row
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                line = before + 1
                records.append(ManifestRecord(line, line, problem=f"line {line} cannot be read as CSV ({exc})"))
                continue
            # a record spans several lines only inside quotes, and the reader skips blank lines, so the line
            # numbers come from the reader; a quote still open at the end of the file keeps the last line's own
            # newline: not a line more
            newlines = sum(v.rstrip("\r\n").count("\n") for v in row.values() if isinstance(v, str))
            records.append(ManifestRecord(reader.line_num - newlines, reader.line_num, row))
    return fieldnames, records
