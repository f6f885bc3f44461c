"""Radial Screen: service package."""
