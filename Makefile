# `make test` and `make demo` do their own set-up on a fresh machine: a virtualenv, torch==2.13.0 (CPU) first so
# that nothing pulls a CUDA build, then the project.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: setup test test-fast lint data clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test]"
	rm -f $(VENV)/.installed-*
	touch $@

test: $(STAMP)
	$(PY) -m ruff check mlrunway training tests
	$(PY) -m pytest

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow and not e2e"

data: $(STAMP)
	$(PY) -m mlrunway.data data/digits

clean:
	rm -rf .workspace data .pytest_cache
