"""The screening use cases every surface shares: one patient visit (both eyes) graded into one typed result.

``exam``: the typed exam result and the one exam rule (plain Python: the batch job, FHIR and the SR render it);
``grading``: a visit's photographs scored through the model host into that result (the HTTP route and the PACS
worker call it).
"""
