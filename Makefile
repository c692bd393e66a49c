# FerryMQ developer entry points. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test venv unit compat bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

## run: start a standalone name server + broker under ./.data, run a demo, keep serving
run: $(STAMP)
	@$(PY) -m ferrymq.cli.main standalone --data-dir .data --demo

## test: the full suite (unit, integration, compatibility with the official Java client)
test: $(STAMP)
	@$(PY) -m pytest -q -ra

## unit: quick tests only
unit: $(STAMP)
	@$(PY) -m pytest -q -m "not integration and not compat"

## bench: benchmarks, printing figures and the ratio against Apache RocketMQ
bench: $(STAMP)
	@$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache
