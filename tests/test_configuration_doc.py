"""docs/configuration.md lists every setting as the settings model states it (scripts/gen_configuration.py).

When this fails after a setting was added, renamed or re-described, rerun
``PYTHONPATH=$PWD .venv/bin/python scripts/gen_configuration.py`` and review the diff.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_configuration", ROOT / "scripts" / "gen_configuration.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_table_is_the_settings_model() -> None:
    gen = _generator()
    assert gen.documented_table() == gen.table(), "docs/configuration.md is stale: run scripts/gen_configuration.py"


def test_the_pacs_table_is_the_pacs_settings_model() -> None:
    from service.pacs.settings import PacsSettings

    gen = _generator()
    assert gen.documented_pacs_table() == gen.pacs_table(), "docs/configuration.md is stale: run " \
        "scripts/gen_configuration.py"
    table = gen.pacs_table()
    for name in PacsSettings.model_fields:
        assert f"| `RADSCREEN_PACS_{name.upper()}` |" in table, name
    assert "| `RADSCREEN_PACS_LISTEN_PORT` | `11112` | 1-65535 |" in table


def test_every_setting_has_a_row_with_its_bounds_and_choices() -> None:
    from service.settings import Settings

    table = _generator().table()
    for name in Settings.model_fields:
        assert f"| `RADSCREEN_{name.upper()}` |" in table, name
    assert "| `RADSCREEN_MAX_EXAM_IMAGES` | `8` | 2-64 |" in table
    assert "| `RADSCREEN_HEADER_TIMEOUT_S` | `10.0` | > 0, <= 3600 |" in table
    assert "| `RADSCREEN_MC_SAMPLES` | the artifact's | 1-256 |" in table
    assert "| `RADSCREEN_LOG_LEVEL` | `info` | `debug`, `info`, `warning`, `error` |" in table
