"""Hostile inputs against a real service, one file per behaviour."""
