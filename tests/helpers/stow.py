"""A DICOMweb STOW-RS request as an archive sends one: one ``application/dicom`` part per instance."""

from __future__ import annotations

import uuid

import httpx


def send_stow(base: str, parts: list[bytes], *, key: str | None, content_type: str | None = None,
              path: str = "/dicomweb/studies") -> httpx.Response:
    """POST ``parts`` to ``base + path`` (with ``X-API-Key: key`` unless None)."""
    boundary = uuid.uuid4().hex
    body = b"".join(f"--{boundary}\r\nContent-Type: application/dicom\r\n\r\n".encode() + p + b"\r\n"
                    for p in parts) + f"--{boundary}--\r\n".encode()
    headers = {"Content-Type": content_type or f'multipart/related; type="application/dicom"; boundary={boundary}',
               "Accept": "application/dicom+json"}
    if key is not None:
        headers["X-API-Key"] = key
    return httpx.post(f"{base}{path}", content=body, headers=headers, timeout=60)
