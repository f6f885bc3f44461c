"""Reading image uploads from a request: multipart ``image`` part(s) or a raw ``image/*`` body.

HTTP-only translation (content types, form parts, field rules); decoding is ``service.inference.imaging``.

Too many parts: the multipart parser stops at the per-request part limit plus ``COUNT_SLACK``, so a
batch of 17 images against a limit of 16 is told "17 images; at most 16 (RADSCREEN_MAX_BATCH_ITEMS)"
with 413, and a body of thousands of parts is refused as soon as the slack is passed (the whole body
is also capped in bytes by the middleware). A client that disconnects mid-body makes Starlette raise
``ClientDisconnect`` here; ``service.http.errors`` maps it quietly (see ``service.http.middleware``).

Nothing is held in memory before admission: a multipart part above 1 MiB spools to disk (Starlette), a raw
body is spooled the same way (:func:`_spool_body`), and each :class:`Upload` is read by the decode worker
that decodes it (:meth:`Upload.read`), after the request has been admitted (``ModelHost.admit``). A part
over the upload limit is refused by its size, unread.
"""

from __future__ import annotations

from dataclasses import dataclass
from tempfile import SpooledTemporaryFile
from typing import Any, BinaryIO, cast

from fastapi import Request
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.http.errors import ServiceProblem
from service.inference.imaging import ImageRejected
from service.screening.identifiers import OPAQUE_ID_MAX, OPAQUE_ID_PATTERN, OPAQUE_ID_RULE, is_opaque_id

COUNT_SLACK = 48  # extra parts parsed beyond the limit, to say how many were sent
STUDY_ID_MAX = OPAQUE_ID_MAX
STUDY_ID_PATTERN = OPAQUE_ID_PATTERN  # service.screening.identifiers: the one rule for every opaque id echoed back
BATCH_LIMIT = "RADSCREEN_MAX_BATCH_ITEMS"
RAW_TYPES = ("image/", "application/octet-stream", "application/dicom")
PHOTO_SCHEMA = {"type": "string", "format": "binary", "description": "JPEG, PNG, TIFF, WebP, BMP or DICOM."}
SPOOL_MEMORY_BYTES = 1024 * 1024  # a raw body beyond this goes to a temporary file, as Starlette's form parts do


def request_body(properties: dict[str, Any], *, required: tuple[str, ...] = (),
                 raw_types: tuple[str, ...] = ()) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of an upload route: a multipart form with ``properties`` (``required``
    ones marked), plus a raw body of a photograph for each media type of ``raw_types``."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    content: dict[str, Any] = {"multipart/form-data": {"schema": schema}}
    content.update({media: {"schema": PHOTO_SCHEMA} for media in raw_types})
    return {"requestBody": {"required": True, "content": content}}
HOW_TO_SEND = (
    "send multipart/form-data with an 'image' file part, or the raw image bytes with an image/* Content-Type"
)


def read_spooled(upload: UploadFile, max_bytes: int) -> bytes:
    """An uploaded file's bytes (blocking: call it in the decode worker); at most ``max_bytes`` are ever held,
    and a file known to be larger is refused (413 ``payload-too-large``) unread."""
    size = upload.size
    if size is not None and size > max_bytes:
        raise ImageRejected("payload-too-large", f"The image is {size} bytes; the limit is {max_bytes} bytes.")
    upload.file.seek(0)
    return upload.file.read(max_bytes + 1)  # prepare_image refuses one byte more


@dataclass(frozen=True)
class Upload:
    """One photograph of a request, not yet read: its bytes stay in the spooled upload until :meth:`read`."""

    file: UploadFile
    filename: str | None
    max_bytes: int  # RADSCREEN_MAX_UPLOAD_BYTES

    def read(self) -> bytes:
        """The bytes, read in the decode worker after admission (``ModelHost.prepare`` calls it)."""
        return read_spooled(self.file, self.max_bytes)


def _field_error(field: str, msg: str) -> ServiceProblem:
    return ServiceProblem(
        "validation-error",
        422,
        f"Invalid request fields: body.{field}: {msg}",
        extra={"errors": [{"loc": ["body", field], "msg": msg, "type": "value_error"}]},
    )


def check_opaque_id(field: str, value: str | None) -> str | None:
    """``value`` when it obeys the opaque-id rule (``service.screening.identifiers``), else 422 naming
    ``field``; None passes."""
    if value is None:
        return None
    if not is_opaque_id(value):
        raise _field_error(field, f"must be {OPAQUE_ID_RULE}")
    return value


def check_study_id(value: str | None) -> str | None:
    """Validate an opaque study id (:func:`check_opaque_id`); None passes."""
    return check_opaque_id("study_id", value)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _too_many(count: str, max_files: int, what: str = "image", limit_name: str = BATCH_LIMIT) -> ServiceProblem:
    """413 for a request over its part limit (``limit_name``); 422 when the one-image endpoint gets several."""
    if max_files == 1:
        return _field_error(
            "image", f"this endpoint scores one image and got {count} {what}s; use /v1/predict/batch"
        )
    return ServiceProblem(
        "payload-too-large",
        413,
        f"The request has {count} {what}s; at most {max_files} images are accepted per request "
        f"({limit_name}={max_files}). Split them over several requests.",
    )


async def _read_form(request: Request, max_files: int, *, limit_name: str = BATCH_LIMIT,
                     text_fields: str = "optional 'study_id' fields") -> FormData:
    """Parse the multipart body, counting up to ``COUNT_SLACK`` parts beyond the limits; a refusal names the
    limit's setting (``limit_name``) and the text fields the endpoint takes."""
    cap_files, cap_fields = max_files + COUNT_SLACK, max_files + 8 + COUNT_SLACK
    try:
        return await request.form(max_files=cap_files, max_fields=cap_fields)
    except StarletteHTTPException as exc:  # malformed multipart or too many parts
        detail = str(exc.detail)
        if detail.startswith("Too many files"):
            raise _too_many(f"more than {cap_files}", max_files, limit_name=limit_name) from exc
        if detail.startswith("Too many fields"):
            raise ServiceProblem(
                "payload-too-large",
                413,
                f"The request has more than {cap_fields} form fields; this endpoint takes its file part(s) and "
                f"{text_fields} only (at most {max_files} files).",
            ) from exc
        raise ServiceProblem("validation-error", 422, f"Malformed multipart body: {detail}") from exc


async def _spool_body(request: Request) -> UploadFile:
    """The raw body in a spooled file (memory up to ``SPOOL_MEMORY_BYTES``, then disk); the middleware has
    already capped its length."""
    spool = cast(BinaryIO, SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES))  # noqa: SIM115 (the upload owns it)
    upload = UploadFile(spool, size=0)
    async for chunk in request.stream():
        await upload.write(chunk)  # moves to a thread once the file has rolled over to disk
    return upload


async def read_uploads(request: Request, *, max_files: int, max_bytes: int) -> tuple[list[Upload], list[str]]:
    """All ``image`` parts (or the raw body), unread, and any ``study_id`` form values, in request order."""
    media = _media_type(request)
    if media == "multipart/form-data":
        form = await _read_form(request, max_files)
        files = sum(isinstance(value, UploadFile) for _, value in form.multi_items())
        if files > max_files:
            await form.close()
            raise _too_many(str(files), max_files)
        parts = form.getlist("image")
        if not parts:
            raise _field_error("image", f"field required: {HOW_TO_SEND}")
        uploads: list[Upload] = []
        for part in parts:
            if not isinstance(part, UploadFile):
                raise _field_error("image", "must be a file part (filename=...), not a text field")
            uploads.append(Upload(part, part.filename, max_bytes))
        study_ids = [v for v in form.getlist("study_id") if isinstance(v, str)]
        return uploads, study_ids
    if media.startswith(RAW_TYPES):
        return [Upload(await _spool_body(request), None, max_bytes)], []
    shown = media or "none"
    raise ServiceProblem(
        "unsupported-media-type", 415, f"Content-Type {shown} is not accepted; {HOW_TO_SEND}."
    )
