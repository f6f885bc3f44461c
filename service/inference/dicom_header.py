"""Reading a DICOM Part-10 file's header with bounded work: the file meta first, then at most
``MAX_HEADER_BYTES`` of dataset, then the pixel data element located by hand.

A DICOM reader that is handed the whole file does whatever the file asks before anyone checks it: pydicom's
``dcmread`` inflates a Deflated Explicit VR Little Endian dataset whole (1,000-fold: 256 KB of deflated zeros is
minutes of parsing and hundreds of MB), and parses every element of a header of a million tiny elements
(seconds per parse). So, in this order, each step bounded before the next starts:

1. **File meta** (group 0002, always Explicit VR Little Endian): parsed from at most ``MAX_META_BYTES`` after
   the preamble. Its transfer syntax must be one the service decodes (``accepted`` syntaxes); any other,
   Deflated Explicit VR Little Endian (1.2.840.10008.1.2.1.99) included, is refused with 415 here, before a
   byte of the dataset is read, so nothing is ever inflated.
2. **Dataset up to the pixel data**: parsed from at most ``MAX_HEADER_BYTES`` (1 MiB; a photograph's header
   is a few KB, an ICC profile or a thumbnail some hundreds) and stopped at the pixel data element
   (``stop_when``). A header that runs on past it is refused (422 ``image-too-complex``): at most
   ``MAX_HEADER_BYTES`` of elements are parsed, whatever the file holds.
3. **Pixel data element**: its tag, VR and length are read by hand at the offset where the parse stopped, and
   its value is a view of the upload (no copy, nothing parsed). Elements after the pixel data are never read.

With a :class:`~service.inference.decode_deadline.DecodeDeadline`, the parser reads through a
:class:`~service.inference.decode_deadline.DeadlineReader`, so it stops at its next element once the deadline
passes or the request is abandoned. Parse failures of hostile bytes become 400 ``undecodable-image``
(:func:`corrupt_is_rejected`); pydicom neither validates nor logs values (it would quote identifiers).
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import struct
import warnings
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from service.inference.decode_deadline import DeadlineReader, DecodeAborted, DecodeDeadline
from service.inference.imaging import ImageRejected

DICOM_MAGIC_OFFSET = 128
DICOM_MAGIC = b"DICM"
DATASET_OFFSET = DICOM_MAGIC_OFFSET + len(DICOM_MAGIC)
MAX_META_BYTES = 64 * 1024  # group 0002 is a few hundred bytes
MAX_HEADER_BYTES = 1024 * 1024  # dataset elements parsed before the pixel data, at most
IMPLICIT_VR_LITTLE_ENDIAN = "1.2.840.10008.1.2"
PIXEL_DATA = 0x7FE00010
_PIXEL_TAGS = frozenset({0x7FE00008, 0x7FE00009, PIXEL_DATA})  # float, double float, integer pixel data
_LONG_LENGTH_VRS = frozenset({b"OB", b"OW", b"UN"})  # what pixel data may be written as (4-byte length)
_ELEMENT_HEAD = 12  # the longest element header: tag, VR, 2 reserved, 4-byte length
UNDEFINED_LENGTH = 0xFFFFFFFF
# the most of a file :func:`read_header` reads: a reader that wants only the header (its tags) reads this prefix
HEADER_READ_BYTES = DATASET_OFFSET + MAX_META_BYTES + MAX_HEADER_BYTES + 2 * _ELEMENT_HEAD + 1


def is_dicom(data: bytes) -> bool:
    """True for a DICOM Part-10 file (``DICM`` after the 128-byte preamble)."""
    return data[DICOM_MAGIC_OFFSET:DATASET_OFFSET] == DICOM_MAGIC


@functools.cache
def _quiet_pydicom() -> None:
    """Once per process, before the first read: pydicom neither validates values it reads (the caller checks
    what it uses) nor logs. Its validation messages quote the offending value, e.g. a malformed
    StudyInstanceUID, and it logs them as well as warning: identifiers must never reach the logs."""
    from pydicom import config

    config.settings.reading_validation_mode = config.IGNORE
    pydicom_logger = logging.getLogger("pydicom")
    pydicom_logger.propagate = False
    pydicom_logger.handlers[:] = [logging.NullHandler()]


@contextlib.contextmanager
def corrupt_is_rejected() -> Iterator[None]:
    """Any failure while parsing hostile bytes -> 400 ``undecodable-image``; a stopped parse -> 422.

    pydicom parses lazily and raises many types on malformed data (its own errors, ``struct.error``,
    ``ValueError``, ``KeyError``, ``UnicodeDecodeError``, ``RecursionError`` on absurd nesting, ...), at read
    time or when an element is first accessed; every one of them means the file is corrupt, never a server error.
    """
    try:
        with warnings.catch_warnings():  # pydicom's value warnings can quote identifiers
            warnings.simplefilter("ignore")
            yield
    except ImageRejected:
        raise
    except DecodeAborted as exc:
        raise ImageRejected("image-too-complex", str(exc)) from exc
    except Exception as exc:  # the parser's failure modes are open-ended (docstring); none is a server error
        raise ImageRejected("undecodable-image", "The DICOM file is corrupt or truncated and cannot be read.") from exc


@dataclass(frozen=True)
class DicomHeader:
    """The file meta and the dataset up to the pixel data of one file; where its pixel data element starts."""

    meta: Any  # pydicom Dataset of group 0002
    dataset: Any  # pydicom Dataset of the elements before the pixel data (raw until accessed)
    syntax: str  # TransferSyntaxUID from the file meta
    pixel_at: int | None  # offset of the (7FE0,0010) element in the file; None when there is none

    @property
    def implicit_vr(self) -> bool:
        return self.syntax == IMPLICIT_VR_LITTLE_ENDIAN


def _stream(view: bytes, deadline: DecodeDeadline | None) -> io.BytesIO:
    return io.BytesIO(view) if deadline is None else DeadlineReader(view, deadline)


def _at_pixel_data(tag: int, vr: str | None, length: int) -> bool:
    return tag in _PIXEL_TAGS


def _read_meta(data: bytes, deadline: DecodeDeadline | None) -> tuple[Any, int]:
    """Group 0002 and the offset of the first dataset element (rule 1)."""
    from pydicom.filereader import read_dataset

    view = data[DATASET_OFFSET : DATASET_OFFSET + MAX_META_BYTES + _ELEMENT_HEAD]
    fp = _stream(view, deadline)
    meta = read_dataset(fp, is_implicit_VR=False, is_little_endian=True,
                        stop_when=lambda tag, vr, length: tag >> 16 != 0x0002)
    if fp.tell() > MAX_META_BYTES:
        raise ImageRejected("image-too-complex", f"The DICOM file meta information runs over {MAX_META_BYTES} "
                            "bytes; a real one is a few hundred.")
    return meta, DATASET_OFFSET + fp.tell()


def _refuse_syntax(syntax: str, accepted: Collection[str], hint: str) -> None:
    if syntax not in accepted:
        raise ImageRejected(
            "unsupported-media-type",
            f"DICOM transfer syntax {syntax or 'missing'} is not accepted (refused from the file meta, before the "
            f"dataset is read); send {hint}.",
        )


def read_header(data: bytes, *, accepted: Collection[str], hint: str,
                deadline: DecodeDeadline | None = None) -> DicomHeader:
    """Rules 1-3 of the module docstring; ``accepted``: the transfer syntaxes the caller decodes (``hint`` says
    which, for the 415). Call inside :func:`corrupt_is_rejected`."""
    from pydicom.filereader import read_dataset

    _quiet_pydicom()
    if not is_dicom(data):
        raise ImageRejected("undecodable-image", "The file is not DICOM Part-10 (no DICM after the 128-byte preamble).")
    meta, start = _read_meta(data, deadline)
    syntax = str(meta.get("TransferSyntaxUID") or "").strip("\0 ")
    _refuse_syntax(syntax, accepted, hint)
    view = data[start : start + MAX_HEADER_BYTES + _ELEMENT_HEAD]
    fp = _stream(view, deadline)
    dataset = read_dataset(fp, is_implicit_VR=syntax == IMPLICIT_VR_LITTLE_ENDIAN, is_little_endian=True,
                           stop_when=_at_pixel_data)
    stopped = fp.tell()
    tag = _tag_at(data, start + stopped)
    if tag in _PIXEL_TAGS and stopped <= MAX_HEADER_BYTES:
        return DicomHeader(meta, dataset, syntax, start + stopped if tag == PIXEL_DATA else None)
    if start + MAX_HEADER_BYTES < len(data):
        raise ImageRejected(
            "image-too-complex",
            f"The DICOM header runs over {MAX_HEADER_BYTES // 1024} KiB before its pixel data; at most that much "
            "is read (a photograph's header is a few KB).",
        )
    return DicomHeader(meta, dataset, syntax, None)


def _tag_at(data: bytes, at: int) -> int | None:
    if at + 4 > len(data):
        return None
    group, element = struct.unpack_from("<HH", data, at)
    return int(group << 16 | element)


def pixel_value(data: bytes, header: DicomHeader) -> tuple[memoryview, bool]:
    """The pixel data element's value as a view of ``data``, and whether its length is undefined
    (encapsulated fragments); a defined length running past the file is cut to what is there."""
    at = header.pixel_at
    assert at is not None  # the caller checked there is pixel data
    if header.implicit_vr:
        (length,), value_at = struct.unpack_from("<I", data, at + 4), at + 8
    else:
        if data[at + 4 : at + 6] not in _LONG_LENGTH_VRS:
            raise ImageRejected("undecodable-image", "The DICOM pixel data element has a VR pixel data cannot have.")
        (length,), value_at = struct.unpack_from("<I", data, at + 8), at + 12
    view = memoryview(data)
    if length == UNDEFINED_LENGTH:
        return view[value_at:], True
    return view[value_at : value_at + length], False
