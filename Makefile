# Two commands matter: `make demo` (the guided investigation against the built-in lab) and
# `make test` (the suite, against a real local sshd and real sglang sources). `make lab` opens
# the notebooks in JupyterLab.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Inside the venv, so removing the venv also forgets that it was installed.
STAMP := $(VENV)/.installed-pyproject
SSHD := /usr/sbin/sshd
CHROMIUM := /usr/bin/chromium
PROMETHEUS := /usr/bin/prometheus
# A fresh clone has no benchmarks/ until a file lands there; ruff errors on missing paths.
LINT_PATHS := $(wildcard kit tests benchmarks)
PYTEST_ARGS ?=
# CI runs the tests in one fixed random order (pytest-randomly's seed), so its outcome never
# depends on a lucky draw; elsewhere every run shuffles. Property tests: tests/conftest.py.
CI_SEED := $(if $(filter true 1 yes,$(CI)),--randomly-seed=20261201,)
# pytest-xdist is installed but not the default: its loadgroup grouping (tests/conftest.py marks the tests
# that share an expensive fixture) is ignored under pytest 9.2. To try it: make test TEST_WORKERS="-n 2 --dist loadgroup".
TEST_WORKERS ?=

# apt must never wait for an answer: CI has no stdin.
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq

.DEFAULT_GOAL := help
.PHONY: help venv test test-fresh demo lab lint clean ssh-tools browser-tools browser-test screenshots prometheus-tools

help:
	@echo "make demo    the whole investigation against the built-in lab: notebooks 00-05, summary, out/"
	@echo "make lab     start the built-in lab and open JupyterLab on a working copy of notebooks/ (prints the URL)"
	@echo "make test    lint, then run the test suite (installs openssh-server when root)"
	@echo "make test-fresh  make test in a fresh clone of HEAD with an empty HOME, in a random order (prints the seed;"
	@echo "             SEED=N repeats one); builds everything a first run builds: GBs, tens of minutes"
	@echo "make browser-test  01_symptom in JupyterLab in headless Chromium, and its report offline (installs chromium when root)"
	@echo "make screenshots   notebooks 01, 03, 04, 06 run in JupyterLab in headless Chromium, saved as PNGs in out/screenshots/"
	@echo "make lint    ruff check"
	@echo "make venv    create $(VENV) and install the kit with its dev extra"
	@echo "make clean   remove build artefacts (keeps $(VENV) and downloaded wheels)"
	@echo "PYTHON=$(PYTHON)  (override: make PYTHON=python3.12 venv)"

venv: $(STAMP)

# Re-runs only when pyproject.toml is newer than the last successful install.
$(STAMP): pyproject.toml
	@if ! $(BIN)/python -c '' 2>/dev/null; then \
	    command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install python3 >= 3.10 or pass PYTHON=..." >&2; exit 1; }; \
	    $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
	        || { echo "error: $(PYTHON) is $$($(PYTHON) -V 2>&1); the kit needs python >= 3.10 (pass PYTHON=...)" >&2; exit 1; }; \
	    if ! $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null; then \
	        if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	            echo "$(PYTHON) cannot create venvs: installing python3-venv"; \
	            apt-get update -qq && $(APT_INSTALL) python3-venv; \
	        else \
	            echo "error: $(PYTHON) cannot create venvs; install python3-venv (sudo apt-get install python3-venv)" >&2; exit 1; \
	        fi; \
	    fi; \
	    echo "creating $(VENV) with $$($(PYTHON) -V 2>&1)"; \
	    $(PYTHON) -m venv $(VENV); \
	fi
	@$(BIN)/python -m pip --version >/dev/null 2>&1 || $(BIN)/python -m ensurepip --upgrade
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

# The ssh tests run a real sshd; without root we cannot install it, so they skip and say why.
ssh-tools:
	@if [ -x $(SSHD) ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then \
	    :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing openssh-server (the ssh tests start a real sshd on 127.0.0.1)"; \
	    apt-get update -qq && $(APT_INSTALL) openssh-server openssh-client; \
	else \
	    echo "NOTE: $(SSHD) (openssh-server) is missing and we are not root, so it cannot be installed here."; \
	    echo "      The ssh tests will be SKIPPED. To run them: sudo apt-get install openssh-server"; \
	fi

# The browser check drives Debian's chromium through Playwright (no `playwright install`, no
# download from Playwright's CDN). Without root it cannot be installed: the check skips and says why.
browser-tools:
	@if [ -x $(CHROMIUM) ]; then \
	    :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium (the browser check opens the notebooks in headless Chromium; ~480 MB)"; \
	    apt-get update -qq && $(APT_INSTALL) chromium; \
	else \
	    echo "NOTE: $(CHROMIUM) (chromium) is missing and we are not root, so it cannot be installed here."; \
	    echo "      The browser check will be SKIPPED. To run it: sudo apt-get install chromium"; \
	fi

# The metrics tests start a real Prometheus (Debian's package, which also ships promtool) scraping the lab.
# Without root it cannot be installed: those tests skip and say why (and fail in CI).
prometheus-tools:
	@if [ -x $(PROMETHEUS) ] && command -v promtool >/dev/null; then \
	    :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing prometheus (the metrics tests start a real Prometheus on 127.0.0.1)"; \
	    apt-get update -qq && $(APT_INSTALL) prometheus; \
	else \
	    echo "NOTE: $(PROMETHEUS) (prometheus) is missing and we are not root, so it cannot be installed here."; \
	    echo "      The Prometheus tests will be SKIPPED. To run them: sudo apt-get install prometheus"; \
	fi

# 01_symptom run in JupyterLab in headless Chromium, then its report opened offline; screenshots in out/browser/.
browser-test: venv browser-tools
	$(BIN)/python -m pytest tests/browser $(PYTEST_ARGS)

# Notebooks 01, 03, 04 and 06 as JupyterLab renders them (the lab, JupyterLab and Chromium of their own), as named
# PNGs of each region with out/screenshots/index.md saying what each shows. SCREENSHOTS_ARGS="--quick 03" for less.
SCREENSHOTS_ARGS ?=
screenshots: venv browser-tools
	$(BIN)/python tests/browser/screenshots.py $(SCREENSHOTS_ARGS)

lint: venv
	$(BIN)/ruff check $(LINT_PATHS)

test: venv ssh-tools browser-tools prometheus-tools lint
	$(BIN)/python -m pytest $(TEST_WORKERS) $(CI_SEED) $(PYTEST_ARGS)

# `make test` as a new user runs it: a clone of the committed HEAD (uncommitted changes are not in it),
# HOME a new empty directory (no kit cache, pip cache, ssh or pip config of this user's), the kit's own
# variables unset, and a random pytest-randomly order whose seed is printed; SEED=N repeats that order.
# The clone and its home stay in FRESH_ROOT (a new directory under $TMPDIR) for a look afterwards.
# Variables that would point the run at this user's caches or config instead of the empty HOME:
FRESH_UNSET := XDG_CACHE_HOME XDG_CONFIG_HOME XDG_DATA_HOME XDG_STATE_HOME PIP_CACHE_DIR PIP_CONFIG_FILE \
    HF_HOME HF_HUB_CACHE TRANSFORMERS_CACHE JUPYTER_CONFIG_DIR JUPYTER_DATA_DIR JUPYTER_RUNTIME_DIR IPYTHONDIR \
    MPLCONFIGDIR PYTHONUSERBASE PYTHONPATH VIRTUAL_ENV HYPOTHESIS_PROFILE
test-fresh:
	@command -v git >/dev/null || { echo "error: test-fresh clones the repository with git, which is missing" >&2; exit 1; }
	@seed="$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"; \
	head="$$(git rev-parse HEAD)" || exit 1; \
	root="$${FRESH_ROOT:-$$(mktemp -d "$${TMPDIR:-/tmp}/sgl-kit-fresh.XXXXXX")}"; \
	git diff --quiet HEAD -- || echo "test-fresh: note: uncommitted changes are not tested; the clone has HEAD only"; \
	echo "test-fresh: $$(git rev-parse --short HEAD) cloned into $$root/repo, HOME=$$root/home, seed $$seed"; \
	git clone --quiet . "$$root/repo" && git -C "$$root/repo" checkout --quiet --detach "$$head" \
	    && mkdir -p "$$root/home" || exit 1; \
	unset $(FRESH_UNSET) $$(env | sed -n 's/^\(SGL_KIT_[A-Za-z0-9_]*\)=.*/\1/p'); \
	HOME="$$root/home" $(MAKE) --no-print-directory -C "$$root/repo" test \
	    CI_SEED="-p randomly --randomly-seed=$$seed" PYTEST_ARGS="$(PYTEST_ARGS)"; \
	status=$$?; \
	echo "test-fresh: exit $$status with seed $$seed (SEED=$$seed make test-fresh runs this order again);" \
	    "the clone and its home: $$root"; \
	exit $$status

demo: venv
	$(BIN)/python -m kit.demo

# JupyterLab on notebooks/, with the lab up. LAB_PORT/LAB_IP to change where it listens.
LAB_PORT ?= 8888
LAB_IP ?= 127.0.0.1
# JupyterLab opens a working copy (runs/notebooks, untracked), so running the notebooks leaves git clean.
lab: venv
	$(BIN)/sgl-kit lab up
	$(BIN)/python -m kit.demo workspace
	$(BIN)/jupyter lab --no-browser --ip=$(LAB_IP) --port=$(LAB_PORT) --notebook-dir=runs/notebooks \
	    --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
	    $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

# Keeps .venv and the kit's download cache (~/.cache/sglang-investigation-kit): both are slow to rebuild.
clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache notebooks/_executed out
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
