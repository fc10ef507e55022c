# gtmcluster: `make demo` and `make test` each bootstrap .venv and what they need.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# command:Debian package, installed by tools/ensure-system-tools when missing
TEST_TOOLS := dig:bind9-dnsutils openssl:openssl delv:bind9-dnsutils dnstap-read:bind9-dnsutils kdig:knot-dnsutils dnsperf:dnsperf unbound:unbound ip:iproute2 chromium:chromium gdnsd:gdnsd knotd:knot dnsviz:dnsviz systemd-analyze:systemd snmpd:snmpd snmpget:snmp haproxy:haproxy nginx:nginx pdns_server:pdns-server '/usr/lib/*/pdns/libbindbackend.so:pdns-backend-bind' promtool:prometheus prometheus:prometheus
DEMO_TOOLS := dig:bind9-dnsutils
BENCH_TOOLS := dig:bind9-dnsutils dnsperf:dnsperf nsd:nsd taskset:util-linux gdnsd:gdnsd pdns_server:pdns-server '/usr/lib/*/pdns/libbindbackend.so:pdns-backend-bind'
CHAOS_TOOLS := ip:iproute2 faketime:faketime
# make test runs the tests in TEST_JOBS parallel workers, each in a network namespace of its
# own (tests/conftest.py); that needs root, so without root they run in one process. Tests
# marked `alone` (they measure delays or rates) run after them, one at a time.
TEST_JOBS ?= $(if $(filter 0,$(shell id -u)),2,0)

.PHONY: demo test lint unit docs fuzz bench bench-compare chaos clean

$(STAMP): setup.py pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@# twistd finds the `gtm` plugin of this checkout through this path file
	$(BIN)/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'gtmcluster-dev-plugins.pth').write_text('$(CURDIR)/twistd-plugins\n')"
	@touch $@

demo: $(STAMP)
	@tools/ensure-system-tools $(DEMO_TOOLS)
	$(BIN)/gtmcluster demo --config etc/cluster.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	@# the layers of docs/architecture.md, and no import circle (pyproject.toml's contracts)
	$(BIN)/lint-imports --no-cache

test: $(STAMP) lint
	@tools/ensure-system-tools $(TEST_TOOLS)
	$(BIN)/pytest -n $(TEST_JOBS) --dist loadfile -m "not alone"
	$(BIN)/pytest -m alone

unit: $(STAMP)
	$(BIN)/pytest -m "not process"

# docs/architecture.md's package table, written from the code (tests/unit/test_docs_table.py
# fails when it is out of date), and docs/openapi.json, the API's OpenAPI description written
# from the route table (tests/unit/test_api_openapi.py fails when it is out of date);
# tools/docnames.py lists names the docs give that do not exist
docs: $(STAMP)
	$(BIN)/python -m tools.packagetable
	$(BIN)/python -m tools.openapi
	$(BIN)/python -m tools.docnames

# every fuzz target under atheris, FUZZ_SECONDS each (make test runs them briefly):
# make fuzz FUZZ_SECONDS=600 FUZZ_TARGETS="dns_response peer_stream"
FUZZ_SECONDS ?= 120
fuzz: $(STAMP)
	$(BIN)/python -m fuzz.run --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

bench: $(STAMP)
	@tools/ensure-system-tools $(TEST_TOOLS)
	bench/dnsperf.sh

# our node against NSD, PowerDNS, gdnsd and a bare Python floor, alternating, in the same run:
# make bench-compare ARGS='--rounds 5'
bench-compare: $(STAMP)
	@tools/ensure-system-tools $(BENCH_TOOLS)
	$(BIN)/python bench/compare.py $(ARGS)

# the chaos run (as root, a few minutes): make chaos ARGS='--seconds 120 --seed 7'
chaos: $(STAMP)
	@tools/ensure-system-tools $(CHAOS_TOOLS)
	$(BIN)/python bench/chaos.py $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info var .pytest_cache .mypy_cache .ruff_cache .hypothesis
