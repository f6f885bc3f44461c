"""DICOM bombs received from a PACS (STOW-RS or C-STORE) are refused from their header with its bounds: a
deflated data set by its transfer syntax (0xC122) before anything is inflated, a header of a million elements as
not understood (0xC000) after at most 1 MiB of it, and an ordinary instance is still accepted."""

from __future__ import annotations

import tracemalloc

from service.pacs.intake import CANNOT_UNDERSTAND, TRANSFER_SYNTAX_NOT_SUPPORTED, Accepted, Refused, check_instance
from support.hostile_dicom import deflate_bomb, many_elements


def test_pacs_intake_refuses_dicom_bombs_from_the_header() -> None:
    check_instance(many_elements(10))  # pydicom imported before measuring
    bomb = deflate_bomb(64 * 1024)  # ~64 MiB once inflated
    tracemalloc.start()
    try:
        verdict = check_instance(bomb)
        peak_mib = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert isinstance(verdict, Refused) and verdict.status == TRANSFER_SYNTAX_NOT_SUPPORTED, verdict
    assert peak_mib < 4, f"{peak_mib:.0f} MiB allocated: the data set was inflated"
    verdict = check_instance(many_elements(1_000_000))
    assert isinstance(verdict, Refused) and verdict.status == CANNOT_UNDERSTAND, verdict
    assert isinstance(check_instance(many_elements(1000)), Accepted)
    verdict = check_instance(b"not dicom at all")
    assert isinstance(verdict, Refused) and verdict.status == CANNOT_UNDERSTAND, verdict
