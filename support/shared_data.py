"""Where the shared real photographs are, for the tests and benchmarks that read them.

``$RADSCREEN_SHARED_DATA`` when set, else ``../shared/data`` beside the checkout (the CI layout). The folder
holds ``idrid-lesion-54/`` (54 IDRiD photographs, CC BY 4.0), ``odir-5k/`` and ``eyepacs-5k/`` (each with
``labels.csv``); research use only, never copied into the repository. Tests that need it skip, naming this
path, without it.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV_VAR = "RADSCREEN_SHARED_DATA"


def shared_data_dir() -> Path:
    """The shared data folder: ``$RADSCREEN_SHARED_DATA``, else ``<repo>/../shared/data``."""
    configured = os.environ.get(ENV_VAR)
    return Path(configured).expanduser() if configured else REPO_ROOT.parent / "shared" / "data"


SHARED_DATA = shared_data_dir()
IDRID = SHARED_DATA / "idrid-lesion-54"
ODIR = SHARED_DATA / "odir-5k"
EYEPACS = SHARED_DATA / "eyepacs-5k"


def missing_reason(folder: Path) -> str:
    """The skip reason of a test whose real photographs are absent."""
    return f"real photographs not found at {folder} (set {ENV_VAR} to the shared data folder)"
