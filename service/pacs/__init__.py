"""Radial Screen in the hospital's imaging flow: DICOM in from a PACS, a DICOM Structured Report back.

- ``settings``: the ``RADSCREEN_PACS_*`` knobs;
- ``store``: the durable spool (instances on disk, fsynced and renamed, before they are acknowledged);
- ``intake``: what an instance must be to be stored, and the DIMSE status of each refusal;
- ``stow``: DICOMweb STOW-RS request parsing and its DICOM JSON response (the router is ``service.api.dicomweb``);
- ``listener``: the C-STORE receiver (pynetdicom), ``radscreen dicom-listen``;
- ``grading``: a study's photographs -> the exam (the same scoring and exam rule as ``POST /v1/exams``);
- ``sr``: the exam as a Comprehensive SR (highdicom TID 1500 measurement report) with deterministic UIDs;
- ``sr_header``: what the SR carries of a photograph's header, each value checked against its VR, kept or empty;
- ``delivery``: the SR sent to the configured archive (C-STORE SCU or STOW-RS), retried with backoff;
- ``worker``: the loop that grades complete or quiet studies and delivers their results, exactly once.

No module here logs a patient identifier or a UID; log lines carry counts and opaque digests only.
"""
