"""Reading image uploads from a request: multipart ``image`` part(s) or a raw ``image/*`` body.

HTTP-only translation (content types, form parts, field rules); decoding is ``service.imaging``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.errors import ServiceProblem

STUDY_ID_MAX = 128
STUDY_ID_PATTERN = r"^[\x20-\x7E]{1,128}$"  # printable ASCII, opaque to us
_STUDY_ID_RE = re.compile(STUDY_ID_PATTERN)
RAW_TYPES = ("image/", "application/octet-stream")
HOW_TO_SEND = (
    "send multipart/form-data with an 'image' file part, or the raw image bytes with an image/* Content-Type"
)


@dataclass(frozen=True)
class Upload:
    data: bytes
    filename: str | None


def _field_error(field: str, msg: str) -> ServiceProblem:
    return ServiceProblem(
        "validation-error",
        422,
        f"Invalid request fields: body.{field}: {msg}",
        extra={"errors": [{"loc": ["body", field], "msg": msg, "type": "value_error"}]},
    )


def check_study_id(value: str | None) -> str | None:
    """Validate an opaque study id (printable ASCII, <= 128 chars); None passes."""
    if value is None:
        return None
    if not _STUDY_ID_RE.match(value):
        raise _field_error("study_id", f"must be 1-{STUDY_ID_MAX} printable ASCII characters")
    return value


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def read_uploads(request: Request, *, max_files: int) -> tuple[list[Upload], list[str]]:
    """All ``image`` parts (or the raw body) and any ``study_id`` form values, in request order."""
    media = _media_type(request)
    if media == "multipart/form-data":
        try:
            form = await request.form(max_files=max_files, max_fields=max_files + 8)
        except StarletteHTTPException as exc:  # malformed multipart or too many parts
            raise ServiceProblem("validation-error", 422, f"Malformed multipart body: {exc.detail}") from exc
        parts = form.getlist("image")
        if not parts:
            raise _field_error("image", f"field required: {HOW_TO_SEND}")
        uploads: list[Upload] = []
        for part in parts:
            if not isinstance(part, UploadFile):
                raise _field_error("image", "must be a file part (filename=...), not a text field")
            uploads.append(Upload(await part.read(), part.filename))
        study_ids = [v for v in form.getlist("study_id") if isinstance(v, str)]
        return uploads, study_ids
    if media.startswith(RAW_TYPES):
        return [Upload(await request.body(), None)], []
    shown = media or "none"
    raise ServiceProblem(
        "unsupported-media-type", 415, f"Content-Type {shown} is not accepted; {HOW_TO_SEND}."
    )
