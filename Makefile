# osqueue: two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
NODE_PREFIX := $(VENV)/node
SEEDS ?= 100000
REAL_SEEDS ?= 32
CHAOS_ROUNDS ?= 24
CHAOS_SEED ?=

.PHONY: setup test lint typecheck unit demo soak mutate chaos bench proto clean

setup: $(VENV)/.installed

# Debian packages the tests drive: headless Chromium and its driver (the
# dashboard's browser test) and tmux (osqueue top's terminal test).
SYSTEM_TOOLS := /usr/bin/chromium:chromium /usr/bin/chromedriver:chromium-driver /usr/bin/tmux:tmux

$(VENV)/.installed: pyproject.toml proto/osqueue/v1/queue.proto
	@missing=""; for tool in $(SYSTEM_TOOLS); do \
	  test -x "$${tool%%:*}" || missing="$$missing $${tool#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (apt-get)"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
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
	MYPYPATH=tests $(BIN)/mypy --strict -p sim -p servers
	$(PY) -m osqueue.wire.codegen --check

test: setup lint
	$(BIN)/pytest -q

unit: setup
	$(BIN)/pytest -q tests/unit

demo: setup
	$(BIN)/osqueue demo

# the simulation: SEEDS seeds in memory, REAL_SEEDS seeds over moto's S3 and over Azurite
soak: setup
	$(BIN)/pytest -q tests/simulation --seeds $(SEEDS) --real-seeds $(REAL_SEEDS) -p no:randomly

# Bugs planted in the real code, one at a time, each against the 600 seeds of
# `make test` (tests/sim/mutations.py; docs/reliability.md has the table and the
# run time).  Fails if a mutation does not apply or fewer than 10 seeds catch it.
mutate: setup
	PYTHONPATH=tests $(PY) -m sim.mutate

# Real processes, longer: CHAOS_ROUNDS rounds per backend (file, moto S3, Azurite) on a
# fresh seed (`make test` runs the fixed seeds of tests/chaos/seeds.py instead);
# CHAOS_SEED replays a seed a failure printed.  Each backend prints a line of figures.
chaos: setup
	$(BIN)/pytest -q tests/chaos -p no:randomly -s --chaos-rounds $(CHAOS_ROUNDS) \
		--chaos-seed $(or $(CHAOS_SEED),random)

bench: setup
	$(BIN)/osqueue bench --json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info
