# Two commands: `make demo` and `make test`. Both create .venv on first use.
# torch is pinned to the CPU wheel that lies on these machines' disk; installing it first means
# `torch>=2.4` in pyproject.toml is already satisfied and no CUDA build is ever downloaded.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test test-all clean test-hf-suite

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev: $(VENV)/.core
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@

demo: $(VENV)/.core
	$(BIN)/ropekit inspect

test: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

test-all: $(VENV)/.dev
	$(BIN)/python -m pytest -q -m ""

# transformers' own common model tests (from its PyPI sdist), unpatched and with every model patched by ropekit
test-hf-suite: $(VENV)/.dev
	$(BIN)/python tools/hf_suite/run.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
