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

# The GPU lease script (scripts/gpu_lease.sh -> scripts/gpu_check.py): environment, sizes, a training run, its
# artifact in parts, `pytest -m gpu tests/gpu`, parity, CUDA benchmarks, into runs/gpu-check/ step by step.
# No setup step and no venv: the machine's own python3 (GPU_PY=... for another). docs/deploy.md, "GPU lease".
GPU_PY ?= python3
gpu-check:
	PY=$(GPU_PY) bash scripts/gpu_lease.sh runs/gpu-check 540

# Remove the container test's images and build caches (listed at the end of `make test`)
clean-docker:
	bash scripts/docker-clean.sh
