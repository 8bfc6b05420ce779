# Every target bootstraps what it needs: the .venv with the project installed, and the system
# packages the tests and demo drive (kcat, redis for the benchmark peer, a JDK for Spark).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.floe-installed
SYSSTAMP := $(VENV)/.floe-sysdeps
# quixstreams (its compat tests and examples/quixstreams_exactly_once.py) is installed with --no-deps:
# every release pins confluent-kafka below the version Floe uses (3.28.1: <2.13, and pydantic <2.14),
# yet runs on Floe's versions, which its tests check. Its other requirements are in pyproject.toml's
# dev extra, with ranges. The version is in the stamp's name, so changing it reinstalls.
QUIXSTREAMS_VERSION := 3.28.1
QUIXSTAMP := $(VENV)/.floe-quixstreams-$(QUIXSTREAMS_VERSION)
APT_PACKAGES := kcat redis-server redis-tools default-jre-headless
# KafkaJS (tests/compat/test_transactions_kafkajs.py, in make faults) from the npm registry, at the
# version package-lock.json names; Node.js and npm from Debian's packages when the machine lacks them.
KAFKAJS_DIR := tests/compat/kafkajs
KAFKAJS_STAMP := $(KAFKAJS_DIR)/node_modules/.floe-installed

.PHONY: fuzz test demo bench faults lint sysdeps venv clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Redone after every install of the project (it depends on $(STAMP)): quixstreams goes in last, on top of
# what pyproject.toml resolved.
$(QUIXSTAMP): $(STAMP)
	$(PY) -m pip install --quiet --no-deps 'quixstreams==$(QUIXSTREAMS_VERSION)'
	touch $(QUIXSTAMP)

venv: $(STAMP) $(QUIXSTAMP)

$(SYSSTAMP): | $(STAMP)
	@missing=""; \
	command -v kcat >/dev/null || missing="$$missing kcat"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-benchmark >/dev/null || missing="$$missing redis-tools"; \
	command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	if [ -n "$$missing" ]; then \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  echo "installing system packages:$$missing"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	touch $(SYSSTAMP)

sysdeps: $(SYSSTAMP)

$(KAFKAJS_STAMP): $(KAFKAJS_DIR)/package-lock.json
	@if ! command -v npm >/dev/null; then \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  echo "installing system packages: nodejs npm"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm; \
	fi
	npm ci --prefix $(KAFKAJS_DIR) --no-audit --no-fund --silent
	touch $(KAFKAJS_STAMP)

test: $(STAMP) $(QUIXSTAMP) $(SYSSTAMP)
	$(PY) -m pytest -q -m "not faults" -p no:cacheprovider --durations=30

faults: $(STAMP) $(QUIXSTAMP) $(SYSSTAMP) $(KAFKAJS_STAMP)
	$(PY) -m pytest -q -m faults -p no:cacheprovider
	FLOE_FAULTS_SECURITY=sasl_ssl $(PY) -m pytest -q -m faults -p no:cacheprovider tests/faults

fuzz: $(STAMP) $(QUIXSTAMP) $(SYSSTAMP)
	FLOE_HYPOTHESIS_PROFILE=explore $(PY) -m pytest -q -m "not faults" -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check .

demo: $(STAMP) $(SYSSTAMP)
	$(VENV)/bin/floe local demo
	$(VENV)/bin/floe local demo --security sasl_ssl --data-dir .floe/demo-secured

bench: $(STAMP) $(SYSSTAMP)
	$(PY) bench/log_append.py

clean:
	rm -rf $(VENV) .floe
