# Headroom: the two commands a new machine needs are `make run` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTHON ?= python3
SCENARIO ?= docs/scenarios/support-assistant.yaml

.PHONY: setup run test check pytest clean

# A virtual environment at .venv with the project and its development tools.
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# The main job on embedded defaults (SQLite, in-process tasks): load the example scenario,
# export the placement problem, re-plan (solve, store, explain, activate) and print the plan
# with its region allocations.
run: setup
	mkdir -p var
	$(PY) manage.py migrate --noinput --verbosity 0
	$(PY) manage.py load_scenario $(SCENARIO)
	$(PY) manage.py export_problem --output var/problem.json --summary
	$(PY) manage.py replan --wait

# Lint, type checks, Django checks and the whole test suite (DATABASE_URL picks the database).
test: setup check pytest

check:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run

pytest:
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .hypothesis
