# The README's two commands: `make train` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Extra flags for `make train`, e.g. make train ARGS="--data-dir ../shared/data/mnist".
ARGS   ?=

.PHONY: train test test-fast bench install clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[torch,dev]'
	touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	$(BIN)/jaxintro train $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(ARGS)

bench: $(STAMP)
	$(BIN)/jaxintro bench $(ARGS)

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
