"""The screening outcome, written once: the referral rules (uncertain, referable) and the outcome of
one photograph and of one patient visit (``decision.py``), and one photograph's result in words
(``wording.py``). Every surface (the JSON answer, the clinician pages, FHIR, the DICOM SR, the batch rows,
the metrics) calls them; none restates them.
"""
