"""Thin HTTP routers: they translate requests to model-host calls and results to response models."""
