"""Hostile input, round three: DICOM bombs, work before admission, batch reads outside the one reader, and
exams that merge patients. Each module reproduces findings of the red-team pass and holds the fix to them."""
