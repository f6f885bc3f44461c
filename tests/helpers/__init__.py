"""Shared test scaffolding: tiny model artifacts and subprocess readiness, used across test folders."""
