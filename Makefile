# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create the virtual environment in .venv from the lock file first.

PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint unit venv bootstrap bench bench-k8s protos k8s-bins images helm-bin node-bins

bootstrap:
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m uv --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet uv

venv: bootstrap
	$(UV) sync --frozen --quiet

# Options for the demo, e.g. DEMO_ARGS="--node-runtime real" (root; after make k8s-bins node-bins images).
DEMO_ARGS ?=

demo: venv
	$(BIN)/python -m k8stest.demo $(DEMO_ARGS)

lint: venv
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache  # the layers in .importlinter

# Real Kubernetes binaries for tests/k8s, built from Go modules (cached under ~/.cache; a warm run
# takes well under a second, a cold one about a quarter of an hour).
k8s-bins:
	test/k8s/build.sh >/dev/null

# This project's container images as OCI archives under ~/.cache/intel-device-plugins/images (buildah and
# mmdebstrap from Debian's packages, installed when missing; a warm run finds the archives in seconds).
images: venv
	$(BIN)/python tools/images/build.py >/dev/null

# helm from Go modules for the chart tests (own module and cache, never test/k8s).
helm-bin:
	tools/helm/build.sh >/dev/null

# The real node's kubelet (same release, shares Go's build cache with k8s-bins) and containerd 2
# from Go modules, plus runc and CNI plugins from the distribution (installed when run as root).
node-bins: k8s-bins
	test/node/build.sh >/dev/null

# The fast tier: every test that needs nothing built (no Kubernetes, node, helm or images; a few minutes).
unit: venv
	$(BIN)/pytest -q -m "not needs_build"

# The whole suite, what CI runs: builds (or finds in the cache) what the integration tiers need.
test: lint k8s-bins images helm-bin node-bins
	$(BIN)/pytest -q

protos: venv
	$(BIN)/python tools/genproto.py >/dev/null

bench: venv
	$(BIN)/python bench/run_all.py

bench-k8s: venv k8s-bins
	$(BIN)/python bench/bench_k8s_harness.py start --runs 3
	$(BIN)/python bench/bench_k8s_harness.py rss --nodes 100 1000
