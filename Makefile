# The README's two commands: `make train` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Extra flags for `make train`, e.g. make train ARGS="--data-dir ../shared/data/mnist".
ARGS   ?=
# The translations' sources; installing compiles them to .mo files (setup.py's build hook).
LOCALE := src/jaxintro/locale
PO     := $(wildcard $(LOCALE)/*/LC_MESSAGES/*.po)

.PHONY: train test test-fast bench install clean messages serve browser notebooks mutation

$(STAMP): pyproject.toml constraints.txt setup.py $(PO)
	@echo "Setting up $(VENV): jaxintro and its pinned dependencies (JAX, Optax, Flax, Equinox, Orbax; PyTorch's CPU"
	@echo "build for the benchmark; the test tools), about 2 GB once installed. First time only: about 2 minutes."
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -c constraints.txt -e '.[torch,dev]'
	@$(BIN)/python -c "from importlib.metadata import version as v; print('Installed in $(VENV): jaxintro', v('jaxintro'), \
		'with', ', '.join(f'{p} {v(p)}' for p in ('jax', 'optax', 'flax', 'equinox', 'orbax-checkpoint', 'torch')))"
	@# An editable install turns a failed catalog compile into a mere warning: check that Spanish loads.
	$(BIN)/python -c "import sys; from jaxintro.i18n import set_language; \
		sys.exit(0 if set_language('es') == 'es' else 'the Spanish catalog did not compile (setup.py build hook)')"
	touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	$(BIN)/jaxintro train $(ARGS)

# Two workers (pytest-xdist) take tests as they free up: while one test waits (a heartbeat, a browser, a child's
# time limit), the other computes. `make test WORKERS=0` runs them all in one process.
WORKERS ?= 2

test: $(STAMP) browser
	$(BIN)/python -m pytest -n $(WORKERS) --dist worksteal $(ARGS)

test-fast: $(STAMP) browser
	$(BIN)/python -m pytest -n $(WORKERS) --dist worksteal -m "not slow" $(ARGS)

bench: $(STAMP)
	$(BIN)/jaxintro bench $(ARGS)

# Mutation testing (not in CI: slow): mutmut mutates the lesson's step and epoch (lesson.py), data.py, runs.py and
# images.py one change at a time and runs their fast unit tests against each ([tool.mutmut] in pyproject.toml);
# docs/testing.md has the score and every surviving mutant. The results stay in mutants/ (git-ignored).
# JAX starts with 4 CPU devices there, so the lesson's data-parallel epoch is checked in the tests' own process.
# The mutants' processes share one compile cache (mutants/xla-cache) and run each mutant's tests fastest first
# (tests/conftest.py): 26 to 35 minutes on 2 cores (docs/testing.md).
mutation: $(STAMP)
	rm -rf mutants
	JAX_NUM_CPU_DEVICES=4 $(BIN)/mutmut run --max-children 2 || true
	$(BIN)/python tests/mutation_report.py mutants

# The lesson's notebooks: each .ipynb regenerated from its jupytext source (notebooks/*.py, the file to edit),
# without outputs, and .venv's Python registered as the Jupyter kernel "jaxintro (.venv)" that they ask for.
notebooks: $(STAMP)
	$(BIN)/python notebooks/build.py
	$(BIN)/python -m ipykernel install --user --name jaxintro --display-name "jaxintro (.venv)"

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
# catalog (new ones empty, changed ones fuzzy), translate those, then `make install` compiles them.
messages: $(STAMP)
	$(BIN)/pybabel extract --project=jaxintro --version="$$($(BIN)/python -c 'import jaxintro; print(jaxintro.__version__)')" \
		--copyright-holder="the jaxintro authors" --add-location=file --add-comments=TRANSLATORS: \
		-o $(LOCALE)/jaxintro.pot src/jaxintro
	$(BIN)/pybabel update -i $(LOCALE)/jaxintro.pot -d $(LOCALE) -D jaxintro --previous --width=100

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
