"""Radial Screen: training package."""
