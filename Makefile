# nmtk: `make test` and `make demo` work on a fresh clone (Python >= 3.10 and pip required).
#
# torch is pinned to the CPU wheel this project is developed with, and installed only when the
# virtual environment cannot import torch already: a user whose system Python has torch (a CUDA
# build, say) gets a venv that sees it (--system-site-packages) and keeps it.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH_VERSION := 2.13.0
OPUSTRAINER_VERSION := 0.5
EFLOMAL := eflomal>=2.0,<3
SHARED_DATA := $(abspath ../shared/data)
export NMTK_DATA ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA),)

SHELL := /bin/bash

.PHONY: install test demo pictures lint clean gpu-bench browser serve-bench

$(VENV)/.installed: pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  if $(PYTHON) -c "import torch" 2>/dev/null; then \
	    echo "using the torch of $(PYTHON) (venv with --system-site-packages)"; \
	    $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else $(PYTHON) -m venv $(VENV); fi; \
	fi
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==$(TORCH_VERSION)"
	@# eflomal (the terms modifier's aligner) has no wheel for this Python: pip builds its C aligner with
	@# -march=native, and a wheel pip cached on another CPU (AVX-512/AMX) dies with SIGILL on this one (AVX2)
	$(PY) -m pip install -q --no-cache-dir "$(EFLOMAL)"
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps "opustrainer==$(OPUSTRAINER_VERSION)"  # its sentencepiece==0.1.99 pin would replace nmtk's
	@touch $@

install: $(VENV)/.installed

# --durations: where the suite's time goes, printed at the end of every run (the next slow test shows itself)
test: install browser
	$(PY) -m pytest --durations=25

# nmtk serve's page is tested in a real headless browser: Debian's Chromium package, driven by playwright
# (its own browser download is not used). Installed here when missing, where apt-get can run as root.
browser:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing chromium (Debian package) for the browser test of nmtk serve"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } \
	    || echo "note: chromium could not be installed: the browser test of nmtk serve is skipped"; \
	else echo "note: no Chromium, and apt-get cannot run here: the browser test of nmtk serve is skipped"; fi

DEMO_RECIPE := recipes/multi30k-en-de.toml
DEMO_RUN    := runs/multi30k-en-de
DEMO_DATA   := data-bin/multi30k-en-de
NMTK        := $(VENV)/bin/nmtk

# prepare -> train (10 minutes) -> average -> translate test_2016_flickr -> score
demo: install
	$(NMTK) prepare $(DEMO_RECIPE)
	$(NMTK) train $(DEMO_RECIPE)
	$(NMTK) average $(DEMO_RUN) --last 5 --force
	$(NMTK) translate -m $(DEMO_RUN) -i $(DEMO_DATA)/test_2016_flickr.raw.en -o $(DEMO_RUN)/test_2016_flickr.hyp.de --force
	@echo; echo "Three example translations (source / nmtk / reference):"
	@paste -d '\n' <(head -3 $(DEMO_DATA)/test_2016_flickr.raw.en | sed 's/^/  src: /') \
	                <(head -3 $(DEMO_RUN)/test_2016_flickr.hyp.de | sed 's/^/  hyp: /') \
	                <(head -3 $(DEMO_DATA)/test_2016_flickr.raw.de | sed 's/^/  ref: /') \
	                <(printf '\n\n\n')
	$(NMTK) score -r $(DEMO_DATA)/test_2016_flickr.raw.de $(DEMO_RUN)/test_2016_flickr.hyp.de --metrics bleu,chrf,ter

# docs/pictures/ from the demo run: attention on a sentence with a pronoun, and the training curves
PICTURE_SENTENCE := The man is feeding the dog because it is hungry.
pictures: install
	$(NMTK) attention -m $(DEMO_RUN) "$(PICTURE_SENTENCE)" -o docs/pictures --force
	$(NMTK) plot $(DEMO_RUN) -o docs/pictures/curves.png --force

# nmtk serve on loopback: 1, 8 and 64 concurrent clients against offline translate (needs `make demo`'s run)
serve-bench: install
	$(PY) benchmarks/serve.py

# GPU training and decoding of the paper's models through the real Trainer (CPU proxies without CUDA)
gpu-bench: install
	$(PY) benchmarks/gpu.py

lint: install
	$(VENV)/bin/ruff check nmtk tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
