# `make test` and `make demo` do their own set-up on a fresh machine: a virtualenv, torch (constraints.txt's, from
# PyTorch's CPU index) first so that nothing pulls a CUDA build, then the project at constraints.txt's versions.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
HASH := $(shell cat pyproject.toml constraints.txt tests/fake_backend/pyproject.toml | cksum | cut -d' ' -f1)
# What the demo and the UI need (the base, [local], [azure] and Airflow); then the test tools too.
DEMO_STAMP := $(VENV)/.demo-$(HASH)
STAMP := $(VENV)/.installed-$(HASH)

AIRFLOW_ENV := AIRFLOW_HOME=$(CURDIR)/.airflow AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=True MLRUNWAY_WORKSPACE=$(CURDIR)/.workspace
DEMO_CONF ?= {}
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
TORCH_VERSION := $(shell sed -n 's/^torch==//p' constraints.txt)

.PHONY: setup check test test-fast test-long soak fuzz-long demo ui docs data bench bench-long bench-quick bench-readme clean constraints

setup: $(STAMP)

$(DEMO_STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first, from PyTorch's CPU index (a bare torch range on PyPI pulls the CUDA build, several GB).
	$(PY) -m pip install -q --disable-pip-version-check --retries 1 --timeout 20 --index-url $(TORCH_INDEX_URL) \
		"torch==$(TORCH_VERSION)"
	# The base with the extras the demo needs, at the versions of constraints.txt.
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[local,azure,airflow]"
	rm -f $(VENV)/.demo-*
	touch $@

$(STAMP): $(DEMO_STAMP) tests/fake_backend/pyproject.toml
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[local,azure,airflow,ray,test,docs]"
	# The fake backend as a connection type, for the tests only (tests/fake_backend/pyproject.toml).
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation ./tests/fake_backend
	# The Compose specification's schema, as docker-compose 1.29.2 ships it (tests/deploy/test_compose.py).
	$(PY) -m pip download -q --disable-pip-version-check --no-deps docker-compose==1.29.2 -d $(VENV)/compose-schema
	# Debian's Chromium for the browser test (playwright drives it; it downloads no browser of its own).
	command -v chromium > /dev/null || (apt-get update -qq && apt-get install -y -qq chromium > /dev/null) \
		|| echo "could not install chromium: the browser test needs it (or MLRUNWAY_CHROMIUM=<path>)"
	rm -f $(VENV)/.installed-*
	touch $@

# Lint, then the layers (import-linter contracts in pyproject.toml) and types (mypy), then every test.
check: $(STAMP)
	$(PY) -m ruff check mlrunway operators dags plugins training examples tests bench docs
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m mypy

# After an upgrade the suite passed on: the environment's versions become the constraints (the project itself and
# the tests' fake backend left out; torch without its local build tag).
constraints: $(STAMP)
	{ sed -n '1,3p' constraints.txt; $(PY) -m pip freeze --disable-pip-version-check | grep -v -e '^-e ' -e '@ file:' \
		| sed 's/^torch==\([0-9.]*\)+.*/torch==\1/'; } > constraints.new && mv constraints.new constraints.txt

# The suite on TEST_WORKERS processes (pytest-xdist; CI has 2 cores), each test file whole on one of them, in order
# (a module's fixtures and the state its tests build up stay in one process). TEST_WORKERS=0 runs it in this one.
TEST_WORKERS ?= 2
test: check
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test-fast: check
	$(PY) -m pytest -m "not slow and not e2e"

# Outside CI: the soak's long profile (tests/chaos/soak.py), 1,000 random faults against a running workload, in
# chunks of under an hour (each its own process; an interrupted run goes on from tests/chaos/results/soak.json).
# Exits 1 when an invariant broke; the results file lists each with its fault and seed. Then the tests marked
# long (pytest -m long: minutes each, e.g. a seeded sweep's decisions repeated 5 times beside a CPU hog, the first-run
# tutorial's UI recipe in a browser, the DAG on Celery workers and a backfill under the scheduler, Airflow's own faults, the
# wheel installed in clean virtualenvs as a team installs it), and the damaged state file test's long profile
# (DAMAGE_EXAMPLES generated damages; 1,000 in the suite).
SOAK_FAULTS ?= 1000
DAMAGE_EXAMPLES ?= 20000
test-long: soak
	$(PY) -m pytest -m long
	MLRUNWAY_DAMAGE_EXAMPLES=$(DAMAGE_EXAMPLES) $(PY) -m pytest tests/mlrunway/local/test_damaged_state_files.py

soak: $(STAMP)
	@rc=3; while [ $$rc -eq 3 ]; do $(PY) -m tests.chaos.soak --faults $(SOAK_FAULTS) --chunk-s 3000; rc=$$?; done; \
		exit $$rc

# Outside CI: the endpoint fuzz test's long profile, FUZZ_EXAMPLES generated bodies (and a share of that of heads,
# pipelines and slow clients; tests/chaos/fuzz.py), derandomized as in the suite; the case counts go to
# tests/chaos/results/fuzz.json. FUZZ_BACKEND=ray: against a Ray endpoint on the tests' 2-node cluster instead
# (the same tests, collected in tests/contract/test_on_ray.py), its counts in tests/chaos/results/fuzz-ray.json.
FUZZ_EXAMPLES ?= 5000
FUZZ_BACKEND ?= local
fuzz-long: $(STAMP)
ifeq ($(FUZZ_BACKEND),ray)
	MLRUNWAY_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) MLRUNWAY_FUZZ_RESULTS_FILE=fuzz-ray.json \
		$(PY) -m pytest tests/contract/test_on_ray.py -k generated -n 0
else
	MLRUNWAY_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/chaos/test_endpoint_fuzz.py -k generated
endif

data: $(DEMO_STAMP)
	$(PY) -m mlrunway.data data/digits

# The Airflow UI on this machine: airflow standalone (SQLite, LocalExecutor) with the project's DAGs, plugin (its
# entry point) and workspace, on 127.0.0.1:$(UI_PORT); the weekly schedule off unless UI_SCHEDULE says otherwise,
# so a first trigger from the form starts one run, not two. Ctrl-C stops every component.
UI_PORT ?= 8080
UI_SCHEDULE ?= none
UI_HOME ?= $(CURDIR)/.airflow
UI_ENV := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" AIRFLOW_HOME=$(UI_HOME) AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=True \
	MLRUNWAY_WORKSPACE=$${MLRUNWAY_WORKSPACE:-$(CURDIR)/.workspace} \
	AIRFLOW__API__HOST=127.0.0.1 AIRFLOW__API__PORT=$(UI_PORT) AIRFLOW__API__BASE_URL=http://127.0.0.1:$(UI_PORT) \
	AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://127.0.0.1:$(UI_PORT)/execution/ MLRUNWAY_SCHEDULE=$(UI_SCHEDULE)

ui: data
	@mkdir -p $(UI_HOME)
	@echo "mlrunway UI: http://127.0.0.1:$(UI_PORT)  (user admin; its password is printed below once Airflow is up,"
	@echo "and kept in $(UI_HOME)/simple_auth_manager_passwords.json.generated). Schedule: $(UI_SCHEDULE). Ctrl-C stops it."
	$(UI_ENV) $(VENV)/bin/airflow standalone

# The documentation site (mkdocs.yml, docs/), its reference generated from the code, on http://127.0.0.1:$(DOCS_PORT);
# make test builds it with --strict (tests/docs/test_site.py).
DOCS_PORT ?= 8000
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve -a 127.0.0.1:$(DOCS_PORT)

# The whole DAG on the local backend (airflow dags test), then a short summary of what it did.
demo: data
	$(AIRFLOW_ENV) $(VENV)/bin/airflow db migrate > /dev/null
	$(AIRFLOW_ENV) $(PY) -m mlrunway.airflow.demo dags test train_sweep_deploy -c '$(DEMO_CONF)' > .airflow/demo.log 2>&1 \
		|| (tail -40 .airflow/demo.log; echo "the DAG failed; full log in .airflow/demo.log"; exit 1)
	@echo "---- summary (full log: .airflow/demo.log) ----"
	@$(AIRFLOW_ENV) $(PY) -m mlrunway.airflow.summary

# Every benchmark of bench/ but the long one (about 90 minutes on 2 cores), each printing its figures and
# recording bench/results/<name>.json with its commit, repeats and spread; then the docs' figures from them.
# Each refuses a tree that differs from HEAD outside bench/results/ (commit first).
bench: $(STAMP)
	@command -v wrk > /dev/null || (echo "the endpoint benchmark needs wrk: apt-get install wrk"; exit 1)
	$(PY) bench/onnx_runtime.py       # 1.5 min
	$(PY) bench/faults.py             # 2 min
	$(PY) bench/rollout.py            # 9 min
	$(PY) bench/gate.py               # 4 min
	$(PY) bench/endpoint.py           # 13 min (and 1 the first time: Azure's server's venv)
	$(PY) bench/capture.py            # 3 min
	$(PY) bench/early_termination.py  # 7 min
	$(PY) bench/orchestration.py      # 17 min
	$(PY) bench/samplers.py           # 11 min
	$(PY) bench/report_page.py        # 1 min
	$(PY) bench/ray_vs_local.py       # 10 min
	$(PY) bench/ddp_ray_vs_local.py   # 1 min
	$(PY) bench/endpoint.py --servers mlrunway ray bare --clients 16 64  # 4 min
	$(PY) bench/rollout.py --backend ray  # 11 min
	$(PY) bench/ray_faults.py         # 6 min
	$(PY) bench/readme.py

# The long record: a sweep's cost over its scripts at 8 and 200 trials (1 h 45 on 2 cores), in chunks: each whole
# repeat is kept as it ends, and running this again after it was cut short goes on from the last one.
bench-long: $(STAMP)
	$(PY) bench/trial_overhead.py --resume
	$(PY) bench/readme.py

# A few minutes: each benchmark but the two long ones, smaller, into bench/results/quick/ (ignored, never quoted).
QUICK := --results bench/results/quick
bench-quick: $(STAMP)
	@command -v wrk > /dev/null || (echo "the endpoint benchmark needs wrk: apt-get install wrk"; exit 1)
	$(PY) bench/onnx_runtime.py --duration 1 $(QUICK)
	$(PY) bench/faults.py --repeats 2 $(QUICK)
	$(PY) bench/endpoint.py --servers mlrunway httptools bare --clients 16 --duration 2 --warm-up 1 $(QUICK)
	$(PY) bench/capture.py --duration 2 --warm-up 1 --repeats 2 $(QUICK)
	$(PY) bench/rollout.py --window-s 5 --repeats 1 $(QUICK)
	$(PY) bench/gate.py --gates 500 --repeats 1 $(QUICK)

# The docs' benchmark figures (docs/explanation/performance.md and others), written from bench/results/ (make bench
# runs it last).
bench-readme: $(STAMP)
	$(PY) bench/readme.py

clean:
	rm -rf .workspace .airflow data .pytest_cache site
