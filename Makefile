# gpu-idle: every target sets up what it needs (a virtual environment in .venv).
#   make run   - set up, generate the built-in example fleet, run the main job on it
#   make test  - set up, install what the tests need (system packages: root) and run the whole suite (CI)
#   make check - set up and run every test that needs no system package and is not marked slow: the quick
#                loop, then the quick performance guard (make bench-quick)
#   make check-changed - only the tests the working tree's changes reach (seconds)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
EXAMPLES := examples/fleet
OUT ?= out/example
PYTEST_ARGS ?=
BENCH_ARGS ?=
# bench/hta.py's options (--quick, --skip-big, --big-only, --big-kernels N, --repeat N); `make bench
# BENCH_ARGS=--quick` passes --quick on to it too unless HTA_ARGS is given.
HTA_ARGS ?= $(filter --quick,$(BENCH_ARGS))

NIGHTLY ?= configs/nightly.yaml
NIGHT ?=
SWEEP_CONFIG = --config $(NIGHTLY) --config $(EXAMPLES)/labels.yaml $(if $(NIGHT),--night $(NIGHT))

.PHONY: setup run examples test check check-changed system-note clean nsys chromium slurm promtool k8s-schemas sweep rerun report bench \
	bench-hta bench-quick

setup: $(STAMP)

# The editable install also compiles the loader's C reader (setup.py: pipeline/load/_btree.c, with gcc and the
# Python headers; without them it installs without it and the loader reads every table through SQLite).
$(STAMP): pyproject.toml setup.py pipeline/load/_btree.c
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
# without NIGHT takes the latest night not in the future.
sweep: examples
	$(BIN)/gpu-idle sweep $(SWEEP_CONFIG)

rerun: examples
	@test -n "$(REPORT)" || (echo "usage: make rerun REPORT=path/to/report.sqlite" >&2; exit 2)
	$(BIN)/gpu-idle sweep $(SWEEP_CONFIG) --force "$(REPORT)"

report: $(STAMP)
	$(BIN)/gpu-idle sweep $(SWEEP_CONFIG) --report-only

# The system packages `make test` installs machine-wide when missing (apt-get: needs root), said before
# anything starts: Chromium for the report's browser tests, Slurm and munge for tests/test_slurm.py,
# Prometheus for its promtool (tests/test_prom.py checks the metrics file).
# scripts/apt_install.sh waits (up to 10 minutes, a line every 30 s) for another apt/dpkg holding its lock.
CHROMIUM_PACKAGES := chromium
SLURM_PACKAGES := slurm-wlm munge slurmdbd mariadb-server
PROMETHEUS_PACKAGES := prometheus
APT_INSTALL := bash scripts/apt_install.sh

# TEST_WORKERS processes (pytest-xdist, one module per process); the run ends with its wall and CPU time.
TEST_WORKERS ?= 2
test: system-note $(STAMP) nsys chromium slurm promtool k8s-schemas
	$(BIN)/python scripts/timed.py "make test" -- $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

system-note:
	@echo "make test: installs the system packages $(CHROMIUM_PACKAGES) $(SLURM_PACKAGES) $(PROMETHEUS_PACKAGES) with apt-get when missing" \
	  "(machine-wide: needs root) and unpacks the Nsight Systems CLI into tools/nsys (no root);" \
	  "\`make check\` runs the tests that need none of them"

# The edit-test loop (issue 43: at most 3 min and 5 CPU-min on 2 idle cores): every test that needs no
# system package and is not marked slow, on CHECK_WORKERS processes (pytest-xdist); the tests marked
# needs_nsys, needs_chromium, needs_slurm or needs_promtool are skipped, the reason shown, and those marked slow
# (1.5 CPU-s or more each) left out, counted (tests/conftest.py --quick). It ends with its wall and CPU time. A module's
# tests stay on one process (--dist loadscope), so its module fixtures are made once (tests/test_gpu_pages.py: 25 % less CPU than --dist load).
# CHECK_ARGS: more pytest options (e.g. tests/test_x.py, -x).
# After the tests pass, the whole-suite check (no CHECK_ARGS) prints the quick performance guard
# (bench-quick, below); BENCH_QUICK=0 leaves it out, BENCH_QUICK=1 adds it to a run with CHECK_ARGS.
CHECK_WORKERS ?= 2
CHECK_ARGS ?=
BENCH_QUICK ?= $(if $(strip $(CHECK_ARGS)),0,1)
check: $(STAMP) k8s-schemas
	$(BIN)/python scripts/timed.py "make check" -- $(BIN)/python -m pytest --quick -n $(CHECK_WORKERS) --dist loadscope \
	  $(CHECK_ARGS) $(if $(filter 1,$(BENCH_QUICK)),--and-then $(BIN)/python bench/quick.py $(BENCH_QUICK_ARGS))

# The minute-by-minute loop (issue 43): only the tests that ran code the working tree changed since the last
# check-changed (pytest-testmon: it records which lines of pipeline/ and tests/ each test ran, in
# .testmondata). The first run, or one after a dependency changed, runs every test. A test that reaches the
# changed code only through a `gpu-idle` process of its own is not selected: `make check` runs it.
check-changed: $(STAMP)
	$(BIN)/python scripts/timed.py "make check-changed" -- $(BIN)/python -m pytest --quick --testmon -n $(CHECK_WORKERS) --dist loadscope \
	  $(CHECK_ARGS)

# Issue 44's guard (under 30 s on an idle machine; the 400k-kernel export is generated once into bench/data/):
# `gpu-idle run` on a generated 400k-kernel export and on each export of ../shared/profiles, and the
# 400k export's load + analysis in process, each as a ratio to the decode floor measured in the same run
# (the sqlite3 CLI, else Python's sqlite3 module, said), and every peak RSS. Prints MISSED for a target
# it can judge and 1.5x WORSE for a figure 1.5 times the one recorded in bench/RESULTS.md (its quick guard
# section, which BENCH_QUICK_ARGS=--record rewrites; `make bench` records at its end). Installs nothing.
BENCH_QUICK_ARGS ?=
bench-quick: $(STAMP)
	$(BIN)/python bench/quick.py $(BENCH_QUICK_ARGS)

# Benchmarks (issue 4; minutes, not part of make test): generated reports up to 3M kernels vs the
# sqlite3 CLI floor and nsys-ai 0.3.0 (own venv in bench/.venv-nsysai), a 200-report fleet, category
# accuracy. Prints the figures and writes bench/RESULTS.md. Needs the sqlite3 CLI (installed if missing).
bench: $(STAMP)
	command -v sqlite3 >/dev/null || $(APT_INSTALL) sqlite3
	$(BIN)/python bench/run.py $(BENCH_ARGS)
	$(BIN)/python bench/hta.py $(HTA_ARGS)
	$(BIN)/python bench/quick.py --record

# Issue 15: gpu-idle vs HTA 0.5.0 (own venv in bench/.venv-hta) on the PyTorch profiler traces in
# ../shared/kineto: idle per rank, each difference explained, time per trace; then the loader's peak
# memory on a generated trace of about 1.06 GB (cached in bench/data/; HTA_ARGS=--skip-big leaves it
# out). Writes bench/RESULTS-hta.md (a partial run: bench/data/RESULTS-hta-partial.md).
bench-hta: $(STAMP)
	$(BIN)/python bench/hta.py $(HTA_ARGS)

# A real Nsight Systems CLI (Debian's non-free nsight-systems 2022.4) unpacked into
# tools/nsys/ for the export tests; no GPU needed, the system's apt setup untouched.
nsys:
	bash scripts/install_nsys.sh

# Debian's chromium for the report's browser test (headless screenshot, console errors).
chromium:
	command -v chromium || $(APT_INSTALL) $(CHROMIUM_PACKAGES)

# Debian's Slurm and munge for tests/test_slurm.py, which starts a single-node Slurm of its own
# (scripts/local_slurm.py: generated slurm.conf, key and sockets in a temporary folder; the
# packages' services are not started and /etc is not used).
slurm:
	command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
	  && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null \
	  || $(APT_INSTALL) $(SLURM_PACKAGES)

# Debian's prometheus for its promtool: tests/test_prom.py runs `promtool check metrics` on the metrics file
# (the package's service is not started).
promtool:
	command -v promtool >/dev/null || $(APT_INSTALL) $(PROMETHEUS_PACKAGES)

# The Dask operator's DaskCluster CRD for tests/test_deploy.py: dask-kubernetes' wheel, downloaded
# (not installed: its dependencies would upgrade python-dateutil under pandas) into tools/wheels/.
DASK_KUBERNETES := 2026.3.0
k8s-schemas: $(STAMP)
	test -f tools/wheels/dask_kubernetes-$(DASK_KUBERNETES)-py3-none-any.whl \
	  || $(BIN)/python -m pip download --quiet --no-deps --dest tools/wheels dask-kubernetes==$(DASK_KUBERNETES)

clean:
	rm -rf $(VENV) out $(EXAMPLES) .pytest_cache *.egg-info
