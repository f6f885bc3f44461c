"""Suite-wide test settings."""

from __future__ import annotations

import os

from hypothesis import settings

# CI runs must be reproducible: a property test explores the same examples on every CI run (locally it
# keeps exploring new ones, which is where new counter-examples are found).
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
