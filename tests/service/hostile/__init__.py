"""Hostile peers and inputs, one behaviour under attack per file."""
