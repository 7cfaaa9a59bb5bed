# The two commands a newcomer runs (as root, on a fresh Debian/Ubuntu machine):
#   make demo   bring up the built-in lab and run the main job on it
#   make test   install what the tests need, lint, run every test (unit + lab)
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
# Tools the tests start (ansible-playbook, molecule, sushy-emulator) come from the venv.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: demo test lint unit lab-test lab-converged lab-molecule deps clean

deps:
	./scripts/bootstrap

demo: deps
	./scripts/demo

# Every test: unit, the lab, the roles' molecule scenarios (stock Ansible, each on a lab of
# its own) and the lab converged from bare nodes by one bring-up (the `converged` tests,
# last). `make unit`, `make lab-test`, `make lab-molecule` and `make lab-converged` run parts.
# The slowest tests are listed at the end: CI's budget is 30 minutes on 2 cores. The unit tests
# run on two workers (pytest-xdist; each test keeps to its own tmp_path); the lab tests share one
# emulated cluster and its one converge, so they run in order in one process. Both exit non-zero
# when they collect nothing (pytest's 5), and make stops at the first that fails.
test: deps lint
	$(PY) -m pytest -q -n 2 tests/unit
	$(PY) -m pytest -q --durations=40 tests/lab

unit: deps
	$(PY) -m pytest -q -n 2 tests/unit

lab-test: deps
	$(PY) -m pytest -q -m "lab and not converged and not molecule" tests/lab

lab-converged: deps
	$(PY) -m pytest -q -m converged tests/lab

lab-molecule: deps
	$(PY) -m pytest -q -m molecule tests/lab

lint: deps
	$(BIN)/ruff check cluster_tool cluster_lab tests benchmarks plugins
	$(BIN)/ruff format --check cluster_tool cluster_lab tests benchmarks plugins
	$(BIN)/mypy
	$(BIN)/yamllint -s .
	./scripts/ansible-lint

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
