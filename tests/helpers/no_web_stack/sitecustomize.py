"""Put this folder first on PYTHONPATH to run Python as on a GPU node: torch is there, the service's web stack
(FastAPI, pydantic, uvicorn, pydicom) is not. Importing any of them raises ModuleNotFoundError, as there.
Used by tests/training/test_gpu_lease_dryrun.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

BLOCKED = frozenset({"fastapi", "pydantic", "pydantic_core", "pydantic_settings", "uvicorn", "starlette",
                     "pydicom", "pynetdicom", "highdicom"})


class _NoWebStack(MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {fullname!r} (a GPU node has no web stack)", name=fullname)
        return None


sys.meta_path.insert(0, _NoWebStack())
