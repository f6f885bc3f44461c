"""Thin HTTP routers: they translate requests to engine calls and results to response models."""
