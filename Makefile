# talb — run as root: `sudo make testbed`, or `make testbed` when already root.
# Every target that needs the venv runs `setup` first; setup is idempotent.

VENV    ?= .venv
TALB    := $(VENV)/bin/talb
PYTEST  := $(VENV)/bin/python -m pytest
PREFIX  ?= talb
TOPOLOGY ?=
PYTEST_ARGS ?=
PROMETHEUS_PORT ?= 9090
GRAFANA_PORT ?= 3000
GRAFANA_DEB ?=

# One shell word whatever the value (PREFIX='a;rm -rf x' stays one argument,
# which talb then refuses): single quotes, each ' inside as '\''.
shq = '$(subst ','\'',$(1))'
TOPO_ARG := $(if $(TOPOLOGY),--topology $(call shq,$(TOPOLOGY)),)

.PHONY: help setup testbed testbed-down status monitoring monitoring-down grafana test bench clean

help:
	@echo "talb — tensor-aware load balancing testbed"
	@echo "  sudo make testbed       build the default fabric, load the switch programs, run a demo"
	@echo "  sudo make testbed-down  remove everything 'testbed' made"
	@echo "  sudo make status        show the running testbed"
	@echo "  sudo make monitoring    Prometheus (+ Grafana if installed) for every testbed and run; prints the URLs"
	@echo "  sudo make monitoring-down  stop what 'monitoring' started"
	@echo "  sudo make grafana       install Grafana from its APT repository (or GRAFANA_DEB=file.deb) for 'monitoring'"
	@echo "  sudo make test          run the test suite (what CI runs)"
	@echo "  sudo make bench         benchmarks: data path (BPF vs empty, BPF vs bridge), agent loop, TaLB/host tagging cost"
	@echo "  sudo make setup         install packages, kernel headers, the venv and 'talb' on sudo's PATH (done by the others)"
	@echo "  sudo make clean         stop the testbed and monitoring, remove the venv and our /usr/local/bin/talb"
	@echo Variables: PREFIX=$(call shq,$(PREFIX)) "TOPOLOGY=<file.yaml> PYTEST_ARGS=..." \
		PROMETHEUS_PORT=$(call shq,$(PROMETHEUS_PORT)) GRAFANA_PORT=$(call shq,$(GRAFANA_PORT))

setup:
	@bash scripts/setup.sh

testbed: setup
	$(TALB) testbed up --replace --prefix $(call shq,$(PREFIX)) $(TOPO_ARG)
	$(TALB) testbed demo --prefix $(call shq,$(PREFIX))

testbed-down: setup
	$(TALB) testbed down --prefix $(call shq,$(PREFIX))

status: setup
	$(TALB) testbed status --prefix $(call shq,$(PREFIX))

monitoring: setup
	$(TALB) monitoring up --prometheus-port $(call shq,$(PROMETHEUS_PORT)) --grafana-port $(call shq,$(GRAFANA_PORT))

monitoring-down: setup
	$(TALB) monitoring down

# Grafana's own APT repository (not in Debian); says what to do where it is unreachable.
grafana:
	@GRAFANA_DEB=$(call shq,$(GRAFANA_DEB)) bash scripts/grafana.sh

test: setup
	$(PYTEST) $(PYTEST_ARGS)

bench: setup
	$(TALB) bench datapath
	$(TALB) bench agent
	$(PYTEST) -m bench -s -q

clean:
	-@[ -x $(call shq,$(TALB)) ] && $(call shq,$(TALB)) monitoring down || true
	-@[ -x $(call shq,$(TALB)) ] && $(call shq,$(TALB)) testbed down --prefix $(call shq,$(PREFIX)) || true
	-@VENV=$(call shq,$(VENV)) bash scripts/talb-link.sh remove
	rm -rf $(call shq,$(VENV)) .pytest_cache .hypothesis *.egg-info
