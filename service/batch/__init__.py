"""Batch referral scoring: a folder or CSV manifest in, one results row per image out.

Resumable and loss-free (atomic part files, see :mod:`service.batch.parts`), scored through the same
``service.inference.scoring.Scorer`` as ``POST /predict``, locally or on Ray Data. Entry point:
:func:`service.batch.cli.main` (``radscreen-batch score ...``).
"""
