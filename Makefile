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
BENCH_ARGS ?=

NIGHTLY ?= configs/nightly.yaml
NIGHT ?=
SWEEP_CONFIG = --config $(NIGHTLY) --config $(EXAMPLES)/labels.yaml $(if $(NIGHT),--night $(NIGHT))

.PHONY: setup run examples test clean nsys chromium sweep rerun report bench bench-hta

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

examples: $(EXAMPLES)/labels.yaml

# Deterministic: generated once, the same bytes every time (delete the folder to regenerate).
$(EXAMPLES)/labels.yaml: $(STAMP)
	$(BIN)/gpu-idle synth --example $(EXAMPLES)

run: examples
	$(BIN)/gpu-idle run $(EXAMPLES) --out $(OUT) --config $(EXAMPLES)/labels.yaml
	$(BIN)/gpu-idle report $(OUT) --out $(OUT)/report.html

# The nightly sweep on the example fleet; `make rerun REPORT=path` analyses one report again;
# `make report` rebuilds the latest night's outputs from stored results without analysing.
# All three work on today's night (UTC), or on NIGHT=YYYY-MM-DD when given; `make report`
# without NIGHT takes the latest night there is.
sweep: examples
	$(BIN)/gpu-idle sweep $(SWEEP_CONFIG)

rerun: examples
	@test -n "$(REPORT)" || (echo "usage: make rerun REPORT=path/to/report.sqlite" >&2; exit 2)
	$(BIN)/gpu-idle sweep $(SWEEP_CONFIG) --force "$(REPORT)"

report: $(STAMP)
	$(BIN)/gpu-idle sweep $(SWEEP_CONFIG) --report-only

test: $(STAMP) nsys chromium
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Benchmarks (issue 4; minutes, not part of make test): generated reports up to 3M kernels vs the
# sqlite3 CLI floor and nsys-ai 0.3.0 (own venv in bench/.venv-nsysai), a 200-report fleet, category
# accuracy. Prints the figures and writes bench/RESULTS.md. Needs the sqlite3 CLI (installed if missing).
bench: $(STAMP)
	command -v sqlite3 >/dev/null || { apt-get update && apt-get install -y sqlite3; }
	$(BIN)/python bench/run.py $(BENCH_ARGS)
	$(BIN)/python bench/hta.py

# Issue 15: gpu-idle vs HTA 0.5.0 (own venv in bench/.venv-hta) on the PyTorch profiler traces in
# ../shared/kineto: idle per rank, each difference explained, time per trace. Writes bench/RESULTS-hta.md.
bench-hta: $(STAMP)
	$(BIN)/python bench/hta.py

# A real Nsight Systems CLI (Debian's non-free nsight-systems 2022.4) unpacked into
# tools/nsys/ for the export tests; no GPU needed, the system's apt setup untouched.
nsys:
	bash scripts/install_nsys.sh

# Debian's chromium for the report's browser test (headless screenshot, console errors).
chromium:
	command -v chromium || (apt-get update && apt-get install -y --no-install-recommends chromium)

clean:
	rm -rf $(VENV) out $(EXAMPLES) .pytest_cache *.egg-info
