"""The inference core: decode and check an image, run the Monte Carlo draws, turn them into a referral.

Nothing here knows about HTTP (an import-linter contract in pyproject.toml keeps it so): rejections
are ``ImageRejected`` with a problem slug, and ``service/http/errors.py`` maps each slug to its status.
"""
