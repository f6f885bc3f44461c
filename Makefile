# One command per job. Each does its own set-up on a fresh machine (see scripts/setup.sh): `serve`
# installs only the core dependencies, `test`/`lint` add the dev extras to the same .venv.
PY ?= .venv/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup setup-serve test test-all lint serve bench gpu-check clean-docker

setup:
	bash scripts/setup.sh dev

setup-serve:
	bash scripts/setup.sh core

# RADSCREEN_SKIP_DOCKER=1 make test: without the container test (no Docker engine started, no image built)
test: setup
	bash scripts/test.sh

test-all: setup
	RADSCREEN_TEST_SLOW=1 bash scripts/test.sh -m ""

lint: setup
	$(PY) -m ruff check . && $(PY) -m mypy && .venv/bin/lint-imports --no-cache

serve: setup-serve
	.venv/bin/radscreen serve --host $(HOST) --port $(PORT)

# The GPU check (scripts/gpu_check.py): environment, `pytest -m gpu`, parity table, CUDA benchmarks, training
# steps, into runs/gpu-check/. No setup step: it reports the torch it finds (PY=python for the machine's own).
gpu-check:
	$(PY) scripts/gpu_check.py

# Remove the container test's images and build caches (listed at the end of `make test`)
clean-docker:
	bash scripts/docker-clean.sh
