"""Write the table of ``RADSCREEN_*`` variables in docs/configuration.md from the settings model.

Every field of ``service.settings.Settings`` (the scoring fields of ``ScorerSpec`` first, then the HTTP
service's) is one row: its variable, its default, its allowed values (a ``Literal``'s choices or the field's
bounds) and its description, as the code states them. The rows go between the ``settings-table`` markers;
the prose around them is written by hand. ``tests/test_configuration_doc.py`` fails when the table is stale
(a field added, renamed or re-described without rerunning this)::

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


def rows() -> list[tuple[str, str, str, str]]:
    """(variable, default, values, meaning) of every setting, in the settings model's order."""
    from service.inference.spec import knobs
    from service.settings import Settings

    # ScorerSpec's None defaults mean something it says in words; model_dir's factory finds the embedded model
    in_words = {k.name: k.knob.default_text for k in knobs() if k.default is None and k.knob.default_text}
    out = []
    for name, field in Settings.model_fields.items():
        choices = _choices(field.annotation)
        values = ", ".join(f"`{c}`" for c in choices) if choices else _bounds(field.metadata)
        out.append((f"`RADSCREEN_{name.upper()}`", _default(name, field, in_words), values,
                    (field.description or "").replace("|", "\\|")))
    return out


def table() -> str:
    """The markdown table between the markers (markers included)."""
    lines = [BEGIN, "| variable | default | values | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| {variable} | {default} | {values} | {meaning} |" for variable, default, values, meaning in rows()]
    return "\n".join([*lines, END])


def documented_table() -> str:
    """The table now in docs/configuration.md (markers included)."""
    match = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), CONFIGURATION_DOC.read_text(encoding="utf-8"), re.S)
    if match is None:
        raise ValueError(f"{CONFIGURATION_DOC} has no {BEGIN} ... {END} block")
    return match.group(0)


def main() -> int:
    text = CONFIGURATION_DOC.read_text(encoding="utf-8")
    new = text.replace(documented_table(), table())
    CONFIGURATION_DOC.write_text(new, encoding="utf-8")
    print(f"wrote {len(rows())} settings to {CONFIGURATION_DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
