"""Hostile input: what the service refuses, bounds or survives, named by behaviour."""
