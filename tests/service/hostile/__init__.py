"""Hostile inputs: each file one behaviour under attack, on the real service, PACS path and batch job."""
