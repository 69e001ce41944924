# nmtk: `make test` and `make demo` work on a fresh clone (Python >= 3.10 and pip required).
#
# torch is pinned to the CPU wheel this project is developed with, and installed only when the
# virtual environment cannot import torch already: a user whose system Python has torch (a CUDA
# build, say) gets a venv that sees it (--system-site-packages) and keeps it.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH_VERSION := 2.13.0
SHARED_DATA := $(abspath ../shared/data)
export NMTK_DATA ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA),)

.PHONY: install test demo lint clean

$(VENV)/.installed: pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  if $(PYTHON) -c "import torch" 2>/dev/null; then \
	    echo "using the torch of $(PYTHON) (venv with --system-site-packages)"; \
	    $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else $(PYTHON) -m venv $(VENV); fi; \
	fi
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==$(TORCH_VERSION)"
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

install: $(VENV)/.installed

test: install
	$(PY) -m pytest

demo: install
	$(VENV)/bin/nmtk --help
	$(VENV)/bin/nmtk recipe show recipes/multi30k-en-de.toml

lint: install
	$(VENV)/bin/ruff check nmtk tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
