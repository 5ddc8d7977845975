# Foundry Gateway. Each target sets up what it needs in a local virtualenv (.venv).
# Needs only Python 3.11+ on PATH (as python3, or pass PYTHON=/path/to/python3.11).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

# Two hashed locks from one resolution: the runtime dependencies alone (make run, the Dockerfile),
# and the development set, runtime + test + docs at the same versions (make test, make docs, CI).
RUNTIME_LOCK := requirements/runtime.lock.txt
DEV_LOCK     := requirements/dev.lock.txt
UV     ?= uv==0.13.9

# Python keeps the modules it compiles (__pycache__, ignored by git) even where the environment says
# not to write bytecode (this machine and CI do), and uv, unlike pip, writes none at install: without
# them every process compiled its imports from source (`import app.main`: 7.6 s of CPU, 3.0 s with
# them; collecting the fast tests: 27 s per xdist worker, 10 s), and the tests start hundreds of
# processes. Written on first import, only what is imported is compiled (uv's --compile-bytecode
# compiled the whole dev lock: ~80 s more install on 2 cores).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-fast test-slow lint install install-test lock openapi docs bench bench-litellm bench-peers migrate clean chaos chaos-repeat flaky doctor

run: $(VENV)/.installed-run  ## install and serve the gateway (mock provider by default) on $(HOST):$(PORT)
	mkdir -p var  # the embedded records database, var/foundry.db (FOUNDRY_DATA_DIR)
	$(BIN)/foundry-gateway serve --host $(HOST) --port $(PORT)

# The fast tests run on TEST_WORKERS pytest-xdist workers, the slow ones on SLOW_WORKERS (each
# worker with its own private Redis, databases and ports). Much of a fast test's time is waiting
# (uvicorn's shutdown steps, loopback round trips), so 4 workers fill 2 cores: on this 2-core machine,
# 191 s with 4, 231 s with 3. The slow tests wait on the processes they start: 132 s with 2 workers,
# 125 s with 3, so 2. TEST_WORKERS=0 / SLOW_WORKERS=0: one process.
TEST_WORKERS ?= 4
SLOW_WORKERS ?= 2
xdist = $(if $(filter 0,$(1)),,-n $(1) --dist worksteal)
XDIST := $(call xdist,$(TEST_WORKERS))
SLOW_XDIST := $(call xdist,$(SLOW_WORKERS))

# mypy (one core for ~14 s) runs beside the fast tests, which mostly wait; its output follows theirs.
# Every stage runs whatever the ones before it gave; the last line names each stage that failed,
# and the status is 1 if any did. pytest's 5 (its marker selected no test) fails no stage, but a
# run in which neither pytest stage ran a test fails.
test: $(VENV)/.installed-test  ## install the test dependencies; ruff, mypy, the fast tests, the slow ones: every stage runs, failures listed at the end
	@failed=""; ran=""; \
	stage() { name=$$1; shift; echo "== make test: $$name: $$*"; began=$$(date +%s); "$$@"; rc=$$?; \
	  echo "== make test: $$name: exit $$rc in $$(( $$(date +%s) - began )) s"; \
	  case "$$name:$$rc" in fast:0|slow:0) ran=yes;; fast:1|slow:1) ran=yes; failed="$$failed $$name(exit 1)";; \
	    *:0|fast:5|slow:5) ;; *) failed="$$failed $$name(exit $$rc)";; esac; }; \
	stage ruff $(BIN)/ruff check app tests bench scripts; \
	typed=$$(mktemp); $(BIN)/mypy > $$typed 2>&1 & typing=$$!; \
	stage fast $(BIN)/python -m pytest -m "not slow" $(XDIST); \
	mypy_run_beside_fast() { wait $$typing; rc=$$?; cat $$typed; return $$rc; }; \
	stage mypy mypy_run_beside_fast; rm -f $$typed; \
	stage slow $(BIN)/python -m pytest -m "slow and not bench" $(SLOW_XDIST); \
	if [ -z "$$ran" ]; then failed="$$failed (no test ran)"; fi; \
	if [ -n "$$failed" ]; then echo "== make test: FAILED:$$failed"; exit 1; fi; \
	echo "== make test: every stage passed: ruff, mypy, fast, slow"

test-fast: $(VENV)/.installed-test  ## the tests not marked slow (no benchmarks, no multi-process topologies)
	$(BIN)/python -m pytest -m "not slow" $(XDIST)

test-slow: $(VENV)/.installed-test  ## the multi-process topology tests
	$(BIN)/python -m pytest -m "slow and not bench" $(SLOW_XDIST)

lint: $(VENV)/.installed-test  ## ruff (lint + import order) and mypy only
	$(BIN)/ruff check app tests bench scripts
	$(BIN)/mypy

install: $(VENV)/.installed-run
install-test: $(VENV)/.installed-test

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Foundry Gateway needs Python 3.11+ (found " + sys.version.split()[0] + "); pass PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)

$(VENV)/bin/uv: | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet '$(UV)'

# Installs come from a lock (exact versions, hashes checked), then the project itself without
# resolving again: the runtime lock for serving, the dev lock (a superset) for tests and docs.
# uv installs them (the pinned version `make lock` resolves with): the dev lock took 68 s with pip
# and 23 s with uv on this machine, from the same lock with the same hash checks.
UVPIP = $(BIN)/uv pip install --quiet --python $(BIN)/python
$(VENV)/.installed-run: pyproject.toml $(RUNTIME_LOCK) | $(VENV)/bin/uv
	$(UVPIP) --require-hashes -r $(RUNTIME_LOCK)
	$(UVPIP) --no-deps -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(DEV_LOCK) | $(VENV)/bin/uv
	$(UVPIP) --require-hashes -r $(DEV_LOCK)
	$(UVPIP) --no-deps -e '.[test,docs]'
	@touch $@ $(VENV)/.installed-run $(VENV)/.installed-docs

# The dev lock is resolved first (the versions in the existing lock are kept where they still fit),
# then the runtime lock as its subset: constrained by the dev lock, so both name the same versions.
lock: | $(VENV)/bin/uv  ## re-resolve pyproject.toml's dependencies into requirements/dev.lock.txt and runtime.lock.txt
	mkdir -p requirements
	$(BIN)/uv pip compile pyproject.toml --extra test --extra docs --universal --python-version 3.11 --generate-hashes \
	  --no-header --annotation-style line --quiet -o $(DEV_LOCK)
	$(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes \
	  --no-header --annotation-style line --quiet -c $(DEV_LOCK) -o $(RUNTIME_LOCK)

migrate: $(VENV)/.installed-run  ## migrate the records database (FOUNDRY_DATABASE_URL, default var/foundry.db)
	$(BIN)/foundry-gateway migrate

openapi: $(VENV)/.installed-run  ## regenerate openapi/openapi.json from the app
	$(BIN)/python scripts/export_openapi.py

docs: $(VENV)/.installed-docs  ## build the documentation site into site/ (MkDocs, strict: a broken link fails)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # the variable silences the theme's end-of-life banner

$(VENV)/.installed-docs: pyproject.toml $(DEV_LOCK) | $(VENV)/bin/uv
	$(UVPIP) --require-hashes -r $(DEV_LOCK)
	$(UVPIP) --no-deps -e '.[docs]'
	@touch $@

CHAOS ?= --profile short
chaos: $(VENV)/.installed-test  ## the chaos soak (bench/chaos.py): 3 replicas behind nginx, Redis, PostgreSQL, faults; fails on a broken invariant
	mkdir -p bench/results
	$(BIN)/python bench/chaos.py $(CHAOS) --json bench/results/chaos.json

N ?= 10
SEED ?= 100
chaos-repeat: $(VENV)/.installed-test  ## the short soak N times (N=10), seeds SEED+1..SEED+N; fails unless every run broke nothing
	mkdir -p bench/results
	@failed=""; for i in $$(seq 1 $(N)); do seed=$$(($(SEED) + i)); \
	  echo "chaos-repeat: run $$i of $(N), seed $$seed"; \
	  $(BIN)/python bench/chaos.py $(CHAOS) --seed $$seed --json bench/results/chaos-$$seed.json || failed="$$failed $$seed"; \
	done; \
	if [ -n "$$failed" ]; then echo "chaos-repeat: $(N) runs, broken invariants with seeds$$failed"; exit 1; fi; \
	echo "chaos-repeat: $(N) of $(N) runs with 0 broken invariants (seeds $$(($(SEED) + 1))..$$(($(SEED) + $(N))))"

BENCH_OUT ?= bench/results
bench: $(VENV)/.installed-test  ## the benchmarks' smoke tests, then the benchmarks in bench/; ends with one line per performance goal
	$(BIN)/python -m pytest -m bench $(SLOW_XDIST)
	mkdir -p $(BENCH_OUT)
	$(BIN)/python bench/run.py --gate --facades --json $(BENCH_OUT)/run.json
	$(BIN)/python bench/paced_bench.py --json $(BENCH_OUT)/paced.json
	$(BIN)/python bench/open_bench.py
	$(BIN)/python bench/transport_bench.py
	$(BIN)/python bench/gate_bench.py
	$(BIN)/python bench/facade_bench.py
	$(BIN)/python bench/records_bench.py
	$(BIN)/python bench/cache_bench.py --json $(BENCH_OUT)/cache.json
	$(BIN)/python bench/store_bench.py
	$(BIN)/python bench/redis_writes.py
	$(BIN)/python bench/workers_bench.py --json $(BENCH_OUT)/workers.json
	$(BIN)/python bench/limiter_bench.py
	$(BIN)/python bench/routing_bench.py
	$(BIN)/python bench/tracing_bench.py --json $(BENCH_OUT)/tracing.json
	$(BIN)/python bench/goals.py $(BENCH_OUT)/run.json $(BENCH_OUT)/paced.json --peers $(BENCH_OUT)/peers.json \
	  --json $(BENCH_OUT)/goals.json  # peers.json: from make bench-peers, when it ran

LITELLM_VENV ?= .venv-litellm
$(LITELLM_VENV)/bin/litellm:  ## LiteLLM in a venv of its own: a comparison, never a dependency
	$(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/python -m pip install --quiet 'litellm[proxy]'

bench-litellm: $(VENV)/.installed-test $(LITELLM_VENV)/bin/litellm  ## optional: CPU per event vs the LiteLLM proxy
	$(BIN)/python bench/litellm_bench.py --litellm $(LITELLM_VENV)/bin/litellm

# The peers, each in a throwaway environment of its own and pinned (bench/peers/): LiteLLM's proxy
# in a venv, Portkey's gateway from its package-lock.json (node_modules is never committed).
PEERS_LITELLM ?= .venv-peers-litellm
PORTKEY_DIR   := bench/peers/portkey
$(PEERS_LITELLM)/bin/litellm: bench/peers/requirements.txt
	$(PYTHON) -m venv $(PEERS_LITELLM)
	$(PEERS_LITELLM)/bin/python -m pip install --quiet -r bench/peers/requirements.txt
	@touch $@

$(PORTKEY_DIR)/node_modules/.package-lock.json: $(PORTKEY_DIR)/package-lock.json
	cd $(PORTKEY_DIR) && npm ci --ignore-scripts --no-audit --no-fund

bench-peers: $(VENV)/.installed-test $(PEERS_LITELLM)/bin/litellm $(PORTKEY_DIR)/node_modules/.package-lock.json  ## the floor, Foundry, LiteLLM and Portkey in the same rounds: the ratio table and the direct-vs-gateway subtraction
	mkdir -p $(BENCH_OUT)
	$(BIN)/python bench/peers_bench.py --litellm $(PEERS_LITELLM)/bin/litellm --portkey $(PORTKEY_DIR) \
	  --json $(BENCH_OUT)/peers.json

clean:
	rm -rf $(VENV) $(LITELLM_VENV) $(PEERS_LITELLM) $(PORTKEY_DIR)/node_modules .pytest_cache .hypothesis site

# The tests most exposed to timing (replicas on Redis, the facades through real clients), run
# FLAKY_RUNS times in a row: a test that fails in any run is named with the count of its failures.
FLAKY_RUNS  ?= 5
FLAKY_TESTS ?= $(sort $(wildcard tests/test_*replicas*.py tests/test_compat_*.py)) tests/test_dropin_fields.py
flaky: $(VENV)/.installed-test  ## the replica and facade tests FLAKY_RUNS (5) times; names each test that failed in any run
	@log=$$(mktemp); run=$$(mktemp); bad=0; \
	for i in $$(seq $(FLAKY_RUNS)); do echo "== make flaky: run $$i of $(FLAKY_RUNS)"; \
	  $(BIN)/python -m pytest -p no:cacheprovider -rf $(FLAKY_TESTS) > $$run 2>&1; rc=$$?; \
	  cat $$run >> $$log; grep -E '^(FAILED|ERROR) ' $$run; tail -n 1 $$run; [ $$rc -eq 0 ] || bad=$$((bad + 1)); done; \
	echo "== make flaky: failures per test"; grep -E '^(FAILED|ERROR) ' $$log | sed 's/ - .*//' | sort | uniq -c | sort -rn; \
	rm -f $$log $$run; \
	if [ $$bad -gt 0 ]; then echo "== make flaky: $$bad of $(FLAKY_RUNS) runs failed"; exit 1; fi; \
	echo "== make flaky: $(FLAKY_RUNS) of $(FLAKY_RUNS) runs passed"

# DOCTOR_INSTALL=1 also times `make run` from a fresh clone; DOCTOR_SUITES=1 the fast and the slow suite.
doctor: $(VENV)/.installed-run $(if $(DOCTOR_SUITES),$(VENV)/.installed-test)  ## print the install size (runtime lock), the CLI's start time; DOCTOR_INSTALL=1: make run's; DOCTOR_SUITES=1: the suites
	$(BIN)/python scripts/doctor.py $(if $(DOCTOR_INSTALL),--install) $(if $(DOCTOR_SUITES),--suites)

.PHONY: floors
floors:  ## install each direct dependency at its declared floor in a throwaway venv and smoke-test the app
	$(PYTHON) scripts/check_floors.py
