"""Hostile inputs, one file per behaviour."""
