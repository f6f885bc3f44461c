"""Write the tables of ``RADSCREEN_*`` variables in docs/configuration.md from the settings models.

Every field of ``service.settings.Settings`` (the scoring fields of ``ScorerSpec`` first, then the HTTP
service's) is one row of the service table, and every field of ``service.pacs.settings.PacsSettings``
(``RADSCREEN_PACS_*``) one row of the PACS table: its variable, its default, its allowed values (a ``Literal``'s
choices or the field's bounds) and its description, as the code states them. The rows go between each table's
markers; the prose around them is written by hand. ``tests/test_configuration_doc.py`` fails when a table is
stale (a field added, renamed or re-described without rerunning this)::

    PYTHONPATH=$PWD .venv/bin/python scripts/gen_configuration.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION_DOC = ROOT / "docs" / "configuration.md"
BEGIN, END = "<!-- settings-table:begin (scripts/gen_configuration.py) -->", "<!-- settings-table:end -->"
PACS_BEGIN, PACS_END = "<!-- pacs-table:begin (scripts/gen_configuration.py) -->", "<!-- pacs-table:end -->"
BOUNDS = (("ge", ">= {}"), ("gt", "> {}"), ("le", "<= {}"), ("lt", "< {}"))


def _choices(annotation: Any) -> tuple[str, ...]:
    for hint in (annotation, *get_args(annotation)):
        if get_origin(hint) is Literal:
            return tuple(str(c) for c in get_args(hint))
    return ()


def _bounds(metadata: list[Any]) -> str:
    limits = {name: getattr(m, name) for m in metadata for name, _ in BOUNDS if getattr(m, name, None) is not None}
    if "ge" in limits and "le" in limits:
        return f"{limits['ge']}-{limits['le']}"
    return ", ".join(text.format(limits[name]) for name, text in BOUNDS if name in limits)


def _default(name: str, field: Any, in_words: dict[str, str]) -> str:
    """A value as `code`; a default the code states in words ("the artifact's", "unset") as words."""
    if name in in_words:
        return in_words[name]
    if field.default_factory is not None:
        return f"`{field.default_factory()}`"
    return "unset" if field.default is None else f"`{field.default}`"


def _rows(model: Any, prefix: str, in_words: dict[str, str]) -> list[tuple[str, str, str, str]]:
    out = []
    for name, field in model.model_fields.items():
        choices = _choices(field.annotation)
        values = ", ".join(f"`{c}`" for c in choices) if choices else _bounds(field.metadata)
        out.append((f"`{prefix}{name.upper()}`", _default(name, field, in_words), values,
                    (field.description or "").replace("|", "\\|")))
    return out


def rows() -> list[tuple[str, str, str, str]]:
    """(variable, default, values, meaning) of every service setting, in the settings model's order."""
    from service.inference.spec import knobs
    from service.settings import Settings

    # ScorerSpec's None defaults mean something it says in words; model_dir's factory finds the embedded model
    in_words = {k.name: k.knob.default_text for k in knobs() if k.default is None and k.knob.default_text}
    return _rows(Settings, "RADSCREEN_", in_words)


def pacs_rows() -> list[tuple[str, str, str, str]]:
    """(variable, default, values, meaning) of every PACS setting, in the settings model's order."""
    from service.pacs.settings import PacsSettings

    return _rows(PacsSettings, "RADSCREEN_PACS_", {})


def _table(begin: str, end: str, rows: list[tuple[str, str, str, str]]) -> str:
    lines = [begin, "| variable | default | values | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| {variable} | {default} | {values} | {meaning} |" for variable, default, values, meaning in rows]
    return "\n".join([*lines, end])


def table() -> str:
    """The service table between its markers (markers included)."""
    return _table(BEGIN, END, rows())


def pacs_table() -> str:
    """The PACS table between its markers (markers included)."""
    return _table(PACS_BEGIN, PACS_END, pacs_rows())


def _documented(begin: str, end: str) -> str:
    match = re.search(re.escape(begin) + r".*?" + re.escape(end), CONFIGURATION_DOC.read_text(encoding="utf-8"), re.S)
    if match is None:
        raise ValueError(f"{CONFIGURATION_DOC} has no {begin} ... {end} block")
    return match.group(0)


def documented_table() -> str:
    """The service table now in docs/configuration.md (markers included)."""
    return _documented(BEGIN, END)


def documented_pacs_table() -> str:
    """The PACS table now in docs/configuration.md (markers included)."""
    return _documented(PACS_BEGIN, PACS_END)


def main() -> int:
    text = CONFIGURATION_DOC.read_text(encoding="utf-8")
    new = text.replace(documented_table(), table()).replace(documented_pacs_table(), pacs_table())
    CONFIGURATION_DOC.write_text(new, encoding="utf-8")
    print(f"wrote {len(rows())} settings and {len(pacs_rows())} PACS settings to "
          f"{CONFIGURATION_DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
