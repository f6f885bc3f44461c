"""The one rule for every CSV the product writes: cells a spreadsheet opens as text, never as a formula.

A CSV file is read by people in a spreadsheet, so every cell that carries text from outside (a manifest's
patient cell, a file path, a DICOM StudyInstanceUID, an error message quoting either) is written so that
opening the file runs nothing and shows one cell per value:

1. **Control characters are escaped**, never written raw: C0 and C1 controls (NUL, TAB, CR, LF, ESC, ...), DEL,
   the Unicode line and paragraph separators and the bidirectional overrides become visible escapes (``\\x00``,
   ``\\t``, ``\\r``, ``\\n``, ``\\u2028``), so a CR/LF in a value never makes a multi-line cell and a NUL never
   reaches a tool that stops at it.
2. **Formula triggers are neutralised** (OWASP "CSV injection"): a text cell starting with ``=``, ``+``, ``-``,
   ``@``, TAB or CR gets a leading apostrophe, which spreadsheets show as text. A cell already starting with
   the apostrophe gets one more, so :func:`unguard` drops exactly one and the text is as written.
3. **No cell exceeds a spreadsheet's limit** of :data:`SPREADSHEET_CELL_LIMIT` characters (Excel's 32,767;
   longer cells are cut or spill into the next row): a longer one is cut and ends with a stated marker
   (``... [truncated: 12345 more characters]``).

Numbers, booleans and ``None`` are not text: ints and floats are written in Python's shortest round-trip form
(a negative number keeps its sign), booleans ``true``/``false``, ``None`` an empty cell. JSON Lines and
Parquet outputs keep values as they are; only CSV needs this. Used by the batch job's per-image and exam CSVs
and by training's CSVs alike (as ``models.io.atomic`` is the one atomic write)::

    with path.open("w", encoding="utf-8", newline="") as fh:
        write_csv(fh, ["id", "note"], [["10_left", "=HYPERLINK(...)"]])   # cell: '=HYPERLINK(...)
"""

from __future__ import annotations

import csv
import numbers
import unicodedata
from collections.abc import Iterable, Sequence
from typing import IO, Any

SPREADSHEET_CELL_LIMIT = 32_767
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
TEXT_GUARD = "'"
TRUNCATED_MARKER = " ... [truncated: {n} more characters]"
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
# Not category Cc but still able to break a line or reorder what a reader sees.
_EXTRA_ESCAPED = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escaped(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _needs_escape(ch: str) -> bool:
    return ch in _EXTRA_ESCAPED or unicodedata.category(ch) == "Cc"


def escape_controls(text: str) -> str:
    """``text`` with every control character written as a visible escape (rule 1 of the module docstring)."""
    if text.isprintable():  # False for every Cc, Cf, Zl and Zp character: the common case needs no pass
        return text
    return "".join(_escaped(ch) if _needs_escape(ch) else ch for ch in text)


def safe_text(text: str, *, limit: int = SPREADSHEET_CELL_LIMIT) -> str:
    """One text cell under all three rules: controls escaped, a formula trigger guarded, at most ``limit`` chars."""
    out = escape_controls(text)
    if out.startswith((*FORMULA_TRIGGERS, TEXT_GUARD)):
        out = TEXT_GUARD + out
    if len(out) > limit:
        # the marker's own length depends on the count it states: size it for the largest count possible
        keep = limit - len(TRUNCATED_MARKER.format(n=len(out)))
        out = out[:keep] + TRUNCATED_MARKER.format(n=len(out) - keep)
    return out


def cell(value: Any) -> str:
    """The CSV text of one value: ``None`` empty, booleans ``true``/``false``, numbers exact, text :func:`safe_text`."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):  # int, numpy integers
        return str(int(value))
    if isinstance(value, numbers.Real):  # float, numpy floats
        return repr(float(value))  # shortest round-trip form: no precision lost
    return safe_text(str(value))


def unguard(text: str) -> str:
    """Inverse of the formula guard: one leading apostrophe dropped (escapes and cuts stay as written)."""
    return text[1:] if text.startswith(TEXT_GUARD) else text


def write_csv(fh: IO[str], header: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """Write ``header`` then every row, each value through :func:`cell`; returns the number of rows written.

    ``fh`` is a text file opened with ``newline=""`` (the csv module writes the line ends).
    """
    writer = csv.writer(fh)
    writer.writerow([cell(name) for name in header])
    count = 0
    for row in rows:
        writer.writerow([cell(value) for value in row])
        count += 1
    return count
