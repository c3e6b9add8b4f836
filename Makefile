# The README's two commands: `make train` and `make test`. Each sets itself up, installing only what it needs.
SHELL  := bash
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Extra flags for `make train`, e.g. make train ARGS="--data-dir ../shared/data/mnist".
ARGS   ?=
# The translations' sources; installing compiles them to .mo files (setup.py's build hook).
LOCALE := src/jaxintro/locale
PO     := $(wildcard $(LOCALE)/*/LC_MESSAGES/*.po)
# What an install depends on: a change to any of them installs again.
SETUP  := scripts/venv.sh pyproject.toml constraints.txt setup.py $(PO)
, := ,

.PHONY: train test test-fast test-accelerator test-setup bench install clean messages serve browser notebooks mutation mutation-again \
	mutation-exercises docs docs-serve

# One stamp per set of extras (pyproject.toml), each installed once by scripts/venv.sh (uv; PIP=1 for pip).
STAMP     := $(VENV)/.installed
TESTING   := $(VENV)/.installed-test
BENCHING  := $(VENV)/.installed-bench
MUTATING  := $(VENV)/.installed-mutation
NOTEBOOKS := $(VENV)/.installed-notebooks
DOCS      := $(VENV)/.installed-docs

# $(call install,WHAT FOR,EXTRAS): install jaxintro with EXTRAS into .venv, then mark it done. An install with extras
# holds the runtime too, so it marks that done as well: a fresh `make test` installs once, not the runtime first and
# then again with its extras (uv compiles every file of .venv at each install: 9 s of the second).
define install
@scripts/venv.sh $(VENV) "$(1)" "$(2)"
@touch $@ $(if $(2),$(STAMP))
endef

$(STAMP): $(SETUP)
	$(call install,training,)
$(TESTING): $(SETUP)
	$(call install,the tests,test$(,)torch$(,)docs)
$(BENCHING): $(SETUP)
	$(call install,the benchmark,torch)
$(MUTATING): $(TESTING)
	$(call install,mutation testing,test$(,)torch$(,)docs$(,)mutation)
$(NOTEBOOKS): $(SETUP)
	$(call install,the notebooks,notebooks)
$(DOCS): $(SETUP)
	$(call install,the documentation site,docs)

install: $(STAMP)

train: $(STAMP)
	$(BIN)/jaxintro train $(ARGS)

# Three workers (pytest-xdist) on two cores take tests as they free up: while one test waits (a heartbeat, a
# browser, a child's time limit), the others compute (with two, the cores were busy 1.77 of 2 on average).
# `make test WORKERS=0` runs them all in one process. Python may keep the bytecode it compiles (ignored by git):
# the suite starts hundreds of Pythons, and each would otherwise compile jaxintro's modules and the tests again.
WORKERS ?= 3
PYTEST  := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(WORKERS) --dist worksteal

test: test-setup
	$(PYTEST) $(ARGS)

test-fast: test-setup
	$(PYTEST) -m "not slow" $(ARGS)

# The tests that must hold on every backend (`-m backend`: the lesson's math, per-example gradients, resume and the
# checkpoint round trip, members as their single runs, the speedrun's arithmetic), in one process: on a TPU one
# process at a time may hold the chip, so no workers and no child holds it. `make test` runs them on the CPU with
# the rest. On an accelerator machine whose JAX is that accelerator's build, name its Python:
# make test-accelerator ACCEL_PYTHON=python3 (docs/accelerators.md).
# Only the files that hold such tests are collected: pytest imports every file it collects, and the others need
# packages (Babel, Selenium) an accelerator's Python may lack.
ACCEL_PYTHON ?=
BACKEND_TESTS = $(shell grep -l "mark.backend" tests/test_*.py)
test-accelerator: $(if $(ACCEL_PYTHON),,$(TESTING))
	$(or $(ACCEL_PYTHON),$(BIN)/python) -m pytest -p no:xdist -m backend $(BACKEND_TESTS) $(ARGS)

# The tests' two set-ups side by side (-j2): .venv (uv) and the browser (apt-get, on a fresh Debian run as root).
# Each waits mostly on its downloads; one after the other, a fresh `make test` would wait for both in turn.
# $(MAKE) is written in the recipe itself, not through a variable: only then does `make -n test` run the sub-make
# (under -n too) and show both installs.
test-setup:
	@$(MAKE) --no-print-directory --silent -j2 $(TESTING) browser

bench: $(BENCHING)
	$(BIN)/jaxintro bench $(ARGS)

# Mutation testing (not in CI: slow): mutmut mutates 15 modules (the lesson's step and epoch, the trainer and its
# layouts, members, checkpoint, faults, parallel, evaluate, optim, data, runs, images, grid, record and the page's
# answers) one change at a time and runs each module's own tests against each ([tool.mutmut] in pyproject.toml,
# MUTATION_TESTS in tests/conftest.py); docs/testing.md has the score and every surviving mutant. The results stay in
# mutants/ (git-ignored). JAX starts with the device count `make test` gives it (one CPU device): the N-device check
# trains its N-device runs in a child process that imports the mutated copy. The mutants' processes share one compile
# cache (mutants/xla-cache) and run each mutant's tests fastest first (tests/conftest.py); docs/testing.md says how
# long a run takes. `make mutation-again` goes on where a stopped run left off, and re-runs only the mutants of
# functions changed since.
mutation: $(MUTATING)
	rm -rf mutants
	$(MAKE) mutation-again

mutation-again: $(MUTATING)
	$(BIN)/mutmut run --max-children 2 || true
	$(BIN)/python tests/mutation_report.py mutants

# Mutation testing of the exercises' checks (not in CI): every one-token change of each reference solution's
# learner part is checked as a learner's file would be; a mutant the check accepts is a wrong answer that passes.
# tests/exercise_mutants.py prints the table and every survivor with its reason (docs/testing.md has the score).
mutation-exercises: $(TESTING)
	$(BIN)/python tests/exercise_mutants.py

# The lesson's notebooks: each .ipynb regenerated from its jupytext source (notebooks/*.py, the file to edit),
# without outputs, and .venv's Python registered as the Jupyter kernel "jaxintro (.venv)" that they ask for,
# inside .venv (share/jupyter/kernels): a Jupyter started from .venv finds it, another one with
# JUPYTER_PATH=.venv/share/jupyter. Not user-wide, where the last clone to register owns the name.
notebooks: $(NOTEBOOKS)
	$(BIN)/python notebooks/build.py
	$(BIN)/python -m ipykernel install --sys-prefix --name jaxintro --display-name "jaxintro (.venv)"

# The page for the newest finished run (after `make train`), e.g. make serve ARGS="--port 8080 --open".
serve: $(STAMP)
	$(BIN)/jaxintro serve $(ARGS)

# The browser that tests/test_serve.py drives: Debian's Chromium and its driver. On a fresh Debian machine
# run as root (CI) they are installed here; elsewhere this says how, and the browser test skips (under CI=1
# a missing browser fails it instead). Another Chromium: set JAXINTRO_CHROMIUM and JAXINTRO_CHROMEDRIVER.
browser:
	@if [ -n "$$JAXINTRO_CHROMIUM$$JAXINTRO_CHROMEDRIVER" ] || \
		{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then \
		true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing Chromium and chromedriver for the browser test (apt-get)"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			chromium chromium-driver; \
	else \
		echo "NOTE: no chromium/chromedriver on PATH: the browser test of 'jaxintro serve' will skip."; \
		echo "      Install them with: sudo apt-get install chromium chromium-driver (Debian, Ubuntu), or point"; \
		echo "      JAXINTRO_CHROMIUM and JAXINTRO_CHROMEDRIVER at a Chromium and its matching chromedriver."; \
	fi

# After adding or changing a message (_(), N_(), ngettext()): extract them all, merge them into each
# catalog (new ones empty, changed ones fuzzy) and compile them (what Python reads; the suite refuses to start on a
# .po newer than its .mo); translate the new ones, then `make messages` again (or `make install`) compiles them.
messages: $(TESTING)
	$(BIN)/pybabel extract --project=jaxintro --version="$$($(BIN)/python -c 'import jaxintro; print(jaxintro.__version__)')" \
		--copyright-holder="the jaxintro authors" --add-location=file --add-comments=TRANSLATORS: \
		-o $(LOCALE)/jaxintro.pot src/jaxintro
	$(BIN)/pybabel update -i $(LOCALE)/jaxintro.pot -d $(LOCALE) -D jaxintro --previous --width=100
	@# Babel stamps each run with the time: dropped, so that an unchanged catalogue stays byte for byte the same.
	sed -i '/^"POT-Creation-Date: /d' $(LOCALE)/jaxintro.pot $(LOCALE)/*/LC_MESSAGES/jaxintro.po
	$(BIN)/pybabel compile -d $(LOCALE) -D jaxintro

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache site

# The documentation site (mkdocs.yml): docs/*.md in English, docs/*.es.md in Spanish, built with --strict into site/
# (a broken link or anchor stops the build). NO_MKDOCS_2_WARNING quiets Material's banner about MkDocs 2.
docs: $(DOCS)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build

docs-serve: $(DOCS)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000
