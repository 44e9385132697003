# Two commands: `make demo` and `make test`. Both create .venv on first use.
# torch is pinned to the CPU wheel that lies on these machines' disk; installing it first means
# `torch>=2.6` in pyproject.toml is already satisfied and no CUDA build is ever downloaded.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo report test test-all clean report-screenshot test-hf-suite test-timm gpu-check

# ropekit.timm's tests need timm, and timm imports torchvision; torchvision must not be in .venv itself (transformers'
# vision-language modules import it whenever it is installed, and PyPI's x86_64 torchvision is a CUDA build whose C++
# ops cannot load beside the CPU torch). So torchvision 0.28.0 (the release made for torch 2.13.0) and timm go into an
# overlay folder, .timm-site (~60 MB), that only the timm step puts on PYTHONPATH; it adds no second torch (their other
# requirements are already in .venv; `pip check` proves it). tests/ropekit/timm/conftest.py says how torchvision's
# missing C++ ops are handled; the timm tests call none of them. No CUDA build is ever installed.
TIMM_SITE ?= .timm-site
TIMM_TORCHVISION_SPEC ?= torchvision==0.28.0

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q --no-cache-dir "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q --no-cache-dir -e .
	touch $@

$(VENV)/.dev: $(VENV)/.core
	$(BIN)/python -m pip install -q --no-cache-dir -e ".[dev]"
	touch $@

# headless Chromium for the report's browser test (tests/ropekit/report/test_browser.py); CI runs as root
$(VENV)/.chromium: $(BIN)/python
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null && apt-get clean) || \
		echo "warning: chromium could not be installed; the browser test skips (fails under CI=true)"
	touch $@

demo: $(VENV)/.core
	$(BIN)/ropekit inspect
	@echo "A visual report of a preset: make report (writes report/index.html; open it in any browser, offline)"

# `make report`: the figures need matplotlib (the `plot` extra)
$(VENV)/.plot: $(VENV)/.core
	$(BIN)/python -m pip install -q -e ".[plot]"
	touch $@

report: $(VENV)/.plot
	$(BIN)/ropekit report llama-3.1-8b --out report

test: $(VENV)/.dev $(VENV)/.chromium $(TIMM_SITE)/.timm
	$(BIN)/ruff check .
	$(BIN)/mypy --show-traceback
	$(BIN)/python -m pytest -q
	PYTHONPATH=$(TIMM_SITE) $(BIN)/python -m pytest -q -m timm tests/ropekit/timm

# the timm extra's pin, read from pyproject.toml (one place for it)
TIMM_SPEC = $(shell $(BIN)/python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['timm'])")

$(TIMM_SITE)/.timm: $(VENV)/.dev
	rm -rf $(TIMM_SITE)
	$(BIN)/python -m pip install -q --no-cache-dir --no-deps --target $(TIMM_SITE) "$(TIMM_TORCHVISION_SPEC)" "$(TIMM_SPEC)"
	PYTHONPATH=$(TIMM_SITE) $(BIN)/python -m pip check
	touch $@

# only the timm tests (tests/ropekit/timm): .venv with .timm-site on PYTHONPATH
test-timm: $(TIMM_SITE)/.timm
	PYTHONPATH=$(TIMM_SITE) $(BIN)/python -m pytest -q -m timm tests/ropekit/timm

test-all: $(VENV)/.dev
	$(BIN)/python -m pytest -q -m ""

# docs/report.png: the README's screenshot of `ropekit report llama-3.1-8b`
report-screenshot: $(VENV)/.dev $(VENV)/.chromium
	$(BIN)/python -m ropekit report llama-3.1-8b --out build/report
	$(BIN)/python -m ropekit.report.browser build/report/index.html docs/report.png 1280 1700

# transformers' own common model tests (from its PyPI sdist), unpatched and with every model patched by ropekit
test-hf-suite: $(VENV)/.dev
	$(BIN)/python tools/hf_suite/run.py $(if $(TRANSFORMERS_TESTS),--tests $(TRANSFORMERS_TESTS) --docs docs/hf.md) $(if $(FAMILIES),--families $(FAMILIES))

# on a machine with a CUDA GPU and its own torch + triton (not CI): the CUDA-path tests, then the GPU benchmark
# (bench/gpu.py; peers where importable: liger_kernel, and flash-attn's Triton rotary from FLASH_ATTN_SRC). Uses the
# python on PATH, not the venv (the venv holds the CPU torch). docs/kernels.md "Measured on a GPU" says how it ran.
GPU_PYTHON ?= python3
gpu-check:
	PYTHONPATH=$(CURDIR)/src:$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) -m pytest -q -p no:cacheprovider \
		tests/ropekit/rotation/test_triton_backend.py tests/ropekit/rotation/test_triton_cuda_paths.py \
		tests/ropekit/rotation/test_triton_positions.py tests/ropekit/rotation/test_triton_axes.py \
		tests/ropekit/test_axis_tables.py tests/ropekit/test_axis_tables_paths.py tests/ropekit/test_axis_memo.py tests/ropekit/test_module.py
	mkdir -p build
	PYTHONPATH=$(CURDIR)/src:$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) bench/gpu.py --out build/bench-gpu.json

clean:
	rm -rf $(VENV) $(TIMM_SITE) .venv-timm build src/*.egg-info .pytest_cache .hypothesis .mypy_cache
