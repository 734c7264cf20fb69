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

.PHONY: setup run examples test clean nsys

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

examples: $(STAMP)
	$(BIN)/gpu-idle synth --example $(EXAMPLES)

run: examples
	$(BIN)/gpu-idle run $(EXAMPLES) --out $(OUT) --config $(EXAMPLES)/labels.yaml

test: $(STAMP) nsys
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# A real Nsight Systems CLI (Debian's non-free nsight-systems 2022.4) unpacked into
# tools/nsys/ for the export tests; no GPU needed, the system's apt setup untouched.
nsys:
	bash scripts/install_nsys.sh

clean:
	rm -rf $(VENV) out $(EXAMPLES) .pytest_cache *.egg-info
