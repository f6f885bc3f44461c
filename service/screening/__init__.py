"""The screening use cases every surface shares (HTTP, the PACS link, the batch job), none of them HTTP.

``exam``: the typed exam result and the one exam rule (plain Python: the batch job, FHIR and the SR render it);
``grading``: a visit's photographs scored through the model host into that result (the HTTP route and the PACS
worker call it); ``identity``: whether an exam's photographs can be one patient's visit; ``payload``: one
photograph's answer (the ``/v1/predict`` body every surface shows); ``identifiers``: the one rule of every
echoed identifier (opaque client ids, DICOM UIDs).
"""
