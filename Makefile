# Headroom: the two commands a new machine needs are `make run` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTHON ?= python3
SCENARIO ?= docs/scenarios/support-assistant.yaml

.PHONY: setup run test check pytest clean litellm-env

# A virtual environment at .venv with the project and its development tools.
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# The main job on embedded defaults (SQLite in var/, in-process tasks, the fleet simulator as
# the telemetry source): load the example scenario, export its placement problem, then run the
# whole pipeline: pull two weeks of simulated telemetry, derive workload profiles and drift
# alerts, re-plan from the forecast, activate, emit to var/emission/, and print the drift
# alerts, the forecast and the region allocations.
run: setup
	mkdir -p var
	$(PY) manage.py migrate --noinput --verbosity 0
	$(PY) manage.py load_scenario $(SCENARIO)
	$(PY) manage.py export_problem --output var/problem.json
	$(PY) manage.py run_pipeline --scenario $(SCENARIO)

# LiteLLM in an environment of its own (its dependencies stay out of the project's): the
# emission test builds LiteLLM's real Router from the gateway config the sink writes.
LITELLM_VENV ?= .venv-litellm
litellm-env: $(LITELLM_VENV)/.installed

$(LITELLM_VENV)/.installed:
	$(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/python -m pip install --quiet 'litellm==1.110.2' 'pyyaml>=6'
	touch $@

# Lint, type checks, import contracts, Django checks and the whole test suite (DATABASE_URL picks the database).
test: setup check pytest

check:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(PY) manage.py check
	mkdir -p var  # the default SQLite database's folder: makemigrations reads its history
	$(PY) manage.py makemigrations --check --dry-run

pytest:
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) $(LITELLM_VENV) var .pytest_cache .mypy_cache .ruff_cache .hypothesis
