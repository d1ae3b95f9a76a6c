# cryptowire — `make run` and `make test` both set up from nothing first (quick when nothing changed).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch first, pinned: an unpinned torch pulls a multi-GB CUDA build; 2.13.0 is a CPU build on local disk.
TORCH := torch==2.13.0
STAMP := $(VENV)/.setup-stamp

.PHONY: setup system system-run run test dev lint clean

setup: system $(STAMP)

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11 is required: install python3.11 (or set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): $(VENV)/bin/python pyproject.toml
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -e '.[dev]'
	touch $(STAMP)

# System packages: installed when missing and we are root; otherwise the exact command is printed. `make run`
# needs Chromium only (the API's PDF rendering) and goes on without it; the tests need every one (`system`).
system system-run:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromium-headless-shell >/dev/null || missing="$$missing chromium-headless-shell"; \
	if [ "$@" = system ]; then \
	  command -v pdftotext >/dev/null || missing="$$missing poppler-utils"; \
	  command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	  command -v wrk >/dev/null || missing="$$missing wrk"; \
	  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	fi; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  elif [ "$@" = system ]; then \
	    echo "missing system packages:$$missing"; \
	    echo "install them with: sudo apt-get update && sudo apt-get install -y$$missing"; exit 1; \
	  else \
	    echo "missing system packages:$$missing (the API's PDF rendering answers 503 without them; the rest runs)"; \
	    echo "install them with: sudo apt-get update && sudo apt-get install -y$$missing"; \
	  fi; \
	fi

run: system-run $(STAMP)
	$(VENV)/bin/cryptowire up

# The pipeline publishes partitioned snapshot sets; the API's tests run once more against that layout.
API_LAYOUT_TESTS = tests/test_api_pagination.py tests/test_api_graphql.py tests/test_sentiment_trends.py \
	tests/test_overview.py tests/test_stories.py

test: setup
	$(VENV)/bin/pytest -n 2 --dist loadfile
	CRYPTOWIRE_TEST_SNAPSHOTS=parts $(VENV)/bin/pytest -q $(API_LAYOUT_TESTS)

dev: setup
	$(VENV)/bin/cryptowire dev

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .cryptowire
