"""Load a benchmark or script file as a module, to test its pieces without importing the ``benchmarks``
package (the import contracts keep tests from depending on it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative: str) -> ModuleType:
    """``relative`` (e.g. ``"benchmarks/prune_eval.py"``) as a fresh module."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module
