"""Measurement scripts, each run as ``python benchmarks/<name>.py`` (see its docstring for the command).

A package so that the architecture contracts (import-linter, pyproject.toml) can see them: the benchmarks
stand on the product and on ``support``, never on the tests. Not shipped in the wheel.
"""
