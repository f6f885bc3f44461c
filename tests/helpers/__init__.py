"""The one shared place for test scaffolding (plain functions, no fixtures), used by tests and benchmarks.

conftest.py files hold fixtures only; test modules and benchmarks/*.py import helpers from here, never
from a conftest.py or another test module. Not shipped: the wheel packages models, training and service.
"""
