"""Scaffolding shared by the tests and the benchmarks: plain functions, no fixtures.

Synthetic fundus images and encoders, where the shared real photographs are, small artifacts, a service
in-process or as a subprocess, hostile inputs, the overload driver, the CUDA line of the installed
onnxruntime-gpu. ``tests/``, ``benchmarks/`` and ``scripts/gpu_check.py`` import from here; tests and
benchmarks never import each other and this package imports neither (import-linter contract in
pyproject.toml). It stands on the product (models, service, training) and is not shipped: the wheel
packages only models, training and service.
"""
