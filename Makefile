# Two commands for a newcomer: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
# Extras installed into a new .venv. `make test EXTRAS=dev,reference` adds torch and transformers,
# so the transformer blocks are also compared with Hugging Face's own layers (skipped without).
# `coreai` brings Apple's Core AI package, so `.aimodel` builds are run by Apple's runtime in tests;
# `onnx` brings onnx and onnxruntime, which ONNX imports (`ane-kernels onnx`) and their tests need.
EXTRAS ?= dev,coreai,onnx

# `make test` spreads the test files over the machine's cores with pytest-xdist (a file's tests
# stay together, in order, on one worker). `make test WORKERS=1` runs them one after another.
WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -n $(WORKERS) --dist loadfile
# The tests start some 500 Python processes (the CLI, servers, build workers, the Core AI child,
# the docs' examples). Where PYTHONDONTWRITEBYTECODE is set (the shell of the machine the suite
# was timed on sets it), none of them caches bytecode and each compiles the app modules it imports
# again: 0.3-0.45 CPU-s a process. compileall writes the caches anyway (it only recompiles what
# changed), and Python reads them whatever that variable says.
BYTECODE := $(BIN)/python -m compileall -q app tests bench

.PHONY: run test test-fast lint typecheck format bench clean

$(BIN)/activate: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[$(EXTRAS)]'
	touch $(BIN)/activate

run: $(BIN)/activate
	@echo "ANE Kernel Service on http://$(HOST):$(PORT): every operation, with examples, at http://$(HOST):$(PORT)/docs"
	$(BIN)/uvicorn app.main:app --host $(HOST) --port $(PORT)

# pytest exits 5 when it collected no tests: that is a failure here, not a pass.
# The docs-page test drives Debian's chromium; install it when we can (root) and it is missing.
test: $(BIN)/activate
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium for the /docs browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi
	$(BIN)/ruff check app tests bench
	$(BIN)/ruff format --check app tests bench
	$(MAKE) --no-print-directory typecheck
	$(BYTECODE)
	$(PYTEST) --durations=20; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi; exit $$rc

# The inner loop: every test but the slow tier (@pytest.mark.slow: live services, farms, the
# docs' examples, browsers, real-size kits), in under two minutes.
test-fast: $(BIN)/activate
	$(BYTECODE)
	$(PYTEST) -m "not slow" --durations=10; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi; exit $$rc

lint: $(BIN)/activate
	$(BIN)/ruff check app tests bench
	$(BIN)/ruff format --check app tests bench
	$(MAKE) --no-print-directory typecheck

# mypy as [tool.mypy] in pyproject.toml sets it; `make test` and `make lint` run it after ruff
# and before the tests, so a type error fails them. Its cache (.mypy_cache) makes a second run
# take about a second.
typecheck: $(BIN)/activate
	$(BIN)/mypy

format: $(BIN)/activate
	$(BIN)/ruff format app tests bench
	$(BIN)/ruff check --fix app tests bench

bench: $(BIN)/activate
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) data .pytest_cache
