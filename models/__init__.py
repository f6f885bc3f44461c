"""Radial Screen: models package."""
