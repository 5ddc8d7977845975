# Foundry Gateway. Each target sets up what it needs in a local virtualenv (.venv).
# Needs only Python 3.11+ on PATH (as python3, or pass PYTHON=/path/to/python3.11).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test lint install install-test openapi docs bench bench-litellm migrate clean

run: $(VENV)/.installed-run  ## install and serve the gateway (mock provider by default) on $(HOST):$(PORT)
	mkdir -p var  # the embedded records database, var/foundry.db (FOUNDRY_DATA_DIR)
	$(BIN)/uvicorn app.main:app --host $(HOST) --port $(PORT) --no-access-log --timeout-graceful-shutdown 10

test: $(VENV)/.installed-test  ## install the test dependencies; lint, type-check, then run the whole suite
	$(BIN)/ruff check app tests bench scripts
	$(BIN)/mypy
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-test  ## ruff (lint + import order) and mypy only
	$(BIN)/ruff check app tests bench scripts
	$(BIN)/mypy

install: $(VENV)/.installed-run
install-test: $(VENV)/.installed-test

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Foundry Gateway needs Python 3.11+ (found " + sys.version.split()[0] + "); pass PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@ $(VENV)/.installed-run

migrate: $(VENV)/.installed-run  ## migrate the records database (FOUNDRY_DATABASE_URL, default var/foundry.db)
	$(BIN)/python -m app.records migrate

openapi: $(VENV)/.installed-run  ## regenerate openapi/openapi.json from the app
	$(BIN)/python scripts/export_openapi.py

docs: $(VENV)/.installed-docs  ## build the documentation site into site/ (MkDocs, strict: a broken link fails)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # the variable silences the theme's end-of-life banner

$(VENV)/.installed-docs: pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	@touch $@

BENCH_OUT ?= bench/results
bench: $(VENV)/.installed-test  ## run the benchmarks in bench/; ends with one line per performance goal, from this run
	mkdir -p $(BENCH_OUT)
	$(BIN)/python bench/run.py --gate --facades --json $(BENCH_OUT)/run.json
	$(BIN)/python bench/paced_bench.py --json $(BENCH_OUT)/paced.json
	$(BIN)/python bench/open_bench.py
	$(BIN)/python bench/transport_bench.py
	$(BIN)/python bench/gate_bench.py
	$(BIN)/python bench/facade_bench.py
	$(BIN)/python bench/records_bench.py
	$(BIN)/python bench/store_bench.py
	$(BIN)/python bench/limiter_bench.py
	$(BIN)/python bench/routing_bench.py
	$(BIN)/python bench/goals.py $(BENCH_OUT)/run.json $(BENCH_OUT)/paced.json --json $(BENCH_OUT)/goals.json

LITELLM_VENV ?= .venv-litellm
$(LITELLM_VENV)/bin/litellm:  ## LiteLLM in a venv of its own: a comparison, never a dependency
	$(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/python -m pip install --quiet 'litellm[proxy]'

bench-litellm: $(VENV)/.installed-test $(LITELLM_VENV)/bin/litellm  ## optional: CPU per event vs the LiteLLM proxy
	$(BIN)/python bench/litellm_bench.py --litellm $(LITELLM_VENV)/bin/litellm

clean:
	rm -rf $(VENV) $(LITELLM_VENV) .pytest_cache .hypothesis site

.PHONY: floors
floors:  ## install each direct dependency at its declared floor in a throwaway venv and smoke-test the app
	$(PYTHON) scripts/check_floors.py
