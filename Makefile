# osqueue: two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
NODE_PREFIX := $(VENV)/node
SEEDS ?= 100000
CHAOS_ROUNDS ?= 24
CHAOS_SEED ?=

.PHONY: setup test lint typecheck unit demo soak chaos bench proto clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml proto/osqueue/v1/queue.proto
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	npm install --silent --no-audit --no-fund --prefix $(NODE_PREFIX) azurite@3
	$(MAKE) --no-print-directory proto
	touch $@

proto:
	$(PY) -m osqueue.wire.codegen

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy --strict src/osqueue
	MYPYPATH=tests $(BIN)/mypy --strict -p sim
	$(PY) -m osqueue.wire.codegen --check

test: setup lint
	$(BIN)/pytest -q

unit: setup
	$(BIN)/pytest -q tests/unit

demo: setup
	$(BIN)/osqueue demo

soak: setup
	$(BIN)/pytest -q tests/simulation --seeds $(SEEDS) -p no:randomly

# Real processes, longer: CHAOS_ROUNDS rounds per backend (file, moto S3, Azurite);
# CHAOS_SEED replays a seed a failure printed.  Each backend prints a line of figures.
chaos: setup
	$(BIN)/pytest -q tests/chaos -p no:randomly -s --chaos-rounds $(CHAOS_ROUNDS) \
		$(if $(CHAOS_SEED),--chaos-seed $(CHAOS_SEED))

bench: setup
	$(BIN)/osqueue bench --json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info
