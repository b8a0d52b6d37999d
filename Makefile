# dsdoctor task runner: `make run` and `make test` are the two set-up commands.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test lint bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall when pyproject.toml or setup.py changes; the stamp files record the last install.
$(VENV)/.installed: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(VENV)/.installed $@

run: $(VENV)/.installed
	$(BIN)/dsdoctor serve --host $(HOST) --port $(PORT)

# The browser tests drive Debian's Chromium and the store tests start their own PostgreSQL; install
# them when missing (root with apt-get), otherwise those tests skip and say so.
test: $(VENV)/.installed-test
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-noto-cjk >/dev/null; } || \
	  echo "no chromium: browser tests will skip"
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >/dev/null; } || \
	  echo "no PostgreSQL: the PostgreSQL store tests will skip"
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

bench: $(VENV)/.installed-test
	$(BIN)/python -m bench

$(VENV)/.installed-docs: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[docs]'
	touch $(VENV)/.installed $@

# The site in site/: the CLI and REST references are generated from the code first.
docs: $(VENV)/.installed-docs
	$(BIN)/python scripts/gen_docs.py
	$(BIN)/mkdocs build --strict --quiet
	@echo "docs built: site/index.html"

clean:
	rm -rf $(VENV) var bench/out tests/output site docs/cli.md docs/rest.md
