# Two entry points for a fresh machine with Python 3.11 and pip:
#   make demo   runs the demo end to end
#   make test   lints (ruff; lint-imports: the layers, no import circle), type-checks
#               and runs the whole test suite on 4 workers (what CI runs;
#               docs/performance.md, "The suite")
#   make drills the interrupt/pause drills alone (part of make test); drills-table
#               runs them and writes their table into docs/drills.md
#   make postgres installs Debian's postgresql when its server binaries are missing
#               (the PostgreSQL journal store's tests start a cluster of their own)
#   make chromium installs Debian's chromium and chromium-driver when either is
#               missing (CI does, so the timeline's and the web view's browser tests
#               run; without them they are skipped, and fail under CI)
#   make codex-next installs the newer codex (.codex-npm/package.json pins
#               @openai/codex) with npm ci into .codex-npm/node_modules; the real-host
#               tests then run on it too (CI does; without it they are skipped)
#   make bytecode compiles crw's modules (demo, test, drills and bench do it first);
#               make test-bytecode the test modules as pytest rewrites them too
#   make targets runs every bench the scale targets name and says which are met
#               (bench/targets.py, about forty minutes; exit 1 when one is not)
#   make bench-syncs counts a session call's syncs and files (strace; installs it)
#   make bench-pg  crw's journal on PostgreSQL beside DBOS and raw inserts, list,
#               status and the App Server run on it (bench/pg.py; DBOS in .venv-dbos)
# Each makes .venv and installs the pinned tree first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test drills drills-table lint typecheck bench bench-syncs bench-pg strace targets bytecode test-bytecode clean chromium codex-next postgres

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[test]'
	touch $(STAMP)

# crw's modules compiled once, as pip does at install: where PYTHONDONTWRITEBYTECODE
# is set (this machine and CI set it), every process the demo and the tests start
# (a run, a host, each command) would compile them from source again. Only files
# changed since are recompiled; nothing here is tracked (.gitignore).
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q crw

demo: bytecode
	$(BIN)/crw flow demo

# The suite on WORKERS pytest-xdist workers (most tests wait on processes, sockets
# and fsyncs, so more workers than the 2 cores CI has), a module whose tests share a
# costly set-up on one of them (its xdist_group); the 20 slowest tests printed last,
# so drift is seen. `make test WORKERS=0` runs it in this one process. tests/wheel
# installs crw's wheel into a fresh venv, its dependencies from .venv/wheels
# (downloaded once, the versions requirements.lock pins; `make clean` drops them).
WORKERS ?= 4
test: lint typecheck test-bytecode
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadgroup --durations=20

# The test modules as pytest rewrites their asserts, compiled once before the
# workers start: with PYTHONDONTWRITEBYTECODE set pytest reads its cached pycs but
# never writes them, so each worker rewrote every module again, ~8 s of CPU a
# worker (collection 11.2 s of CPU, 2.9 s from the cache). A collection that
# fails here fails the run that follows, which reports it.
test-bytecode: bytecode
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest --collect-only -q > /dev/null || true

drills: test-bytecode
	$(BIN)/python -m pytest -q tests/drills

drills-table: test-bytecode
	CRW_DRILLS_TABLE=docs/drills.md $(BIN)/python -m pytest -q tests/drills

lint: $(STAMP)
	$(BIN)/ruff check crw tests bench
	$(BIN)/ruff format --check crw tests bench
	$(BIN)/lint-imports --no-cache --no-logo

typecheck: $(STAMP)
	$(BIN)/mypy

bench: bytecode
	$(BIN)/python bench/journal.py
	$(BIN)/python bench/scale.py --sizes 100,1000 --limit 120

targets: bytecode strace
	$(BIN)/python bench/targets.py

# A session call's syncs and files, counted by strace attached to the run process
# (bench/session_syncs.py); strace is installed from Debian when it is missing.
bench-syncs: bytecode strace
	$(BIN)/python bench/session_syncs.py --sizes 1000,10000 --trace-sizes 1000

# crw's journal on PostgreSQL beside DBOS Transact and raw inserts on one throwaway
# cluster (bench/pg.py). DBOS, pinned in bench/requirements-dbos.txt, goes into a venv
# of its own, .venv-dbos: never into crw's install.
DBOS_VENV := .venv-dbos
$(DBOS_VENV)/.installed: bench/requirements-dbos.txt
	$(PYTHON) -m venv $(DBOS_VENV)
	$(DBOS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r bench/requirements-dbos.txt
	touch $@

bench-pg: bytecode postgres $(DBOS_VENV)/.installed
	$(BIN)/python bench/pg.py --dbos-python $(DBOS_VENV)/bin/python --scale 10000

strace:
	command -v strace >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq strace; }

chromium:
	{ test -x /usr/bin/chromium && test -x /usr/bin/chromedriver; } || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver; }

# PostgreSQL's server binaries (initdb, pg_ctl, postgres) for the tests of the
# PostgreSQL journal store, which start a throwaway cluster of their own (CI does;
# without them those tests are skipped, and fail with CI set).
postgres:
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql; }

# The npm package whole, as `npm install -g @openai/codex` lays it out (its
# launcher, the platform package and its resources), from the registry by the
# committed lock; done again only when the lock changes.
CODEX_NEXT := .codex-npm/node_modules/.package-lock.json
codex-next: $(CODEX_NEXT)

$(CODEX_NEXT): .codex-npm/package.json .codex-npm/package-lock.json
	npm ci --prefix .codex-npm --no-audit --no-fund --loglevel=error
	touch $(CODEX_NEXT)

clean:
	rm -rf $(VENV)
