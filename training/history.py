"""A run's per-epoch history: ``history.json`` (the record), ``history.csv`` and ``training_curves.png``.

One row per finished epoch (epoch 0: a warm start's starting point), written whole after every epoch by
``training.loop.Trainer``; read back by ``training.finalise`` for the model card.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from models.io.csv_cells import write_csv
from training.diagnostics import plot_training_curves

HISTORY_FILE = "history.json"
CURVES_PNG = "training_curves.png"


def write_history(run_dir: Path, history: list[dict[str, Any]]) -> None:
    """Write the rows as JSON and CSV (every row's columns, in the order first seen; a column a row lacks, such
    as the per-layer Δρ ratio before the first ELBO step, is left empty) and plot them."""
    (run_dir / HISTORY_FILE).write_text(json.dumps(history, indent=2) + "\n")
    columns = list(dict.fromkeys(key for row in history for key in row))
    with (run_dir / "history.csv").open("w", newline="") as f:  # the one CSV rule: models.io.csv_cells
        write_csv(f, columns, ([row.get(c) for c in columns] for row in history))
    plot_training_curves(history, run_dir / CURVES_PNG)


def read_history(run_dir: Path) -> list[dict[str, Any]]:
    """The rows written so far; empty when the run has finished no epoch."""
    path = run_dir / HISTORY_FILE
    return list(json.loads(path.read_text())) if path.is_file() else []
