"""Files the product writes, each through one rule: the atomic file replacement behind every file that
must never be left half-written (``atomic.py``: a reader sees the old file or the whole new one; and the
sha256 files are checked with) and the rule of every CSV cell (``csv_cells.py``: formula triggers guarded,
control characters escaped, a spreadsheet's cell limit kept). The artifact's own format is ``models.artifact``.
"""
