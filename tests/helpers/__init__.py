"""Test-only scaffolding (plain functions, no fixtures): what the benchmarks never need.

conftest.py files hold fixtures only; test modules import helpers from here or from ``support`` (what the
tests share with the benchmarks), never from a conftest.py or another test module. Not shipped: the wheel
packages models, training and service.
"""
