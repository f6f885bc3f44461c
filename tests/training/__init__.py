"""Tests for the training package."""
