"""The batch output row: its columns, how a scored image and an error become one, and cell encodings.

A scored row is built from :func:`service.screening.payload.score_payload` — the same body ``POST /predict``
returns — so the batch job and the HTTP service report the same numbers, and the same words
(``outcome_reason``, ``models.outcome.wording``), for the same image.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.io.csv_cells import unguard
from service.batch.inputs import InputItem, RowError

Row = dict[str, Any]

COLUMNS: tuple[str, ...] = (
    "id",
    "path",
    "outcome",  # the screening outcome (models.outcome.decision.screening_outcome); empty on error rows
    # the outcome, probability and uncertainty in words (models.outcome.wording, the API's outcome_reason)
    "outcome_reason",
    "referable_dr_probability",  # empty when the image is ungradable (label not_graded): no finding to read
    "label",
    "mutual_information",
    "predictive_entropy",
    "expected_entropy",
    "gradable",
    "quality_score",
    "quality_issues",
    "quality_details",  # why each issue: "blurred: sharpness 1.21, needs >= 1.45" (service.http.schemas.QualityFinding)
    "refer_to_expert",
    "referral_reasons",
    "model_sha256",
    "error",
)
FLOAT_COLUMNS = frozenset(
    {"referable_dr_probability", "mutual_information", "predictive_entropy", "expected_entropy",
     "quality_score"}
)
BOOL_COLUMNS = frozenset({"gradable", "refer_to_expert"})
LIST_COLUMNS = frozenset({"quality_issues", "quality_details", "referral_reasons"})
LIST_SEPARATOR = ";"  # CSV encoding of the list columns

# Error kinds raised while reading a file (before the image reaches prepare_image).
FILE_NOT_FOUND = "file-not-found"
UNREADABLE_FILE = "unreadable-file"
NOT_A_REGULAR_FILE = "not-a-regular-file"  # a FIFO, device, socket or directory named like an image


def scored_row(item: InputItem, payload: Mapping[str, Any]) -> Row:
    """The row for a scored image, taken from the ``POST /predict`` body ``payload``.

    An ungradable image (outcome ``retake_ungradable``, label ``not_graded``) gets no probability: the API returns
    one for audit, but a list that clinics read must not hold a number that reads as a finding for a photograph
    that was not graded. The uncertainty columns stay (they describe the model, not the eye).
    """
    diagnosis = payload["diagnosis"]
    uncertainty = payload["uncertainty"]
    quality = payload["quality"]
    graded = bool(quality["gradable"])
    return {
        "id": item.id,
        "path": item.path,
        "outcome": str(payload["outcome"]),
        "outcome_reason": str(payload["outcome_reason"]),
        "referable_dr_probability": float(diagnosis["referable_dr_probability"]) if graded else None,
        "label": str(diagnosis["label"]),
        "mutual_information": float(uncertainty["mutual_information"]),
        "predictive_entropy": float(uncertainty["predictive_entropy"]),
        "expected_entropy": float(uncertainty["expected_entropy"]),
        "gradable": graded,
        "quality_score": float(quality["score"]),
        "quality_issues": [str(i) for i in quality["issues"]],
        "quality_details": [str(d["message"]) for d in quality.get("details", [])],
        "refer_to_expert": bool(payload["refer_to_expert"]),
        "referral_reasons": [str(r) for r in payload["referral_reasons"]],
        "model_sha256": str(payload["model"]["sha256"]),
        "error": "",
    }


def error_row(item: InputItem, error: RowError, model_sha256: str) -> Row:
    """The row for an input that was not scored: every result column empty, ``error`` = kind + detail."""
    row: Row = dict.fromkeys(COLUMNS)
    row.update(
        id=item.id, path=item.path, quality_issues=[], quality_details=[], referral_reasons=[],
        model_sha256=model_sha256,
        error=error.text(),
    )
    return row


def error_kind(row: Mapping[str, Any]) -> str | None:
    """The error kind of a row (text before the first ``": "``), or ``None`` for a scored row."""
    text = row.get("error") or ""
    return text.split(": ", 1)[0] if text else None


def csv_values(row: Mapping[str, Any]) -> list[Any]:
    """The row's values in :data:`COLUMNS` order as the CSV holds them: lists joined by ``;``, floats as floats.

    ``models.io.csv_cells.write_csv`` then writes each through the one CSV rule (booleans ``true``/``false``,
    floats exact, None empty, text escaped, guarded against formula evaluation and capped in length).
    """
    values: list[Any] = []
    for col in COLUMNS:
        value = row.get(col)
        if value is not None and col in LIST_COLUMNS:
            value = LIST_SEPARATOR.join(value)
        elif value is not None and col in FLOAT_COLUMNS:
            value = float(value)
        values.append(value)
    return values


def from_csv_cells(record: Mapping[str, str]) -> Row:
    """Inverse of :func:`csv_values` as written (used to read results back, e.g. for the summary and tests)."""
    row: Row = {}
    for col in COLUMNS:
        text = record.get(col, "")
        if col in LIST_COLUMNS:
            row[col] = text.split(LIST_SEPARATOR) if text else []
        elif text == "" and col in FLOAT_COLUMNS | BOOL_COLUMNS | {"label", "outcome", "outcome_reason"}:
            row[col] = None
        elif col in BOOL_COLUMNS:
            row[col] = text == "true"
        elif col in FLOAT_COLUMNS:
            row[col] = float(text)
        else:
            row[col] = unguard(text)
    return row
