"""Radial Screen: models package, the Bayesian core that training and serving both stand on.

Grouped by job: ``nn`` (the Bayesian network, its maths and its fixed-draw serving form), ``serving`` (that form
in ONNX Runtime, fp32 and int8), ``image`` (decode, field of view, preprocessing, transform, quality gate),
``platform`` (CPU and CUDA capabilities, the device and precision decision), ``io`` (atomic writes, CSV
cells), ``outcome`` (the screening decision and its words) and ``artifact`` (the model artifact's format);
``models/default/`` is the embedded artifact, data, not a package.
"""
