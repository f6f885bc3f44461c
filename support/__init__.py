"""Scaffolding shared by the tests and the benchmarks: plain functions, no fixtures, no test assertions.

Synthetic fundus images and encoders, where the shared real photographs are, small artifacts, a service
in-process or as a subprocess, hostile inputs and the overload driver. Both ``tests/`` and ``benchmarks/``
import from here; neither imports the other, and this package imports neither (import-linter contract in
pyproject.toml). It stands on the product (models, service, training) and is not shipped: the wheel
packages only models, training and service.
"""
