# Two commands: `make demo` and `make test`. Each sets up .venv on first use.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
ROOT := $(abspath .)
BUILD := build/interfaces
INTERFACES := $(wildcard msg/*.msg srv/*.srv)
PYTEST_ARGS ?=
# Test workers: one per core (pytest-xdist); each gets its own ROS_DOMAIN_ID (test/conftest.py).
TEST_WORKERS ?= auto
DEMO_ARGS ?= --rounds 1

export AMENT_PREFIX_PATH := $(ROOT)/$(VENV)
export PYTHONPATH := $(ROOT)

.PHONY: setup demo demo-real-gap test lint bench clean

setup: $(VENV)/.interfaces.stamp $(VENV)/bin/simreal

# uv installs the same pinned set as pip, several times faster. uv does not read pip's
# configuration, so pip's find-links (where a machine keeps its CPU torch wheel) are passed.
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
$(VENV)/.deps.stamp: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -qq "$$(grep '^uv==' requirements.txt)"
	$(VENV)/bin/uv pip install -q --python $(PY) \
		$(if $(FIND_LINKS),--find-links $(FIND_LINKS)) -r requirements.txt
	touch $@

# Generated interfaces go into the venv; the Python code runs from the checkout. With them
# go the checkout's simreal_ros/__init__.py and a .pth naming the checkout, so the venv's
# python imports the checkout's code from any directory (see CMakeLists.txt).
$(VENV)/.interfaces.stamp: $(VENV)/.deps.stamp $(INTERFACES) CMakeLists.txt package.xml \
		simreal_ros/__init__.py
	mkdir -p build
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(ROOT)/$(VENV) \
		-DPython3_EXECUTABLE=$(ROOT)/$(PY) -DSIMREAL_INSTALL_PYTHON=OFF \
		-DBUILD_TESTING=OFF > $(BUILD).log 2>&1 || (cat $(BUILD).log; exit 1)
	cmake --build $(BUILD) -j2 >> $(BUILD).log 2>&1 || (cat $(BUILD).log; exit 1)
	cmake --install $(BUILD) >> $(BUILD).log 2>&1 || (cat $(BUILD).log; exit 1)
	touch $@

# The `simreal` command for this checkout (colcon installs its own on a ROS 2 machine).
$(VENV)/bin/simreal: scripts/simreal $(VENV)/.deps.stamp
	printf '#!/bin/sh\nexport PYTHONPATH="$(ROOT)$${PYTHONPATH:+:$$PYTHONPATH}"\nexport AMENT_PREFIX_PATH="$(ROOT)/$(VENV)"\nexec "$(ROOT)/$(PY)" -m simreal_ros.cli.main "$$@"\n' > $@
	chmod +x $@

# The main job: fine-tuning rounds on the real_twin stand-in through the full graph.
demo: setup
	$(VENV)/bin/simreal loop $(DEMO_ARGS)

# The last mile: the loop on the second-engine (Drake) worn stand-in, where identification
# cannot fit the arm; round 1 identifies and adapts, round 2 co-trains on the arm's episodes.
REAL_GAP_ARGS ?= --rounds 2 --stand-in-profile drake_worn
demo-real-gap: setup
	$(VENV)/bin/simreal loop $(REAL_GAP_ARGS)

# Tests that cannot run beside others (marker `serial`) run alone after the rest; the
# time budget and the 25 slowest tests are reported by the first run (test/suite_timing.py).
test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not serial" --no-loadscope-reorder \
		--durations=25 --suite-times=build/suite-times.json $(PYTEST_ARGS)
	$(PY) -m pytest -m serial --durations=5 --suite-times=build/suite-times.json \
		--suite-times-append $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: no serial test selected

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

bench: setup
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf build install log $(VENV)
