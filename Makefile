# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create the virtual environment in .venv from the lock file first.

PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint unit venv bootstrap bench protos

bootstrap:
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m uv --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet uv

venv: bootstrap
	$(UV) sync --frozen --quiet

demo: venv
	$(BIN)/intel-device-plugins-demo

lint: venv
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest -q

test: lint unit

protos: venv
	$(BIN)/python tools/genproto.py

bench: venv
	$(BIN)/python bench/run_all.py
