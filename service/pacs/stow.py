"""DICOMweb STOW-RS without HTTP: a ``multipart/related`` body read as it streams, bounded, into instances;
then each instance stored, and the standard response.

:class:`StowBody` parses the body with python-multipart's ``MultipartParser`` (the parser behind Starlette's
forms) chunk by chunk, as the route receives it, and refuses it (:class:`StowRefused`, which the router answers
with its status) as soon as it is wrong, before any part is parsed as DICOM and before anything is stored:

- 415: the body is not ``multipart/related`` with ``application/dicom`` parts (a part that declares another
  Content-Type is refused when its headers end);
- 413: a part beyond ``max_parts`` (``RADSCREEN_PACS_STOW_MAX_PARTS``), or a part larger than
  ``max_part_bytes`` (``RADSCREEN_MAX_UPLOAD_BYTES``, the limit of any photograph), counted as its bytes arrive;
  the service reads no more of the body (uvicorn discards what the client still sends, so that it reads the
  answer);
- 400: malformed framing (RFC 2046 §5.1.1): no boundary, a bare LF where a delimiter or a part's header line
  must end in CRLF (``\\n--boundary`` or ``--boundary\\n``: LF-only line ends are refused, never guessed at), a
  body that ends before its closing delimiter ``--boundary--`` (truncated, or never closed), one that holds no
  part, or any other parse error.

The parts' bytes go to one ``SpooledTemporaryFile`` (memory up to ``SPOOL_MEMORY_BYTES``, then a temporary file
on disk, like Starlette's form parts), so a request holds about 1 MiB of its body in memory however large it
is; :meth:`StowBody.parts` then yields one part's bytes at a time. Since every bound is checked before the
closing delimiter is accepted and storing starts only after it, a refused request stores nothing.

``store_all(parts, spool, ...)`` receives each part (:func:`service.pacs.receive.receive`: bounded, checked,
written durably to the spool), and returns a :class:`StowOutcome`: the HTTP status PS3.18 §10.5.3 prescribes
(200 every instance stored, 202 some failed, 409 none stored) and the response body in the DICOM JSON model
(PS3.18 Annex F), built by pydicom: Referenced SOP Sequence (0008,1199) for the stored instances, Failed SOP
Sequence (0008,1198) with each Failure Reason (0008,1197); one item per part, so at most ``max_parts``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from tempfile import SpooledTemporaryFile
from types import TracebackType
from typing import Any

from pydicom.dataset import Dataset
from python_multipart import MultipartParser
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartState, parse_options_header

from service.pacs.intake import Accepted, Refused
from service.pacs.receive import receive
from service.pacs.store import Spool

DICOM_MEDIA_TYPE = "application/dicom"
DICOM_JSON_MEDIA_TYPE = "application/dicom+json"
SPOOL_MEMORY_BYTES = 1024 * 1024  # the parts' bytes beyond this go to a temporary file, as Starlette's form parts do
MAX_PARTS_SETTING = "RADSCREEN_PACS_STOW_MAX_PARTS"
MAX_PART_BYTES_SETTING = "RADSCREEN_MAX_UPLOAD_BYTES"


class StowRefused(Exception):  # noqa: N818 (a refusal, not a bug)
    """The request as a whole is refused; ``status`` is 415 (media type), 413 (a bound) or 400 (malformed)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _malformed(detail: str) -> StowRefused:
    return StowRefused(400, f"The multipart/related body is malformed: {detail}; nothing of it is stored.")


def _boundary_of(content_type: str) -> bytes:
    """The boundary of a STOW-RS Content-Type, or 415 / 400 (module docstring)."""
    media, params = parse_options_header(content_type)
    if media != b"multipart/related":
        raise StowRefused(415, "Send multipart/related; type=\"application/dicom\" (DICOMweb STOW-RS).")
    declared = params.get(b"type", b"application/dicom").decode("latin-1").lower()
    if declared != DICOM_MEDIA_TYPE:
        raise StowRefused(415, f"Only application/dicom parts are stored (the body declares {declared[:64]!r}).")
    boundary = params.get(b"boundary")
    if not boundary:
        raise StowRefused(400, "The multipart/related Content-Type has no boundary.")
    return boundary


class StowBody:
    """One STOW-RS body, parsed and bounded as it streams (module docstring). Feed it every chunk with
    :meth:`feed`, then :meth:`finish`; read the parts with :meth:`parts`; :meth:`close` (or ``with``) frees the
    temporary file. ``feed`` blocks on disk once the body has passed ``SPOOL_MEMORY_BYTES``
    (:attr:`in_memory` false): call it in a thread then."""

    def __init__(self, content_type: str, *, max_parts: int, max_part_bytes: int) -> None:
        boundary = _boundary_of(content_type)
        self.max_parts, self.max_part_bytes = max_parts, max_part_bytes
        self._file = SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115 (closed by close())
        self._written = 0
        self._spans: list[list[int]] = []  # [offset, length] in the file, per part
        self._header = {"field": bytearray(), "value": bytearray()}
        # A delimiter after a bare LF, or a delimiter line that ends in one: RFC 2046 needs CRLF for both.
        escaped = re.escape(b"--" + boundary)
        # (The byte before the LF is matched, not looked behind at: the window's first LF never matches alone.)
        self._bare_lf = re.compile(rb"[^\r]\n" + escaped + rb"(?:--|[ \t]{0,16}\r?\n)|\n" + escaped
                                   + rb"[ \t]{0,16}\n")
        self._tail = b"\r\n"  # the last bytes fed (at first: the line end before the first delimiter)
        self._tail_size = len(boundary) + 24  # so that a delimiter split across two chunks is seen
        try:
            self._parser = MultipartParser(boundary, {
                "on_part_begin": self._on_part_begin, "on_part_data": self._on_part_data,
                "on_header_field": self._on_header_field, "on_header_value": self._on_header_value,
                "on_header_end": self._on_header_end,
            })
        except FormParserError as exc:  # e.g. a boundary over RFC 2046's 70 characters
            self._file.close()
            raise StowRefused(400, f"The multipart/related boundary is not usable: {exc}.") from exc

    # -- the parser's callbacks: the bounds are checked here, as the bytes arrive ----------------------------
    def _on_part_begin(self) -> None:
        if len(self._spans) >= self.max_parts:
            raise StowRefused(413, f"The STOW-RS body has more than {self.max_parts} parts; at most "
                              f"{self.max_parts} instances are accepted per request ({MAX_PARTS_SETTING}="
                              f"{self.max_parts}). Split them over several requests; nothing of this one is stored.")
        self._spans.append([self._written, 0])

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        span = self._spans[-1]
        span[1] += end - start
        if span[1] > self.max_part_bytes:
            raise StowRefused(413, f"Part {len(self._spans)} of the STOW-RS body is larger than "
                              f"{self.max_part_bytes} bytes, the limit of one instance ({MAX_PART_BYTES_SETTING}="
                              f"{self.max_part_bytes}); nothing of this request is stored.")
        self._file.write(memoryview(data)[start:end])
        self._written += end - start

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header["field"] += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        if b"\n" in data[start:end]:
            raise _malformed(f"a header line of part {len(self._spans)} ends in a bare LF, not CRLF (RFC 2046)")
        self._header["value"] += data[start:end]

    def _on_header_end(self) -> None:
        if bytes(self._header["field"]).strip().lower() == b"content-type":
            media = parse_options_header(bytes(self._header["value"]))[0].decode("latin-1").lower()
            if media != DICOM_MEDIA_TYPE:
                raise StowRefused(415, f"Only application/dicom parts are stored; part {len(self._spans)} is "
                                  f"{media[:64]!r}.")
        self._header["field"], self._header["value"] = bytearray(), bytearray()

    # -- the stream ------------------------------------------------------------------------------------------
    @property
    def in_memory(self) -> bool:
        """Whether the parts still fit in memory (:meth:`feed` does no disk I/O while they do)."""
        return self._written <= SPOOL_MEMORY_BYTES

    def feed(self, chunk: bytes) -> None:
        """Parse the next chunk of the body; raise :class:`StowRefused` as soon as it is refused."""
        if self._parser.state == MultipartState.END:
            return  # the epilogue after the closing delimiter (RFC 2046 allows one) is ignored
        window = self._tail + chunk
        if self._bare_lf.search(window):
            raise _malformed("a delimiter line (--boundary) follows or ends in a bare LF, not CRLF (RFC 2046 §5.1.1)")
        self._tail = window[-self._tail_size:]
        try:
            self._parser.write(chunk)
        except FormParserError as exc:  # python-multipart's own errors on a malformed body
            raise _malformed(str(exc)) from exc

    def finish(self) -> int:
        """Check that the body was whole (its closing delimiter came) and held a part; return how many."""
        if self._parser.state != MultipartState.END:
            raise _malformed("it ends before its closing delimiter (--boundary--, RFC 2046 §5.1.1): the body is "
                             "truncated or was never closed")
        if not self._spans:
            raise StowRefused(400, "The multipart/related body holds no part.")
        return len(self._spans)

    def parts(self) -> Iterator[bytes]:
        """Each part's bytes, one at a time (blocking: call it in a thread), in request order."""
        for offset, length in self._spans:
            self._file.seek(offset)
            yield self._file.read(length)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> StowBody:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


@dataclass
class StowOutcome:
    stored: list[Accepted] = field(default_factory=list)
    failed: list[Refused] = field(default_factory=list)

    @property
    def status(self) -> int:
        if not self.failed:
            return 200
        return 202 if self.stored else 409

    def body(self) -> dict[str, Any]:
        """The STOW-RS response in the DICOM JSON model."""
        ds = Dataset()
        if self.stored:
            ds.ReferencedSOPSequence = [_reference(a.sop_class_uid, a.sop_instance_uid) for a in self.stored]
        if self.failed:
            items = []
            for refused in self.failed:
                item = _reference(refused.sop_class_uid or "", refused.sop_instance_uid or "")
                item.FailureReason = refused.status
                items.append(item)
            ds.FailedSOPSequence = items
        return ds.to_json_dict()


def _reference(sop_class: str, sop_instance: str) -> Dataset:
    item = Dataset()
    item.ReferencedSOPClassUID = sop_class
    item.ReferencedSOPInstanceUID = sop_instance
    return item


def store_all(parts: Iterable[bytes], spool: Spool, *, max_bytes: int, max_instances: int,
              study_uid: str | None = None) -> StowOutcome:
    """Receive each part (:func:`service.pacs.receive.receive`: blocking, one fsync per instance); ``study_uid``
    from the URL, when given, must be each instance's. ``parts`` may be :meth:`StowBody.parts`: one part is held
    in memory at a time."""
    outcome = StowOutcome()
    for data in parts:
        verdict = receive(data, spool, max_bytes=max_bytes, max_instances=max_instances, study_uid=study_uid)
        if isinstance(verdict, Refused):
            outcome.failed.append(verdict)
        else:
            outcome.stored.append(verdict)
    return outcome
