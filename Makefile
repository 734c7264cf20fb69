# gpu-idle: every target sets up what it needs (a virtual environment in .venv).
#   make run   - set up, generate the built-in example fleet, run the main job on it
#   make test  - set up and run the test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
EXAMPLES := examples/fleet
OUT ?= out/example
PYTEST_ARGS ?=

.PHONY: setup run examples test clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

examples: $(STAMP)
	$(BIN)/gpu-idle synth --example $(EXAMPLES)

run: examples
	$(BIN)/gpu-idle run $(EXAMPLES) --out $(OUT) --config configs/example.yaml

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) out $(EXAMPLES) .pytest_cache *.egg-info
