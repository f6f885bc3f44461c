"""What the product says to other hospital systems in their own formats: FHIR R4 (one image ``fhir``, one
visit ``fhir_exam``). The DICOM link (C-STORE, STOW-RS, the SR) is ``service.pacs``."""
